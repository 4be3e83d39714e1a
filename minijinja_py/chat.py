"""The chat-template API: what ``tokenizer.apply_chat_template(..., tokenize=False)`` does.

Last layer of the package, above :mod:`minijinja_py.environment`. :class:`ChatTemplate` wraps one
template compiled in :func:`~minijinja_py.environment.chat_environment` and reproduces the steps
transformers 5.24 takes around the render, in the same order:

1. the conversation must not be empty (:class:`ChatTemplateValueError`, a ValueError);
2. message objects (dicts, dataclasses, pydantic-style objects with ``model_dump``) become dicts,
   and every top-level message key whose value is None is dropped;
3. ``continue_final_message`` together with ``add_generation_prompt`` is refused (ValueError,
   again a :class:`ChatTemplateValueError`);
4. tools given as Python functions become JSON schemas (:func:`minijinja_py.schema.get_json_schema`),
   documents must be dicts;
5. everything the template sees is rebuilt from plain JSON types (str, int, float, bool, None,
   dict, list, tuple); any other object becomes the inert string ``"<TypeName>"``, so no host
   object reaches a template and the caller's objects are never modified;
6. a message's reasoning is copied between ``reasoning_content`` and ``thinking`` (``reasoning`` is
   read too);
7. with ``continue_final_message`` a marker is appended to the final message's text, the template
   renders, and the output is cut at the marker;
8. ``tools`` and ``documents`` are always passed (None when absent), with ``add_generation_prompt``,
   the tokenizer's special tokens and every other keyword as template variables.

Loading (:meth:`ChatTemplate.from_tokenizer_config`) follows transformers too: a model directory's
``chat_template.jinja`` and ``additional_chat_templates/*.jinja`` win over the ``chat_template``
of ``tokenizer_config.json``; a list of named templates is selected by name, else ``tool_use`` when
tools are given, else ``default``. GGUF files are read by :mod:`minijinja_py.gguf`.

A model folder is untrusted input: only regular files are read (never a FIFO, device or socket,
which are refused from ``stat()`` and opened non-blocking besides), only files that resolve inside
the folder (symlinks within it are fine, and in a Hugging Face cache snapshot the repository's
``blobs/`` too), at most :data:`MAX_CONFIG_BYTES` per JSON file, ``Limits.max_source_size``
characters per template file and :data:`MAX_FOLDER_BYTES` in all. Every refusal, and every
unreadable, non-UTF-8 or invalid (too deep, huge-integer) JSON file, is a
:class:`ChatConfigError` naming the file.
"""

from __future__ import annotations

import dataclasses
import datetime as _datetime
import inspect
import json
import os
import stat
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import (Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple,
                    Union)

from .environment import Environment, Template, chat_environment
from .exceptions import TemplateError
from .schema import get_json_schema

__all__ = [
    "ChatTemplate",
    "RenderResult",
    "ChatConfig",
    "ChatConfigError",
    "ChatTemplateValueError",
    "apply_chat_template",
    "load_chat_config",
    "select_template",
    "plain_template_data",
    "CONTINUE_FINAL_MESSAGE_MARKER",
    "REASONING_FIELDS",
    "SPECIAL_TOKEN_NAMES",
]

PathLike = Union[str, "os.PathLike[str]"]
Now = Union[None, _datetime.datetime, Callable[[], Any]]

#: Appended to the final message by ``continue_final_message``; the output is cut where it lands.
#: It is transformers' own marker: templates that transform the text (strip, split, length...)
#: must see exactly what they see under transformers for the cut to land in the same place.
CONTINUE_FINAL_MESSAGE_MARKER = "CONTINUE_FINAL_MESSAGE_TAG "

#: The names a message's reasoning travels under; the first is the one chat templates read.
REASONING_FIELDS: Tuple[str, ...] = ("reasoning_content", "thinking", "reasoning")

#: The tokenizer attributes passed to templates as variables (transformers' special_tokens_map).
SPECIAL_TOKEN_NAMES: Tuple[str, ...] = ("bos_token", "eos_token", "unk_token", "sep_token",
                                        "pad_token", "cls_token", "mask_token")

CHAT_TEMPLATE_FILE = "chat_template.jinja"
CHAT_TEMPLATE_DIR = "additional_chat_templates"
TOKENIZER_CONFIG_FILE = "tokenizer_config.json"
SPECIAL_TOKENS_MAP_FILE = "special_tokens_map.json"
LEGACY_CHAT_TEMPLATE_JSON = "chat_template.json"

# Data deeper than this is refused (a cycle would otherwise recurse until Python gives up).
MAX_DATA_DEPTH = 200


#: Most bytes read from one JSON file of a model folder (tokenizer_config.json and friends).
MAX_CONFIG_BYTES = 16 * 1024 * 1024
#: Most bytes read from one model folder in all (its config and template files together).
MAX_FOLDER_BYTES = 64 * 1024 * 1024


class ChatConfigError(ValueError):
    """A tokenizer config, model directory or GGUF file has no usable chat template, the
    requested named template does not exist, or a file of the model folder is refused (not a
    regular file, outside the folder, too large, not UTF-8, not valid JSON). The message names
    the file."""


