"""transformers' chat pipeline: what ``tokenizer.apply_chat_template(..., tokenize=False)`` does.

:class:`ChatTemplate` wraps one template compiled in
:func:`~minijinja_py.environment.chat_environment` and reproduces the steps transformers 5.24
takes around the render, in the same order:

1. the conversation must not be empty (:class:`ChatTemplateValueError`, a ValueError);
2. message objects (dicts, dataclasses, pydantic-style objects with ``model_dump``) become dicts,
   and every top-level message key whose value is None is dropped;
3. ``continue_final_message`` together with ``add_generation_prompt`` is refused (ValueError,
   again a :class:`ChatTemplateValueError`);
4. tools given as Python functions become JSON schemas (:func:`minijinja_py.chat.schema.get_json_schema`),
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

Loading model folders, tokenizer configs and GGUF files is :mod:`minijinja_py.chat.config`;
token ids and masks (``tokenize=True``) are :mod:`minijinja_py.chat.tokens`; the one-call
``apply_chat_template`` choosing between them is :mod:`minijinja_py.chat.api`.
"""

from __future__ import annotations

import os
import sys
from collections import OrderedDict, abc
from types import FunctionType, MethodType

from ..environment import chat_environment
from ..exceptions import TemplateError

# Only what the first render needs is imported here: a fresh process that renders one chat
# template pays for every module imported on the way, and dataclasses, inspect, json, pathlib
# and typing (imported by the config loader, the tokenizer layer and the tool schemas) used to
# double the cost of the engine's own cold start. The config loader (.config) and the tool
# schemas (.schema) are imported when a render first needs them; tests/test_cold_start.py
# checks what a first render loads.
TYPE_CHECKING = False
if TYPE_CHECKING:  # pragma: no cover - what static analysis sees
    import datetime
    from typing import (Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple,
                        Union)

    from .. import ProvenanceResult
    from ..environment import Environment, Template
    from .api import apply_chat_template
    from .capabilities import Capabilities
    from .config import (SPECIAL_TOKEN_NAMES, ChatConfig, ChatConfigError, load_chat_config,
                         select_template)
    from .prefix_report import PrefixBoundary
    from .response_parser import ResponseParser

    PathLike = Union[str, "os.PathLike[str]"]
    Now = Union[None, datetime.datetime, Callable[[], Any]]

__all__ = [
    "ChatTemplate",
    "RenderResult",
    "ChatConfig",
    "ChatConfigError",
    "ChatTemplateValueError",
    "apply_chat_template",  # (defined in .api: see __getattr__)
    "load_chat_config",
    "select_template",
    "plain_template_data",
    "CONTINUE_FINAL_MESSAGE_MARKER",
    "REASONING_FIELDS",
    "SPECIAL_TOKEN_NAMES",
]

# The names of .config this module has always offered, imported when first asked for.
_FROM_CONFIG = frozenset({"ChatConfig", "ChatConfigError", "load_chat_config",
                          "select_template", "SPECIAL_TOKEN_NAMES"})


def __getattr__(name: str) -> object:
    if name == "apply_chat_template":  # defined here once; now the one-call facade in .api,
        from .api import apply_chat_template as value  # above this module and .tokens
    elif name in _FROM_CONFIG:
        from . import config

        value = getattr(config, name)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


#: Appended to the final message by ``continue_final_message``; the output is cut where it lands.
#: It is transformers' own marker: templates that transform the text (strip, split, length...)
#: must see exactly what they see under transformers for the cut to land in the same place.
CONTINUE_FINAL_MESSAGE_MARKER = "CONTINUE_FINAL_MESSAGE_TAG "

#: The names a message's reasoning travels under; the first is the one chat templates read.
REASONING_FIELDS: Tuple[str, ...] = ("reasoning_content", "thinking", "reasoning")


# Data deeper than this is refused (a cycle would otherwise recurse until Python gives up).
MAX_DATA_DEPTH = 200



