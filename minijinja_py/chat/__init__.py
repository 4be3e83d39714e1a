"""The chat layer: everything about chats that sits above the Jinja engine.

The engine (the modules of :mod:`minijinja_py` itself: scanner, grammar, parser, compiler,
sandbox, limits, filters) renders templates and knows nothing about conversations. This
package uses only the engine's public API (``chat_environment``, ``Template``, ``Limits``, the
errors) to do what transformers does around a chat template:

- :mod:`.pipeline`: ``apply_chat_template(..., tokenize=False)``: ``ChatTemplate``, the data
  steps before the render and ``continue_final_message`` after it;
- :mod:`.config`: loading model folders, ``tokenizer_config.json`` and ``.jinja`` files;
- :mod:`.gguf`: the chat templates and special tokens in GGUF metadata;
- :mod:`.schema`: JSON schemas for tools given as Python functions;
- :mod:`.tokens`: ``apply_chat_template(..., tokenize=True)``: ``ChatTokenizer`` (a model
  folder's ``tokenizer.json`` through the optional ``tokenizers`` package), token ids,
  attention and assistant masks, control-token sanitising, padding and truncation;
- :mod:`.tokenizer_caps`: caps on what a model folder's tokenizer may hold, checked before it
  is built;
- :mod:`.pool`: renders in worker processes, for servers running untrusted templates;
- :mod:`.cli`: the ``minijinja-py`` command.
"""

from .config import (CHAT_TEMPLATE_DIR, CHAT_TEMPLATE_FILE, MAX_CONFIG_BYTES, MAX_FOLDER_BYTES,
                     SPECIAL_TOKEN_NAMES, TOKENIZER_CONFIG_FILE, ChatConfig, ChatConfigError,
                     load_chat_config, select_template)
from .pipeline import (CONTINUE_FINAL_MESSAGE_MARKER, REASONING_FIELDS, ChatTemplate,
                       ChatTemplateValueError, RenderResult, apply_chat_template,
                       plain_template_data)
from .tokens import (ChatEncoding, ChatTokenizer, TokenizersNotInstalledError,
                     UnencodableTextError, load_tokenizer)

__all__ = [
    "ChatTemplate", "RenderResult", "ChatTemplateValueError", "apply_chat_template",
    "plain_template_data", "ChatConfig", "ChatConfigError", "load_chat_config",
    "select_template", "CONTINUE_FINAL_MESSAGE_MARKER", "REASONING_FIELDS",
    "SPECIAL_TOKEN_NAMES", "CHAT_TEMPLATE_FILE", "CHAT_TEMPLATE_DIR", "TOKENIZER_CONFIG_FILE",
    "MAX_CONFIG_BYTES", "MAX_FOLDER_BYTES",
    "ChatTokenizer", "ChatEncoding", "TokenizersNotInstalledError", "UnencodableTextError",
    "load_tokenizer",
]
