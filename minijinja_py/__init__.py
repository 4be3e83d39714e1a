"""minijinja_py: render LLM chat templates exactly like Jinja2 (as transformers configures it),
with a Lark-based interpreter and no Jinja2 at runtime.

>>> import minijinja_py as mj
>>> env = mj.chat_environment()
>>> env.from_string("{% for m in messages %}{{ m.role }}: {{ m.content }}\\n{% endfor %}").render(
...     messages=[{"role": "user", "content": "Hi"}])
'user: Hi\\n'

Importing the package loads only the exception classes; everything else is imported on first
use (``import minijinja_py`` stays in the low milliseconds, see benchmarks/).
"""

from .exceptions import (DeadlineExceededError, FilterArgumentError, LimitExceededError,
                         SecurityError, TemplateAssertionError,
                         SourceTooLargeError, TemplateError, TemplateRuntimeError,
                         TemplateSyntaxError, UndefinedError)

__version__ = "0.2.0"

# public name -> the module that defines it (imported when the name is first used)
_LAZY = {
    "Environment": "environment", "Template": "environment", "chat_environment": "environment",
    "Limits": "guard.limits",
    "Markup": "runtime.markup", "escape": "runtime.markup",
    "Undefined": "runtime.objects", "StrictUndefined": "runtime.objects",
    "ChainableUndefined": "runtime.objects", "pass_environment": "runtime.objects",
    "ProvenanceResult": "provenance.origins", "Run": "provenance.origins",
    "Origin": "provenance.origins",
    # the chat layer (minijinja_py/chat/), above the engine
    "ChatTemplate": "chat.pipeline", "RenderResult": "chat.pipeline",
    "apply_chat_template": "chat.api", "ChatTemplateValueError": "chat.pipeline",
    "ChatConfigError": "chat.config",
    "get_json_schema": "chat.schema", "TypeHintParsingException": "chat.schema",
    "DocstringParsingException": "chat.schema",
    "GGUFError": "chat.gguf",
    "RenderPool": "chat.pool", "RenderTimeoutError": "chat.pool",
    "RenderMemoryError": "chat.pool", "WorkerCrashedError": "chat.pool",
    "ChatTokenizer": "chat.tokens", "ChatEncoding": "chat.tokens",
    "TokenizersNotInstalledError": "chat.tokens",
    "TensorLibraryNotInstalledError": "chat.tokenizer_api",
    "UnencodableTextError": "chat.tokens",
}

__all__ = [
    "TemplateError", "TemplateSyntaxError", "TemplateAssertionError", "TemplateRuntimeError",
    "UndefinedError",
    "SecurityError", "LimitExceededError", "SourceTooLargeError", "DeadlineExceededError",
    "FilterArgumentError",
    "__version__",
    *_LAZY,
]

TYPE_CHECKING = False
if TYPE_CHECKING:  # pragma: no cover - what static analysis sees
    from .chat.config import ChatConfigError
    from .chat.gguf import GGUFError
    from .chat.api import apply_chat_template
    from .chat.pipeline import ChatTemplate, ChatTemplateValueError, RenderResult
    from .chat.pool import RenderMemoryError, RenderPool, RenderTimeoutError, WorkerCrashedError
    from .chat.schema import DocstringParsingException, TypeHintParsingException, get_json_schema
    from .chat.tokenizer_api import TensorLibraryNotInstalledError
    from .chat.tokens import (ChatEncoding, ChatTokenizer, TokenizersNotInstalledError,
                              UnencodableTextError)
    from .environment import Environment, Template, chat_environment
    from .guard.limits import Limits
    from .runtime.markup import Markup, escape
    from .provenance.origins import Origin, ProvenanceResult, Run
    from .runtime.objects import ChainableUndefined, StrictUndefined, Undefined, pass_environment


def __getattr__(name: str) -> object:
    module_name = _LAZY.get(name)
    if module_name is None:
        raise AttributeError(f"module 'minijinja_py' has no attribute {name!r}")
    from importlib import import_module

    from ._startup.fastimport import install

    install()  # the engine's modules load with less machinery from here on: see fastimport
    from ._startup.gcpause import paused_gc

    with paused_gc():  # importing creates objects that all stay alive: see gcpause
        value = getattr(import_module(f".{module_name}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list:
    return sorted(__all__)
