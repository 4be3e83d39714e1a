"""The three ways a server renders an untrusted template, for the hostile suites to run each
test through all of them: the security promise (a string or a TemplateError, within the
limits, nothing escaping) holds for every one, with the same outcome.

* ``plain``: ``Template.render``.
* ``provenance``: ``Template.render_with_provenance``, its ``runs`` built (the record of who
  wrote each character, which sanitising and assistant masks read).
* ``tokens``: the provenance render encoded as ``apply_chat_template(tokenize=True,
  sanitize_control_tokens="provenance", return_assistant_tokens_mask="messages")`` encodes
  it: the control tokens the caller's data wrote found and made plain text, the assistant
  mask worked out from the runs, the ids made by a real tokenizer (Qwen2's, from the shared
  corpus). Text that no tokenizer can encode (a lone surrogate) is refused there with
  ``mj.UnencodableTextError``, which this mode checks, and returns the text all the same.

:func:`install` makes ``Template.render`` do one of them, in this process; a child process
started by the suites does the same when :data:`MODE_VARIABLE` names a mode (see
security_support.run_isolated). Each mode returns the text, so every assertion a test makes on
a plain render holds for the others unchanged.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Callable, Dict, Optional

import minijinja_py as mj
from minijinja_py.environment import Template

MODES = ("plain", "provenance", "tokens")
#: The environment variables telling a child process which mode to install, and where this
#: module is.
MODE_VARIABLE = "MINIJINJA_PY_TEST_RENDER_MODE"
SUPPORT_VARIABLE = "MINIJINJA_PY_TEST_SUPPORT"
#: What a child script runs after importing minijinja_py (see install_from_environment).
CHILD_SETUP = """
import os as _os, sys as _sys
if _os.environ.get("MINIJINJA_PY_TEST_RENDER_MODE"):
    _sys.path.insert(0, _os.environ["MINIJINJA_PY_TEST_SUPPORT"])
    import render_modes
    render_modes.install_from_environment()
"""
_PLAIN_RENDER = Template.render
_TOKENIZER_FAMILY = "qwen2"
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
_tokenizer: Optional[Any] = None


def corpus_tokenizer_dir() -> Path:
    corpus = Path(os.environ.get("MINIJINJA_PY_CORPUS",
                                 Path(__file__).resolve().parents[2].parent / "shared" / "corpus"))
    return corpus / "tokenizers" / _TOKENIZER_FAMILY


def tokens_available() -> bool:
    """Whether the tokens mode can run here: the tokenizers extra and the corpus tokenizer."""
    try:
        import tokenizers  # noqa: F401
    except ImportError:
        return False
    return (corpus_tokenizer_dir() / "tokenizer.json").is_file()


def _messages(variables: Dict[str, Any]) -> list:
    """The conversation the mask rule reads: ``messages`` when it is a list of dicts."""
    messages = variables.get("messages")
    if isinstance(messages, list) and all(isinstance(item, dict) for item in messages):
        return messages
    return []


def _render_with_provenance(self: Template, *args: Any, **kwargs: Any) -> str:
    result = self.render_with_provenance(*args, **kwargs)
    result.runs  # the record a caller reads: built within the render's limits, or refused
    return result.text


def _render_and_encode(self: Template, *args: Any, **kwargs: Any) -> str:
    global _tokenizer
    from minijinja_py.chat import provenance_uses
    from minijinja_py.chat.tokens import ChatTokenizer

    if _tokenizer is None:
        _tokenizer = ChatTokenizer.from_pretrained(corpus_tokenizer_dir())
    variables = dict(*args, **kwargs)
    result = self.render_with_provenance(variables)
    try:
        provenance_uses.encode_with_provenance(
            _tokenizer, result, _messages(variables), (),
            sanitize=provenance_uses.SanitizeRule(), mask=provenance_uses.AssistantMaskRule())
    except mj.UnencodableTextError:
        # text that renders but that no tokenizer encodes (a lone surrogate): refused by the
        # tokens path with this error, as documented; the text is the render's all the same
        assert _LONE_SURROGATE.search(result.text), "refused text without a lone surrogate"
    return result.text


_RENDERS: Dict[str, Callable[..., str]] = {
    "plain": _PLAIN_RENDER,
    "provenance": _render_with_provenance,
    "tokens": _render_and_encode,
}


def install(mode: str) -> None:
    """Make ``Template.render`` render in ``mode`` (``plain`` puts the original back)."""
    Template.render = _RENDERS[mode]  # type: ignore[method-assign]


def install_from_environment() -> None:
    """In a child process: install the mode :data:`MODE_VARIABLE` names, if any."""
    mode = os.environ.get(MODE_VARIABLE)
    if mode:
        install(mode)


__all__ = ["MODES", "MODE_VARIABLE", "SUPPORT_VARIABLE", "CHILD_SETUP", "install",
           "install_from_environment", "tokens_available"]
