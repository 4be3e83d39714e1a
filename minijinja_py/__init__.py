"""minijinja_py: render LLM chat templates exactly like Jinja2 (as transformers configures it),
with a Lark-based interpreter and no Jinja2 at runtime.

>>> import minijinja_py as mj
>>> env = mj.chat_environment()
>>> env.from_string("{% for m in messages %}{{ m.role }}: {{ m.content }}\\n{% endfor %}").render(
...     messages=[{"role": "user", "content": "Hi"}])
'user: Hi\\n'
"""

from .chat import ChatConfigError, ChatTemplate, RenderResult, apply_chat_template
from .environment import Environment, Template, chat_environment
from .gguf import GGUFError
from .schema import DocstringParsingException, TypeHintParsingException, get_json_schema
from .exceptions import (FilterArgumentError, LimitExceededError, SecurityError, TemplateError,
                         TemplateRuntimeError, TemplateSyntaxError, UndefinedError)
from .limits import Limits
from .markup import Markup, escape
from .runtime import ChainableUndefined, StrictUndefined, Undefined, pass_environment

__version__ = "0.1.0"

__all__ = [
    "Environment", "Template", "chat_environment", "Limits",
    "TemplateError", "TemplateSyntaxError", "TemplateRuntimeError", "UndefinedError",
    "SecurityError", "LimitExceededError", "FilterArgumentError",
    "Undefined", "StrictUndefined", "ChainableUndefined", "Markup", "escape",
    "pass_environment", "__version__",
    "ChatTemplate", "RenderResult", "apply_chat_template", "ChatConfigError",
    "get_json_schema", "TypeHintParsingException", "DocstringParsingException", "GGUFError",
]