class ChatTemplateValueError(TemplateError, ValueError):
    """A render request that transformers refuses with a ValueError: an empty conversation,
    ``continue_final_message`` together with ``add_generation_prompt``, or a final message that
    cannot be continued. Both a :class:`~minijinja_py.TemplateError` and a ValueError, so either
    ``except`` catches it; ``str()`` is the message alone (no template location)."""


# ---- results ---------------------------------------------------------------------------------
class RenderResult:
    """A rendered prompt and the character spans of its ``{% generation %}`` blocks.

    ``generation_spans`` holds ``(start, end)`` offsets into ``text``, one per generation block in
    render order, as transformers' ``return_assistant_tokens_mask`` computes them before
    tokenizing. Immutable; two results are equal when both fields are.
    """

    # (a hand-written frozen record rather than a dataclass: importing dataclasses costs a
    # fresh process more than the rest of this module, see the imports above)
    __slots__ = ("text", "generation_spans")

    text: str
    generation_spans: List[Tuple[int, int]]

    def __init__(self, text: str, generation_spans: Optional[List[Tuple[int, int]]] = None
                 ) -> None:
        object.__setattr__(self, "text", text)
        object.__setattr__(self, "generation_spans",
                           [] if generation_spans is None else generation_spans)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"cannot assign to field {name!r}: a RenderResult is immutable")

    __delattr__ = __setattr__  # type: ignore[assignment]

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return (self.text, self.generation_spans) == (other.text,  # type: ignore[attr-defined]
                                                      other.generation_spans)  # type: ignore

    def __hash__(self) -> int:
        return hash((self.text, tuple(self.generation_spans)))

    def __repr__(self) -> str:
        return f"RenderResult(text={self.text!r}, generation_spans={self.generation_spans!r})"

    def __reduce__(self) -> Any:
        return (RenderResult, (self.text, self.generation_spans))

    def generation_texts(self) -> List[str]:
        """The text of each generation span (what an assistant mask would cover)."""
        return [self.text[start:end] for start, end in self.generation_spans]

    def __str__(self) -> str:
        return self.text


# ---- step 2 and 5: plain data ----------------------------------------------------------------
def _dataclass_fields(value: Any) -> Optional[Tuple[Any, ...]]:
    """The fields of a dataclass instance, None for anything else. Without the dataclasses
    module loaded no dataclass exists, so it is never imported here for nothing."""
    dataclasses = sys.modules.get("dataclasses")
    if dataclasses is None or isinstance(value, type) or not dataclasses.is_dataclass(value):
        return None
    return dataclasses.fields(value)


def _has_model_dump(value: Any) -> bool:
    return callable(getattr(value, "model_dump", None))


def _objects_to_dicts(value: Any, depth: int = 0) -> Any:
    """Message objects (and objects nested in them) become dicts; other values are kept."""
    if depth > MAX_DATA_DEPTH:
        raise ValueError(f"conversation data is nested deeper than {MAX_DATA_DEPTH} levels "
                         "(or contains a reference cycle)")
    kind = type(value)
    if kind is str or kind is int or kind is float or kind is bool or value is None:
        return value  # (the checks below would all say no)
    if isinstance(value, abc.Mapping):
        return {key: _objects_to_dicts(item, depth + 1) for key, item in value.items()}
    if isinstance(value, list):
        return [_objects_to_dicts(item, depth + 1) for item in value]
    if isinstance(value, tuple):
        return tuple(_objects_to_dicts(item, depth + 1) for item in value)
    fields = _dataclass_fields(value)
    if fields is not None:
        return {field.name: _objects_to_dicts(getattr(value, field.name), depth + 1)
                for field in fields}
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
    if isinstance(value, abc.Mapping):
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
    fields = _dataclass_fields(value)
    if fields is not None:
        return {field.name: plain_template_data(getattr(value, field.name), _depth + 1)
                for field in fields}
    if _has_model_dump(value):
        return plain_template_data(value.model_dump(), _depth + 1)
    return f"<{type(value).__name__}>"