class ChatTemplateValueError(TemplateError, ValueError):
    """A render request that transformers refuses with a ValueError: an empty conversation,
    ``continue_final_message`` together with ``add_generation_prompt``, or a final message that
    cannot be continued. Both a :class:`~minijinja_py.TemplateError` and a ValueError, so either
    ``except`` catches it; ``str()`` is the message alone (no template location)."""


# ---- results ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class RenderResult:
    """A rendered prompt and the character spans of its ``{% generation %}`` blocks.

    ``generation_spans`` holds ``(start, end)`` offsets into ``text``, one per generation block in
    render order, as transformers' ``return_assistant_tokens_mask`` computes them before
    tokenizing.
    """

    text: str
    generation_spans: List[Tuple[int, int]] = field(default_factory=list)

    def generation_texts(self) -> List[str]:
        """The text of each generation span (what an assistant mask would cover)."""
        return [self.text[start:end] for start, end in self.generation_spans]

    def __str__(self) -> str:
        return self.text


# ---- step 2 and 5: plain data ----------------------------------------------------------------
def _is_dataclass_instance(value: Any) -> bool:
    return dataclasses.is_dataclass(value) and not isinstance(value, type)


def _has_model_dump(value: Any) -> bool:
    return callable(getattr(value, "model_dump", None))


def _objects_to_dicts(value: Any, depth: int = 0) -> Any:
    """Message objects (and objects nested in them) become dicts; other values are kept."""
    if depth > MAX_DATA_DEPTH:
        raise ValueError(f"conversation data is nested deeper than {MAX_DATA_DEPTH} levels "
                         "(or contains a reference cycle)")
    if isinstance(value, Mapping):
        result = {}
        for key, item in value.items():
            result[key] = _objects_to_dicts(item, depth + 1)
        return result
    if isinstance(value, list):
        return [_objects_to_dicts(item, depth + 1) for item in value]
    if isinstance(value, tuple):
        return tuple(_objects_to_dicts(item, depth + 1) for item in value)
    if _is_dataclass_instance(value):
        result = {}
        for dc_field in dataclasses.fields(value):
            result[dc_field.name] = _objects_to_dicts(getattr(value, dc_field.name), depth + 1)
        return result
    if _has_model_dump(value):
        return _objects_to_dicts(value.model_dump(), depth + 1)
    return value


def _is_numpy_scalar(value: Any) -> bool:
    # numpy scalars (np.int64, np.bool_ ...) without importing numpy: they unwrap with .item()
    module = type(value).__module__ or ""
    return module.split(".")[0] == "numpy" and hasattr(value, "item") \
        and getattr(value, "shape", None) == ()


def plain_template_data(value: Any, _depth: int = 0) -> Any:
    """Rebuild ``value`` out of plain JSON types, as transformers does before rendering.

    str/int/float/bool/None are kept (subclasses such as enums are reduced to the base type),
    mappings become dicts, lists stay lists and tuples tuples, dataclass instances and objects with
    ``model_dump()`` become dicts, numpy scalars their Python value; anything else becomes the
    placeholder string ``"<TypeName>"``. The result shares no container with ``value``.
    """
    if value is None or type(value) in (str, int, float, bool):
        return value
    if _depth > MAX_DATA_DEPTH:
        raise ValueError(f"template data is nested deeper than {MAX_DATA_DEPTH} levels "
                         "(or contains a reference cycle)")
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, int):
        return int.__int__(value)
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, Mapping):
        result = {}
        for key, item in value.items():
            result[plain_template_data(key, _depth + 1)] = plain_template_data(item, _depth + 1)
        return result
    if isinstance(value, list):
        return [plain_template_data(item, _depth + 1) for item in value]
    if isinstance(value, tuple):
        return tuple(plain_template_data(item, _depth + 1) for item in value)
    if _is_numpy_scalar(value):
        return plain_template_data(value.item(), _depth + 1)
    if _is_dataclass_instance(value):
        result = {}
        for dc_field in dataclasses.fields(value):
            result[dc_field.name] = plain_template_data(getattr(value, dc_field.name), _depth + 1)
        return result
    if _has_model_dump(value):
        return plain_template_data(value.model_dump(), _depth + 1)
    return f"<{type(value).__name__}>"


def _normalize_conversation(messages: Any) -> List[Dict[str, Any]]:
    """Steps 1-2: a non-empty list of message dicts without None-valued keys."""
    if isinstance(messages, (str, bytes, Mapping)):
        raise TypeError("messages must be a list of messages (dicts, dataclasses or pydantic "
                        f"models), not a {type(messages).__name__}")
    if not isinstance(messages, (list, tuple)) and hasattr(messages, "messages"):
        messages = messages.messages  # a Conversation-like object
    try:
        items = list(messages)
    except TypeError:
        raise TypeError("messages must be a list of messages, not a "
                        f"{type(messages).__name__}") from None
    if not items:
        raise ChatTemplateValueError("Cannot apply a chat template to an empty conversation: "
                                     "give at least one message.")
    normalized = []
    for item in items:
        message = _objects_to_dicts(item)
        if not isinstance(message, dict):
            raise TypeError("Chat messages should be dicts, dataclasses or pydantic models, but "
                            f"got {message!r}.")
        normalized.append({key: value for key, value in message.items() if value is not None})
    return normalized


