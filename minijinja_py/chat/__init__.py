"""The chat layer: everything about chats that sits above the Jinja engine.

The engine (the modules of :mod:`minijinja_py` itself: syntax/, compiler/, runtime/, guard/,
provenance/) renders templates and knows nothing about conversations. This
package uses only the engine's public API (``chat_environment``, ``Template``, ``Limits``, the
errors) to do what transformers does around a chat template:

- :mod:`.api`: ``apply_chat_template``, the one call: it hands a render to .pipeline and an
  encoding (``tokenize=True``) to .tokens;
- :mod:`.pipeline`: ``apply_chat_template(..., tokenize=False)``: ``ChatTemplate``, the data
  steps before the render and ``continue_final_message`` after it;
- :mod:`.config`: loading model folders, ``tokenizer_config.json`` and ``.jinja`` files;
- :mod:`.files`: reading a model folder's files safely (regular files inside the folder,
  capped), for .config, .gguf and .tokens;
- :mod:`.gguf`: the chat templates and special tokens in GGUF metadata;
- :mod:`.schema`: JSON schemas for tools given as Python functions;
- :mod:`.capabilities`: what a template can do, decided from provenance renders of probe
  conversations, each answer with its witness (``ChatTemplate.capabilities()``);
- :mod:`.polyfills`: minja's polyfills for what a template cannot do (``render(polyfill=...)``);
- :mod:`.response_parser` (with :mod:`.response_layout`, :mod:`.response_stream` and
  :mod:`.response_export`): the parser of a model's output derived from the template
  (``ChatTemplate.response_parser()``);
- :mod:`.prefix_report`: whether each turn's render extends the previous one
  (``ChatTemplate.prefix_report()``);
- :mod:`.tokens`: ``apply_chat_template(..., tokenize=True)``: ``ChatTokenizer`` (a model
  folder's ``tokenizer.json`` through the optional ``tokenizers`` package), token ids,
  attention and assistant masks, control-token sanitising, padding and truncation;
- :mod:`.tokenizer_caps`: caps on what a model folder's tokenizer may hold, checked before it
  is built;
- :mod:`.pool`: renders in worker processes, for servers running untrusted templates;
- :mod:`.cli`: the ``minijinja-py`` command.
"""

# public name -> the module of this package that defines it, imported on first use: rendering
# with ChatTemplate needs only .pipeline, and importing everything here (the tokenizer layer,
# the config loader and what they import: json, pathlib, threading...) doubled the cold start
# of a first chat render (see tests/test_cold_start.py)
_LAZY = {
    "ChatTemplate": "pipeline", "RenderResult": "pipeline", "ChatTemplateValueError": "pipeline",
    "apply_chat_template": "api", "plain_template_data": "pipeline",
    "CONTINUE_FINAL_MESSAGE_MARKER": "pipeline", "REASONING_FIELDS": "pipeline",
    "ChatConfig": "config", "ChatConfigError": "config", "load_chat_config": "config",
    "select_template": "config", "SPECIAL_TOKEN_NAMES": "config",
    "CHAT_TEMPLATE_FILE": "config", "CHAT_TEMPLATE_DIR": "config",
    "TOKENIZER_CONFIG_FILE": "config", "MAX_CONFIG_BYTES": "config",
    "MAX_FOLDER_BYTES": "config",
    "ChatTokenizer": "tokens", "ChatEncoding": "tokens", "TokenizersNotInstalledError": "tokens",
    "UnencodableTextError": "tokens", "TensorLibraryNotInstalledError": "tokenizer_api",
    "load_tokenizer": "tokens",
    "Capabilities": "capabilities", "CAPABILITY_NAMES": "capabilities",
    "POLYFILLS": "polyfills", "ProbesDeadlineExceededError": "probe_deadline",
    "ResponseParser": "response_parser", "ResponseParseError": "response_parser",
    "ResponseStream": "response_stream", "PrefixBoundary": "prefix_report",
    "PrefixCheck": "prefix_report",
}

__all__ = list(_LAZY)

TYPE_CHECKING = False
if TYPE_CHECKING:  # pragma: no cover - what static analysis sees
    from .config import (CHAT_TEMPLATE_DIR, CHAT_TEMPLATE_FILE, MAX_CONFIG_BYTES,
                         MAX_FOLDER_BYTES, SPECIAL_TOKEN_NAMES, TOKENIZER_CONFIG_FILE,
                         ChatConfig, ChatConfigError, load_chat_config, select_template)
    from .api import apply_chat_template
    from .pipeline import (CONTINUE_FINAL_MESSAGE_MARKER, REASONING_FIELDS, ChatTemplate,
                           ChatTemplateValueError, RenderResult, plain_template_data)
    from .capabilities import CAPABILITY_NAMES, Capabilities
    from .polyfills import POLYFILLS
    from .prefix_report import PrefixBoundary, PrefixCheck
    from .probe_deadline import ProbesDeadlineExceededError
    from .response_parser import ResponseParseError, ResponseParser
    from .response_stream import ResponseStream
    from .tokenizer_api import TensorLibraryNotInstalledError
    from .tokens import (ChatEncoding, ChatTokenizer, TokenizersNotInstalledError,
                         UnencodableTextError, load_tokenizer)


def __getattr__(name: str) -> object:
    module_name = _LAZY.get(name)
    if module_name is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib import import_module

    value = getattr(import_module(f".{module_name}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list:
    return sorted(set(globals()) | set(__all__))