def _normalize_conversation(messages: Any) -> List[Dict[str, Any]]:
    """Steps 1-2: a non-empty list of message dicts without None-valued keys."""
    if isinstance(messages, (str, bytes, abc.Mapping)):
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
    if isinstance(tools, (str, bytes, abc.Mapping)):
        raise ValueError("tools must be a list of JSON schemas (dicts) or functions, not a "
                         f"single {type(tools).__name__}")
    schemas = []
    for tool in tools:
        if isinstance(tool, abc.Mapping):
            schemas.append(tool)
        elif isinstance(tool, (FunctionType, MethodType)):  # inspect.isfunction/ismethod
            from .schema import get_json_schema

            schemas.append(get_json_schema(tool))
        else:
            raise ValueError("Tools should either be a JSON schema, or a callable function with "
                             "type hints and a docstring suitable for auto-conversion to a "
                             f"schema; got {type(tool).__name__}.")
    return schemas


def _check_documents(documents: Any) -> None:
    if documents is None:
        return
    if isinstance(documents, (str, bytes, abc.Mapping)):
        raise TypeError("documents must be a list of dicts with 'title' and 'text' keys")
    for document in documents:
        if not isinstance(document, abc.Mapping):
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


# ---- what a render is not asked ---------------------------------------------------------------
#: transformers' apply_chat_template options about token ids. Given to a ChatTemplate they
#: would become template variables, and a call ported from transformers with tokenize=True
#: would quietly return text: set to False or None (asking for nothing) they are dropped,
#: otherwise refused.
TOKENIZATION_OPTIONS = ("tokenize", "return_dict", "return_tensors", "padding", "truncation",
                        "max_length", "return_assistant_tokens_mask", "sanitize_control_tokens",
                        "tokenizer_kwargs")