def _alias_reasoning(message: Dict[str, Any]) -> Dict[str, Any]:
    """Step 6: the first reasoning value found also goes under ``thinking`` and
    ``reasoning_content`` (``thinking`` keeps an existing value of its own)."""
    reasoning = None
    for key in REASONING_FIELDS:
        if message.get(key) is not None:
            reasoning = message[key]
            break
    if reasoning is None:
        return message
    # Key order matters to templates that print whole messages: "thinking" comes first, an
    # existing "reasoning_content" keeps its place, a new one goes last.
    aliased: Dict[str, Any] = {"thinking": reasoning}
    aliased.update(message)
    aliased["reasoning_content"] = reasoning
    return aliased


# ---- step 4: tools and documents -------------------------------------------------------------
def _tool_schemas(tools: Any) -> Optional[List[Any]]:
    if tools is None:
        return None
    if isinstance(tools, (str, bytes, Mapping)):
        raise ValueError("tools must be a list of JSON schemas (dicts) or functions, not a "
                         f"single {type(tools).__name__}")
    schemas = []
    for tool in tools:
        if isinstance(tool, Mapping):
            schemas.append(tool)
        elif inspect.isfunction(tool) or inspect.ismethod(tool):
            schemas.append(get_json_schema(tool))
        else:
            raise ValueError("Tools should either be a JSON schema, or a callable function with "
                             "type hints and a docstring suitable for auto-conversion to a "
                             f"schema; got {type(tool).__name__}.")
    return schemas


def _check_documents(documents: Any) -> None:
    if documents is None:
        return
    if isinstance(documents, (str, bytes, Mapping)):
        raise TypeError("documents must be a list of dicts with 'title' and 'text' keys")
    for document in documents:
        if not isinstance(document, Mapping):
            raise TypeError("Documents should be a list of dicts with 'title' and 'text' keys!")


# ---- step 7: continue_final_message ----------------------------------------------------------
def _mark_final_message(chat: List[Dict[str, Any]], continue_final_message: Union[bool, str],
                        source: str) -> str:
    """Append the marker to the final message's text (in ``chat``, a private copy) and return
    that text as it was; raises ChatTemplateValueError (a ValueError) as transformers does."""
    key = continue_final_message if isinstance(continue_final_message, str) else "content"
    final = chat[-1]
    value = final.get(key)
    if value is None:
        raise ChatTemplateValueError(f'continue_final_message is set but the final message has '
                                     f'no "{key}" to continue!')
    fields = [key]
    if key in REASONING_FIELDS:
        # reasoning is stored under several names: mark every copy, accept whichever is read
        fields = [name for name in REASONING_FIELDS if final.get(name) == value]
    if not any(name in source for name in fields):
        raise ChatTemplateValueError(f'continue_final_message is set to "{key}" but the chat '
                                     "template never mentions that field")
    if isinstance(value, (list, tuple)):
        for block in reversed(value):
            if isinstance(block, dict) and "text" in block:
                text = block["text"]
                if not isinstance(text, str):
                    raise TypeError("the text block to continue must hold a string, not "
                                    f"{type(text).__name__}")
                block["text"] = text + CONTINUE_FINAL_MESSAGE_MARKER
                return text
        raise ChatTemplateValueError("continue_final_message is set but the final message has no "
                                     "text block to continue!")
    if not isinstance(value, str):
        raise TypeError(f'the final message\'s "{key}" must be a string or a list of content '
                        f"blocks to be continued, not {type(value).__name__}")
    for name in fields:
        final[name] = final[name] + CONTINUE_FINAL_MESSAGE_MARKER
    return value


def _cut_at_marker(text: str, final_text: str) -> str:
    marker = CONTINUE_FINAL_MESSAGE_MARKER.strip()
    if final_text.strip() not in text or marker not in text:
        raise ChatTemplateValueError(
            "continue_final_message is set but the final message does not appear in the output "
            "of the chat template (the template drops or alters part of it), so there is no "
            f"place to continue from.\nFinal message to continue: {final_text.strip()}\n"
            f"Rendered chat:\n{text}")
    at = text.rindex(marker)
    if text.startswith(CONTINUE_FINAL_MESSAGE_MARKER, at):
        return text[:at]
    # the template trimmed the whitespace after the message: trim what precedes the marker too
    return text[:at].rstrip()


def _clip_spans(spans: Iterable[Tuple[int, int]], length: int) -> List[Tuple[int, int]]:
    clipped = []
    for start, end in spans:
        if start > length:
            continue
        clipped.append((start, min(end, length)))
    return clipped


# ---- environments ----------------------------------------------------------------------------
_ENVIRONMENTS: "OrderedDict[Any, Environment]" = OrderedDict()
_ENVIRONMENT_CACHE_SIZE = 16


def _environment_for(now: Now) -> Environment:
    """A chat environment per clock setting, shared so that its parse cache is reused; a
    callable clock gets an environment of its own."""
    if callable(now):
        return chat_environment(now=now)
    key = ("clock", now)
    env = _ENVIRONMENTS.get(key)
    if env is None:
        env = chat_environment(now=now)
        _ENVIRONMENTS[key] = env
        if len(_ENVIRONMENTS) > _ENVIRONMENT_CACHE_SIZE:
            _ENVIRONMENTS.popitem(last=False)
    else:
        _ENVIRONMENTS.move_to_end(key)
    return env


# ---- the template ----------------------------------------------------------------------------
class ChatTemplate:
    """A chat template, rendered the way transformers' ``apply_chat_template`` renders it.

    ``now`` fixes what ``strftime_now()`` formats (a datetime, or a callable returning one; None
    means the local clock). ``special_tokens`` (``bos_token``, ``eos_token``, ...) are passed as
    template variables unless a render call gives the same keyword. ``name`` labels the template
    in error messages; ``template_name`` records which named template of a config this is
    (``"default"`` for a config's only template). ``template`` is the compiled
    :class:`~minijinja_py.Template` (its ``ast`` can be inspected); ``environment`` is shared by
    the chat templates made with the same clock, so leave it unmodified.

    >>> ct = ChatTemplate("{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}")
    >>> ct.render([{"role": "user", "content": "Hi"}])
    '<user>Hi'
    """

    def __init__(self, source: str, now: Now = None, *, name: Optional[str] = None,
                 special_tokens: Optional[Mapping[str, str]] = None,
                 template_name: Optional[str] = None) -> None:
        if not isinstance(source, str):
            raise TypeError(f"a chat template source must be str, not {type(source).__name__}")
        self.source = source
        self.name = name
        self.template_name = template_name
        self.special_tokens: Dict[str, str] = dict(special_tokens or {})
        self.environment = _environment_for(now)
        self.template: Template = self.environment.from_string(source, name=name)

    # -- loading ---------------------------------------------------------------------------
    @classmethod
    def from_tokenizer_config(cls, path_or_dict: Union[PathLike, Mapping[str, Any]],
                              name: Optional[str] = None, tools: Any = None, *,
                              now: Now = None) -> "ChatTemplate":
        """Load the chat template of a model directory, a ``tokenizer_config.json`` (a path or
        the parsed dict), a bare ``.jinja`` file or a ``.gguf`` file.

        When the config holds several named templates, ``name`` picks one; without a name,
        ``"tool_use"`` is used when ``tools`` is not None and the config has it, else
        ``"default"`` (:class:`ChatConfigError` lists the names otherwise). The config's special
        tokens become template variables. Raises FileNotFoundError for a missing path,
        :class:`ChatConfigError` when no chat template is found or a file is refused (see the
        module docstring: only regular files inside the folder, of bounded size, valid UTF-8
        and JSON), :class:`~minijinja_py.gguf.GGUFError` for a corrupt GGUF file, and
        :class:`~minijinja_py.TemplateSyntaxError` when the template does not parse.
        """
        config = load_chat_config(path_or_dict)
        selected, source = select_template(config.templates, name=name, tools=tools)
        label = config.origin
        if len(config.templates) > 1:
            label = f"{config.origin} [{selected}]"
        return cls(source, now=now, name=label, special_tokens=config.special_tokens,
                   template_name=selected)

    # -- rendering -------------------------------------------------------------------------
    def render(self, /, messages: Any, tools: Optional[Sequence[Any]] = None,
               documents: Optional[Sequence[Any]] = None, add_generation_prompt: bool = False,
               continue_final_message: Union[bool, str] = False, **template_kwargs: Any) -> str:
        """Render ``messages`` to a prompt string, exactly like transformers'
        ``apply_chat_template(..., tokenize=False)``.

        ``tools`` are JSON schemas (dicts) or Python functions (converted with
        :func:`~minijinja_py.schema.get_json_schema`); ``documents`` are dicts.
        ``continue_final_message`` (True, or the name of the final message's field to continue,
        such as ``"reasoning_content"``) ends the prompt inside the final message, so a model
        continues it. Every other keyword is a template variable. Raises
        :class:`ChatTemplateValueError` (a ValueError, as in transformers, and a
        :class:`~minijinja_py.TemplateError`) for an empty conversation and for the
        ``continue_final_message`` problems transformers refuses, TypeError for messages that
        are not dicts, and a :class:`~minijinja_py.TemplateError` subclass when the template
        itself fails.
        """
        return self._render(messages, tools, documents, add_generation_prompt,
                            continue_final_message, template_kwargs, False).text

    def render_with_spans(self, /, messages: Any, tools: Optional[Sequence[Any]] = None,
                          documents: Optional[Sequence[Any]] = None,
                          add_generation_prompt: bool = False,
                          continue_final_message: Union[bool, str] = False,
                          **template_kwargs: Any) -> RenderResult:
        """Like :meth:`render`, and also record the character span of each
        ``{% generation %}`` block's output, as ``return_assistant_tokens_mask`` does.

        With ``continue_final_message`` (which transformers refuses together with the mask) the
        spans are those of the cut text: a span reaching past the cut ends at the cut.
        """
        return self._render(messages, tools, documents, add_generation_prompt,
                            continue_final_message, template_kwargs, True)

    def template_variables(self, /, messages: Any, tools: Optional[Sequence[Any]] = None,
                           documents: Optional[Sequence[Any]] = None,
                           add_generation_prompt: bool = False,
                           **template_kwargs: Any) -> Dict[str, Any]:
        """The exact variables a render would pass to the template (without the
        ``continue_final_message`` marker): useful to debug what a template sees."""
        variables, _ = self._prepare(messages, tools, documents, add_generation_prompt, False,
                                     template_kwargs)
        return variables

    def _prepare(self, messages: Any, tools: Any, documents: Any, add_generation_prompt: Any,
                 continue_final_message: Union[bool, str], template_kwargs: Dict[str, Any]
                 ) -> Tuple[Dict[str, Any], Optional[str]]:
        chat = _normalize_conversation(messages)
        if continue_final_message and add_generation_prompt:
            raise ChatTemplateValueError(
                "continue_final_message and add_generation_prompt cannot be used together: "
                "continue_final_message lets the model continue the final message, "
                "add_generation_prompt starts a new assistant message.")
        schemas = _tool_schemas(tools)
        _check_documents(documents)
        extra = plain_template_data({**self.special_tokens, **template_kwargs})

        plain_chat = [_alias_reasoning(plain_template_data(message)) for message in chat]
        final_text = None
        if continue_final_message:
            final_text = _mark_final_message(plain_chat, continue_final_message, self.source)
        variables = {
            "messages": plain_chat,
            "tools": plain_template_data(schemas),
            "documents": plain_template_data(documents),
            "add_generation_prompt": plain_template_data(add_generation_prompt),
        }
        variables.update(extra)
        return variables, final_text

    def _render(self, messages: Any, tools: Any, documents: Any, add_generation_prompt: Any,
                continue_final_message: Union[bool, str], template_kwargs: Dict[str, Any],
                track_spans: bool) -> RenderResult:
        variables, final_text = self._prepare(messages, tools, documents, add_generation_prompt,
                                              continue_final_message, template_kwargs)
        if track_spans:
            text, spans = self.template.render_with_spans(variables)
            spans = [(int(start), int(end)) for start, end in spans]
        else:
            text, spans = self.template.render(variables), []
        if final_text is not None:
            text = _cut_at_marker(text, final_text)
            spans = _clip_spans(spans, len(text))
        return RenderResult(text, spans)

    def __repr__(self) -> str:
        label = self.name or (self.source[:40] + ("..." if len(self.source) > 40 else ""))
        return f"<ChatTemplate {label!r}>"