def _refuse_tokenization_options(template_kwargs: Dict[str, Any]) -> None:
    """Drop the tokenization options set to False or None from ``template_kwargs``; raise a
    TypeError naming the others and the call that takes them."""
    asked = []
    for name in TOKENIZATION_OPTIONS:
        if name in template_kwargs:
            value = template_kwargs.pop(name)
            if value is not None and value is not False:
                asked.append(f"{name}={value!r}")
    if asked:
        raise TypeError(
            f"ChatTemplate renders text and does not tokenize: {', '.join(asked)} "
            f"{'is an option' if len(asked) == 1 else 'are options'} of "
            "ChatTokenizer.apply_chat_template (ChatTokenizer.from_pretrained(model_folder)"
            ".apply_chat_template(messages, ...)), also reached as "
            "mj.apply_chat_template(model_folder, messages, tokenize=True, ...)")


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
        and JSON), :class:`~minijinja_py.chat.gguf.GGUFError` for a corrupt GGUF file, and
        :class:`~minijinja_py.TemplateSyntaxError` when the template does not parse.
        """
        from .config import load_chat_config, select_template

        config = load_chat_config(path_or_dict)
        selected, source = select_template(config.templates, name=name, tools=tools)
        label = config.origin
        if len(config.templates) > 1:
            label = f"{config.origin} [{selected}]"
        return cls(source, now=now, name=label, special_tokens=config.special_tokens,
                   template_name=selected)

    # -- rendering -------------------------------------------------------------------------
    def render(self, /, messages: Any = None, tools: Optional[Sequence[Any]] = None,
               documents: Optional[Sequence[Any]] = None, add_generation_prompt: bool = False,
               continue_final_message: Union[bool, str] = False, *, conversation: Any = None,
               polyfill: Union[bool, Mapping[str, bool]] = False,
               **template_kwargs: Any) -> str:
        """Render ``messages`` to a prompt string, exactly like transformers'
        ``apply_chat_template(..., tokenize=False)``. The messages may also be given as
        ``conversation=``, transformers' name for them (not both).

        ``tools`` are JSON schemas (dicts) or Python functions (converted with
        :func:`~minijinja_py.chat.schema.get_json_schema`); ``documents`` are dicts.
        ``continue_final_message`` (True, or the name of the final message's field to continue,
        such as ``"reasoning_content"``) ends the prompt inside the final message, so a model
        continues it. Every other keyword is a template variable, except transformers'
        tokenization options (``tokenize``, ``return_dict``, ``return_tensors``, ``padding``,
        ``truncation``, ``max_length``, ``return_assistant_tokens_mask``,
        ``sanitize_control_tokens``, ``tokenizer_kwargs``): those are accepted set to False or
        None (``tokenize=False`` is what this method does) and refused with a TypeError
        otherwise, as token ids are :class:`~minijinja_py.chat.tokens.ChatTokenizer`'s work.
        Raises :class:`ChatTemplateValueError` (a ValueError, as in transformers, and a
        :class:`~minijinja_py.TemplateError`) for an empty conversation and for the
        ``continue_final_message`` problems transformers refuses, TypeError for messages that
        are not dicts, and a :class:`~minijinja_py.TemplateError` subclass when the template
        itself fails.

        ``polyfill`` (True, or a mapping such as ``{"system_role": True}`` naming the ones
        wanted) rewrites the conversation where the template lacks a capability the input
        needs, as google/minja does (see :mod:`minijinja_py.chat.polyfills`); False, the
        default, renders the conversation as given.
        """
        messages = _the_conversation(messages, conversation, "ChatTemplate.render")
        messages = self._polyfilled(messages, tools, polyfill, template_kwargs)
        return self._render(messages, tools, documents, add_generation_prompt,
                            continue_final_message, template_kwargs, False).text

    def render_with_spans(self, /, messages: Any = None, tools: Optional[Sequence[Any]] = None,
                          documents: Optional[Sequence[Any]] = None,
                          add_generation_prompt: bool = False,
                          continue_final_message: Union[bool, str] = False, *,
                          conversation: Any = None,
                          polyfill: Union[bool, Mapping[str, bool]] = False,
                          **template_kwargs: Any) -> RenderResult:
        """Like :meth:`render`, and also record the character span of each
        ``{% generation %}`` block's output, as ``return_assistant_tokens_mask`` does.

        With ``continue_final_message`` (which transformers refuses together with the mask) the
        spans are those of the cut text: a span reaching past the cut ends at the cut.
        """
        messages = _the_conversation(messages, conversation, "ChatTemplate.render_with_spans")
        messages = self._polyfilled(messages, tools, polyfill, template_kwargs)
        return self._render(messages, tools, documents, add_generation_prompt,
                            continue_final_message, template_kwargs, True)

    def render_with_provenance(self, /, messages: Any = None,
                               tools: Optional[Sequence[Any]] = None,
                               documents: Optional[Sequence[Any]] = None,
                               add_generation_prompt: bool = False,
                               continue_final_message: Union[bool, str] = False, *,
                               conversation: Any = None,
                               polyfill: Union[bool, Mapping[str, bool]] = False,
                               **template_kwargs: Any) -> "ProvenanceResult":
        """Like :meth:`render_with_spans`, and also say where every character came from: a
        :class:`~minijinja_py.provenance.origins.ProvenanceResult` whose ``runs`` name the template
        literal or the input path (``messages[2].content``, ``tools[0].function.name``,
        ``bos_token``...) of each piece of ``text`` (see
        :meth:`minijinja_py.Template.render_with_provenance`). ``text`` and
        ``generation_spans`` equal :meth:`render_with_spans`' ones.
        """
        from .. import ProvenanceResult

        messages = _the_conversation(messages, conversation, "ChatTemplate.render_with_provenance")
        messages = self._polyfilled(messages, tools, polyfill, template_kwargs)
        variables, final_text = self._prepare(messages, tools, documents, add_generation_prompt,
                                              continue_final_message, template_kwargs)
        result = self.template.render_with_provenance(variables)
        if final_text is None:
            return result
        text = _cut_at_marker(result.text, final_text)
        runs = [run for run in result.runs if run.start < len(text)]
        if runs:
            runs[-1].end = min(runs[-1].end, len(text))
        return ProvenanceResult(text, runs, _clip_spans(result.generation_spans, len(text)))

    def response_parser(self, /, messages: Any = None, tools: Optional[Sequence[Any]] = None,
                        add_generation_prompt: bool = True,
                        continue_final_message: Union[bool, str] = False,
                        **template_kwargs: Any) -> "ResponseParser":
        """The parser of what a model generates after this prompt, derived from the template
        itself (see :mod:`minijinja_py.chat.response_parser`): ``parse(text)`` gives the
        assistant message, ``unsupported`` the fields the template does not show how to
        read, ``response_template`` the layout in transformers' format. A template that
        exceeds a limit on a probe raises that :class:`~minijinja_py.LimitExceededError`
        (after that one probe), and the probes together are held to ``Limits.max_seconds``
        (:class:`~minijinja_py.chat.probe_deadline.ProbesDeadlineExceededError`)."""
        from .response_parser import response_parser

        return response_parser(self, messages, tools, add_generation_prompt,
                               continue_final_message, **template_kwargs)

    def parse_response(self, text: str, /, messages: Any = None,
                       tools: Optional[Sequence[Any]] = None, add_generation_prompt: bool = True,
                       continue_final_message: Union[bool, str] = False,
                       **template_kwargs: Any) -> Dict[str, Any]:
        """``response_parser(...).parse(text)``: the assistant message a model generated."""
        return self.response_parser(messages, tools, add_generation_prompt,
                                    continue_final_message, **template_kwargs).parse(text)

    def prefix_report(self, messages: Any = None, tools: Optional[Sequence[Any]] = None, *,
                      conversation: Any = None, **template_kwargs: Any) -> "List[PrefixBoundary]":
        """Whether each turn's render extends the previous one: one
        :class:`~minijinja_py.chat.prefix_report.PrefixBoundary` per boundary ``k`` (from 1 to
        ``len(messages) - 1``), checking that ``render(messages[:k])`` is a prefix of
        ``render(messages[:k + 1])`` and, before an assistant message, that the prompt asking
        for it (``add_generation_prompt=True``) is too. Where one is not, the check gives the
        first differing character of each render and its cause from provenance (which input
        or which template text wrote it). A render that raises is reported, not raised.

        >>> report = ChatTemplate("{% for m in messages %}{{ m.content }}|{% endfor %}"
        ...                       ).prefix_report([{"role": "user", "content": "Hi"},
        ...                                        {"role": "assistant", "content": "Yo"}])
        >>> [(b.turn, b.extends) for b in report]
        [(1, True)]
        """
        from .prefix_report import prefix_report

        messages = _the_conversation(messages, conversation, "ChatTemplate.prefix_report")
        _refuse_tokenization_options(template_kwargs)
        return prefix_report(self, messages, tools, **template_kwargs)

    def capabilities(self, **template_kwargs: Any) -> "Capabilities":
        """What this template can do (system role, tools, tool calls and responses, parallel
        calls, call ids, reasoning, content format...), each answer decided by which probe
        inputs the template writes into the output, with a witness: see
        :mod:`minijinja_py.chat.capabilities`. ``template_kwargs`` are passed to every probe
        render (``enable_thinking=False``...). Computed once per template source, special
        tokens, clock and keyword arguments, and cached in memory. A template that exceeds a
        limit on a probe raises that :class:`~minijinja_py.LimitExceededError` (after that
        one probe), and the probes together are held to ``Limits.max_seconds``, the time one
        render may take
        (:class:`~minijinja_py.chat.probe_deadline.ProbesDeadlineExceededError`).

        >>> caps = ChatTemplate("{% for m in messages %}{{ m.content }}{% endfor %}").capabilities()
        >>> caps.supports_system_role, caps.supports_tools
        (True, False)
        """
        from .capabilities import capabilities_of

        _refuse_tokenization_options(template_kwargs)
        return capabilities_of(self, template_kwargs)

    def trusted_variables(self, template_kwargs: Optional[Mapping[str, Any]] = None
                          ) -> frozenset:
        """The variables the model's own config supplies (``bos_token``, ``eos_token``...)
        and the caller did not override: their text is the tokenizer's, not the caller's."""
        return frozenset(self.special_tokens) - frozenset(template_kwargs or ())

    def template_variables(self, /, messages: Any = None, tools: Optional[Sequence[Any]] = None,
                           documents: Optional[Sequence[Any]] = None,
                           add_generation_prompt: bool = False, *, conversation: Any = None,
                           **template_kwargs: Any) -> Dict[str, Any]:
        """The exact variables a render would pass to the template (without the
        ``continue_final_message`` marker): useful to debug what a template sees."""
        messages = _the_conversation(messages, conversation, "ChatTemplate.template_variables")
        variables, _ = self._prepare(messages, tools, documents, add_generation_prompt, False,
                                     template_kwargs)
        return variables

    def _polyfilled(self, messages: Any, tools: Any, polyfill: Union[bool, Mapping[str, bool]],
                    template_kwargs: Dict[str, Any]) -> Any:
        """``messages`` with the polyfills ``polyfill`` allows and the input needs applied
        (see :mod:`.polyfills`); ``messages`` itself when none applies."""
        if polyfill is False:
            return messages
        from .polyfills import (apply_polyfills, polyfills_needed, selected_polyfills,
                                tool_call_example)

        try:
            allowed = selected_polyfills(polyfill)
        except ValueError as error:
            raise ChatTemplateValueError(str(error)) from None
        chat = _normalize_conversation(messages)
        schemas = _tool_schemas(tools)
        options = dict(template_kwargs)
        _refuse_tokenization_options(options)
        caps = self.capabilities(**options)
        needed = polyfills_needed(caps, chat, schemas, allowed)
        if not needed:
            return chat
        example = None
        if "tools" in needed:
            example = tool_call_example(self, caps, options)
        return apply_polyfills(plain_template_data(chat), plain_template_data(schemas),
                               needed, example)

    def _prepare(self, messages: Any, tools: Any, documents: Any, add_generation_prompt: Any,
                 continue_final_message: Union[bool, str], template_kwargs: Dict[str, Any]
                 ) -> Tuple[Dict[str, Any], Optional[str]]:
        _refuse_tokenization_options(template_kwargs)
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


#: A string given where a template source or a model path is accepted is a path when it ends in
#: one of these, or when it holds none of the template marks below (and never when it holds a
#: line break, which no path does).
PATH_SUFFIXES = (".jinja", ".json", ".gguf")
_TEMPLATE_MARKS = ("{{", "{%", "{#")


def names_a_path(text: str) -> bool:
    """Whether ``text``, given where a template source or a model path is accepted, means a
    path: it ends in ``.jinja``, ``.json`` or ``.gguf``, or holds no ``{{``, ``{%`` or ``{#``
    (a template without them renders a constant text); never with a line break in it."""
    if "\n" in text:
        return False
    return text.endswith(PATH_SUFFIXES) or not any(mark in text for mark in _TEMPLATE_MARKS)


def _the_conversation(messages: Any, conversation: Any, call: str) -> Any:
    """The conversation given as ``messages`` or under transformers' name ``conversation=``."""
    if conversation is None:
        if messages is None:
            raise TypeError(f"{call}() missing the conversation: pass the messages (positionally "
                            "or as messages=, or as conversation= like transformers)")
        return messages
    if messages is not None:
        raise TypeError(f"{call}() got the conversation twice: messages and conversation= "
                        "(transformers' name for it) are the same argument, pass one of them")
    return conversation