# ---- loading configs -------------------------------------------------------------------------
@dataclass
class ChatConfig:
    """What a model directory, tokenizer config, template file or GGUF file provides.

    ``templates`` maps names to sources (a single template is ``{"default": source}``);
    ``special_tokens`` maps ``bos_token``/``eos_token``/... to their strings; ``origin`` says
    where it came from (a path, or ``"<dict>"``).
    """

    templates: Dict[str, str]
    special_tokens: Dict[str, str]
    origin: str


# ---- reading files safely ---------------------------------------------------------------------
# A model folder is untrusted input too. Only regular files are read (a FIFO would block, a
# device such as /dev/zero would never end), only files that resolve inside the folder (a
# symlink to ~/.ssh/id_rsa must not end up in a prompt or an error's caret line), and never more
# than a cap: the size is checked with fstat before reading and at most cap + 1 bytes are read.

# O_NONBLOCK: should a FIFO appear between the stat() and the open() (a race), the open still
# returns at once and fstat() refuses it. O_NOFOLLOW: the path opened is already resolved, so a
# symlink swapped in for its last component is refused rather than followed.
_OPEN_FLAGS = (os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0)
               | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0))


def _file_kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def _os_reason(exc: OSError) -> str:
    return exc.strerror or type(exc).__name__


def _template_char_cap() -> int:
    from .limits import Limits

    return Limits().max_source_size


def _read_regular(resolved: str, shown: Path, cap: int, what: str, head: bool = False) -> bytes:
    """The bytes of the regular file at ``resolved`` (a path without symlinks), named ``shown``
    in errors: refused when longer than ``cap`` bytes, or only its first ``cap`` bytes when
    ``head``."""
    try:
        fd = os.open(resolved, _OPEN_FLAGS)
    except OSError as exc:
        raise ChatConfigError(f"{shown}: cannot read it ({_os_reason(exc)})") from None
    try:
        status = os.fstat(fd)
        if not stat.S_ISREG(status.st_mode):
            raise ChatConfigError(f"{shown}: refused: {_file_kind(status.st_mode)}, not a "
                                  "regular file")
        if status.st_size > cap and not head:
            raise ChatConfigError(f"{shown}: refused: {status.st_size:,} bytes, more than the "
                                  f"{cap:,} read for {what}")
        chunks = []
        remaining = cap if head else cap + 1
        while remaining > 0:
            chunk = os.read(fd, min(remaining, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            remaining -= len(chunk)
        if remaining <= 0 and not head:  # the file grew while it was read
            raise ChatConfigError(f"{shown}: refused: more than the {cap:,} bytes read for "
                                  f"{what}")
        return b"".join(chunks)
    except OSError as exc:
        raise ChatConfigError(f"{shown}: cannot read it ({_os_reason(exc)})") from None
    finally:
        os.close(fd)


def _is_within(path: str, root: str) -> bool:
    try:
        return os.path.commonpath([path, root]) == root
    except ValueError:  # different drives
        return False


class _ModelFolder:
    """The files of one model folder, read under the rules above.

    A file may be a symlink as long as it resolves inside the folder; in a Hugging Face hub
    cache snapshot (``models--org--name/snapshots/<revision>/``, whose files are symlinks to
    ``../../blobs/<hash>``) the repository's own ``blobs`` directory counts as inside too.
    Reads from one folder add up to at most :data:`MAX_FOLDER_BYTES`.
    """

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        real = os.path.realpath(directory)
        self.roots = [real]
        snapshots = os.path.dirname(real)
        repository = os.path.dirname(snapshots)
        if os.path.basename(snapshots) == "snapshots" and "--" in os.path.basename(repository):
            self.roots.append(os.path.realpath(os.path.join(repository, "blobs")))
        self.budget = MAX_FOLDER_BYTES

    def contains(self, real: str) -> bool:
        return any(_is_within(real, root) for root in self.roots)

    def resolve(self, path: Path) -> Optional[Tuple[str, os.stat_result]]:
        """``(resolved path, stat)`` of a name in the folder, None when nothing has that name;
        refuses names that lead outside the folder (or nowhere)."""
        try:
            os.lstat(path)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise ChatConfigError(f"{path}: cannot read it ({_os_reason(exc)})") from None
        real = os.path.realpath(path)
        if not self.contains(real):
            raise ChatConfigError(f"{path}: refused: it is a symbolic link that leads outside "
                                  f"the model folder {self.directory}")
        try:
            return real, os.stat(real)
        except FileNotFoundError:
            raise ChatConfigError(f"{path}: refused: a symbolic link to a file that does not "
                                  "exist") from None
        except OSError as exc:
            raise ChatConfigError(f"{path}: cannot read it ({_os_reason(exc)})") from None

    def read(self, path: Path, cap: int, what: str) -> Optional[bytes]:
        """The bytes of the regular file ``path`` inside the folder, None when it is absent."""
        found = self.resolve(path)
        if found is None:
            return None
        real, status = found
        if not stat.S_ISREG(status.st_mode):
            raise ChatConfigError(f"{path}: refused: {_file_kind(status.st_mode)}, not a "
                                  "regular file")
        if self.budget <= 0 or status.st_size > self.budget:
            raise ChatConfigError(f"{path}: refused: the files read from the model folder "
                                  f"{self.directory} add up to more than {MAX_FOLDER_BYTES:,} "
                                  "bytes")
        data = _read_regular(real, path, min(cap, self.budget), what)
        self.budget -= len(data)
        return data

    def read_json(self, path: Path) -> Any:
        data = self.read(path, MAX_CONFIG_BYTES, "a JSON config")
        return None if data is None else _parse_json(data, path)

    def read_template(self, path: Path) -> Optional[str]:
        chars = _template_char_cap()
        data = self.read(path, 4 * chars, "a template")
        return None if data is None else _decode_template(data, path, chars)


def _decode_template(data: bytes, path: Path, max_chars: int) -> str:
    # Like transformers: UTF-8, universal newlines (a CRLF .jinja renders as its LF twin).
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ChatConfigError(f"{path}: not UTF-8 text ({exc.reason} at byte "
                              f"{exc.start:,})") from None
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    if len(text) > max_chars:
        raise ChatConfigError(f"{path}: refused: the template is {len(text):,} characters long, "
                              f"more than Limits.max_source_size ({max_chars:,})")
    return text


def _parse_json(data: bytes, path: Path) -> Any:
    """JSON text to data; every problem is a ChatConfigError naming the file."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ChatConfigError(f"{path}: not UTF-8 text ({exc.reason} at byte "
                              f"{exc.start:,})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ChatConfigError(f"{path}: not valid JSON ({exc})") from None
    except RecursionError:
        raise ChatConfigError(f"{path}: refused: its JSON is nested too deeply to "
                              "read") from None
    except ValueError as exc:  # e.g. Python's limit on the digits of an integer
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ChatConfigError(f"{path}: cannot read its JSON ({reason})") from None


def _token_text(value: Any) -> Optional[str]:
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping) and isinstance(value.get("content"), str):
        return value["content"]  # the serialized AddedToken form
    return None


def _special_tokens_of(config: Mapping[str, Any]) -> Dict[str, str]:
    tokens = {}
    for key in SPECIAL_TOKEN_NAMES:
        text = _token_text(config.get(key))
        if text is not None:
            tokens[key] = text
    return tokens


def _templates_of(value: Any, origin: str) -> Dict[str, str]:
    """A config's ``chat_template`` entry (a string, a list of named templates, or a mapping)."""
    if isinstance(value, str):
        return {"default": value}
    if isinstance(value, Mapping):
        items = list(value.items())
    elif isinstance(value, (list, tuple)):
        items = []
        for index, entry in enumerate(value):
            if not (isinstance(entry, Mapping) and isinstance(entry.get("name"), str)
                    and "template" in entry):
                raise ChatConfigError(f"{origin}: chat_template entry {index} is not a "
                                      '{"name": ..., "template": ...} object')
            items.append((entry["name"], entry["template"]))
    else:
        raise ChatConfigError(f"{origin}: chat_template must be a string or a list of named "
                              f"templates, not {type(value).__name__}")
    templates = {}
    for name, source in items:
        if not isinstance(source, str):
            raise ChatConfigError(f"{origin}: the chat template {name!r} is not a string")
        templates[str(name)] = source
    if not templates:
        raise ChatConfigError(f"{origin}: chat_template is an empty list")
    return templates


def _config_from_dict(config: Mapping[str, Any], origin: str) -> ChatConfig:
    if "chat_template" not in config or config["chat_template"] is None:
        raise ChatConfigError(f"{origin}: no chat_template in this tokenizer config")
    return ChatConfig(_templates_of(config["chat_template"], origin), _special_tokens_of(config),
                      origin)


def _config_from_directory(directory: Path) -> ChatConfig:
    folder = _ModelFolder(directory)
    config: Dict[str, Any] = {}
    config_path = directory / TOKENIZER_CONFIG_FILE
    loaded = folder.read_json(config_path)
    if loaded is not None:
        if not isinstance(loaded, dict):
            raise ChatConfigError(f"{config_path}: expected a JSON object")
        config = loaded
    special = _special_tokens_of(config)
    if "added_tokens_decoder" not in config:
        # transformers' legacy path: special_tokens_map.json overrides the config's tokens
        legacy = folder.read_json(directory / SPECIAL_TOKENS_MAP_FILE)
        if isinstance(legacy, dict):
            special.update(_special_tokens_of(legacy))

    # Separate .jinja files win over the config's chat_template.
    templates: Dict[str, str] = {}
    main_source = folder.read_template(directory / CHAT_TEMPLATE_FILE)
    if main_source is not None:
        templates["default"] = main_source
    extra_dir = directory / CHAT_TEMPLATE_DIR
    found = folder.resolve(extra_dir)
    if found is not None and stat.S_ISDIR(found[1].st_mode):
        try:
            names = os.listdir(found[0])
        except OSError as exc:
            raise ChatConfigError(f"{extra_dir}: cannot list it ({_os_reason(exc)})") from None
        # what transformers' Path.glob("*.jinja") lists (hidden names included)
        for file_name in sorted(name for name in names if name.endswith(".jinja")):
            source = folder.read_template(extra_dir / file_name)
            if source is not None:
                templates[file_name[:-len(".jinja")]] = source
    if templates:
        return ChatConfig(templates, special, str(directory))

    if config.get("chat_template") is not None:
        return ChatConfig(_templates_of(config["chat_template"], str(config_path)), special,
                          str(directory))
    legacy_json = directory / LEGACY_CHAT_TEMPLATE_JSON
    loaded = folder.read_json(legacy_json)
    if isinstance(loaded, dict) and loaded.get("chat_template") is not None:
        return ChatConfig(_templates_of(loaded["chat_template"], str(legacy_json)), special,
                          str(directory))
    raise ChatConfigError(
        f"{directory}: no chat template found (looked for {CHAT_TEMPLATE_FILE}, "
        f"{CHAT_TEMPLATE_DIR}/*.jinja, and chat_template in {TOKENIZER_CONFIG_FILE})")


def _config_from_gguf(path: Path) -> ChatConfig:
    from .gguf import read_gguf_chat_info

    try:
        info = read_gguf_chat_info(path)
    except OSError as exc:
        raise ChatConfigError(f"{path}: cannot read it ({_os_reason(exc)})") from None
    if not info.templates:
        raise ChatConfigError(f"{path}: this GGUF file has no tokenizer.chat_template metadata")
    return ChatConfig(dict(info.templates), dict(info.special_tokens), str(path))


def load_chat_config(path_or_dict: Union[PathLike, Mapping[str, Any]]) -> ChatConfig:
    """Read chat template(s) and special tokens from a model directory, a
    ``tokenizer_config.json`` (path or parsed dict), a ``.gguf`` file or a template file.

    A file is taken as GGUF when its name ends in ``.gguf`` or it starts with the GGUF magic,
    as a JSON config when its name ends in ``.json``, and as a bare template otherwise. A file
    named directly may be a symlink to anywhere (the caller chose it), but it must be a regular
    file and is read under the same size caps as a model folder's files; inside a directory
    only regular files that resolve inside it are read (see the module docstring). Raises
    FileNotFoundError for a missing path and :class:`ChatConfigError` (naming the file) for
    everything refused or unreadable.
    """
    if isinstance(path_or_dict, Mapping):
        return _config_from_dict(path_or_dict, "<dict>")
    if not isinstance(path_or_dict, (str, os.PathLike)):
        raise TypeError("expected a path or a tokenizer config dict, not "
                        f"{type(path_or_dict).__name__}")
    path = Path(path_or_dict)
    try:
        status = os.stat(path)
    except FileNotFoundError:
        raise FileNotFoundError(f"no such file or directory: {path}") from None
    except OSError as exc:
        raise ChatConfigError(f"{path}: cannot read it ({_os_reason(exc)})") from None
    except ValueError as exc:  # e.g. an embedded NUL byte
        raise ChatConfigError(f"{str(path)!r}: not a usable path ({exc})") from None
    if stat.S_ISDIR(status.st_mode):
        return _config_from_directory(path)
    if not stat.S_ISREG(status.st_mode):
        raise ChatConfigError(f"{path}: refused: {_file_kind(status.st_mode)}, not a regular "
                              "file")
    real = os.path.realpath(path)
    if path.suffix.lower() == ".gguf" or _read_regular(real, path, 4, "", head=True) == b"GGUF":
        return _config_from_gguf(path)
    if path.suffix.lower() == ".json":
        loaded = _parse_json(_read_regular(real, path, MAX_CONFIG_BYTES, "a JSON config"), path)
        if not isinstance(loaded, dict):
            raise ChatConfigError(f"{path}: expected a JSON object (a tokenizer config)")
        if loaded.get("chat_template") is None:
            hint = ""
            if (path.parent / CHAT_TEMPLATE_FILE).is_file():
                hint = (f"; the template is in {CHAT_TEMPLATE_FILE} next to it: pass the "
                        f"directory {path.parent} instead")
            raise ChatConfigError(f"{path}: no chat_template in this tokenizer config{hint}")
        return ChatConfig(_templates_of(loaded["chat_template"], str(path)),
                          _special_tokens_of(loaded), str(path))
    chars = _template_char_cap()
    source = _decode_template(_read_regular(real, path, 4 * chars, "a template"), path, chars)
    return ChatConfig({"default": source}, {}, str(path))


def select_template(templates: Union[str, Mapping[str, str]], name: Optional[str] = None,
                    tools: Any = None) -> Tuple[str, str]:
    """Pick one template as transformers does: ``(name, source)``.

    ``name`` wins when given; otherwise ``"tool_use"`` when ``tools`` is not None and present,
    else ``"default"``. Raises :class:`ChatConfigError` listing the available names when the
    choice does not exist.
    """
    if isinstance(templates, str):
        templates = {"default": templates}
    names = sorted(templates)
    if name is not None:
        if name in templates:
            return name, templates[name]
        raise ChatConfigError(f"no chat template named {name!r}; available: "
                              f"{', '.join(map(repr, names))}")
    if tools is not None and "tool_use" in templates:
        return "tool_use", templates["tool_use"]
    if "default" in templates:
        return "default", templates["default"]
    raise ChatConfigError("this config has several chat templates and none is called "
                          f"'default': choose one by name ({', '.join(map(repr, names))})")


def _looks_like_template(text: str) -> bool:
    return "{{" in text or "{%" in text or "{#" in text or "\n" in text


def apply_chat_template(source_or_config: Union[str, PathLike, Mapping[str, Any], ChatTemplate],
                        /, messages: Any, tools: Optional[Sequence[Any]] = None,
                        documents: Optional[Sequence[Any]] = None,
                        add_generation_prompt: bool = False,
                        continue_final_message: Union[bool, str] = False, *,
                        template_name: Optional[str] = None, now: Now = None,
                        **template_kwargs: Any) -> str:
    """Render ``messages`` in one call; see :meth:`ChatTemplate.render`.

    ``source_or_config`` is a template source string, a :class:`ChatTemplate`, a tokenizer
    config dict, or a path (model directory, ``tokenizer_config.json``, ``.jinja``, ``.gguf``).
    A string is a path only when it contains no template syntax and names an existing file or
    directory. ``template_name`` picks a named template of a config.
    """
    if isinstance(source_or_config, ChatTemplate):
        chat_template = source_or_config
    elif isinstance(source_or_config, Mapping) or isinstance(source_or_config, os.PathLike) or (
            isinstance(source_or_config, str) and not _looks_like_template(source_or_config)
            and os.path.exists(source_or_config)):
        chat_template = ChatTemplate.from_tokenizer_config(source_or_config, name=template_name,
                                                           tools=tools, now=now)
    else:
        chat_template = ChatTemplate(source_or_config, now=now)
    return chat_template.render(messages, tools=tools, documents=documents,
                                add_generation_prompt=add_generation_prompt,
                                continue_final_message=continue_final_message,
                                **template_kwargs)
