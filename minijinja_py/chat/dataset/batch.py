"""One batch of chat rows in, prompts or token ids out: :class:`ChatBatchProcessor`.

The processor is the unit every dataset runner shares: ``datasets.Dataset.map(batched=True,
num_proc=...)``, Ray Data's ``map_batches`` and the ``minijinja-py dataset`` command all call it
on column batches (``{"messages": [...], "id": [...]}``). It holds configuration only (paths,
a template source, options), so it pickles small and each process builds its
:class:`~minijinja_py.ChatTemplate` or :class:`~minijinja_py.chat.ChatTokenizer` once, on first
use. A row that fails keeps its place: its outputs are None and the ``error`` column says why,
so the output has as many rows as the input.
"""

from __future__ import annotations

import inspect
import json
import os
from collections import abc
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from ...exceptions import TemplateError
from ..config import ChatConfig, load_chat_config, select_template
from ..pipeline import ChatTemplate, ChatTemplateValueError, names_a_path

__all__ = ["ChatBatchProcessor", "MalformedRowError", "describe_error", "error_details",
           "ERROR_COLUMN", "TEXT_COLUMN", "TOKEN_COLUMNS", "MASK_COLUMN"]

TEXT_COLUMN = "text"
TOKEN_COLUMNS = ("input_ids", "attention_mask")
MASK_COLUMN = "assistant_masks"
ERROR_COLUMN = "error"

# option value -> the apply_chat_template argument
_MASK_MODES: Dict[Any, Union[bool, str]] = {
    False: False, None: False, True: True, "generation": True, "messages": "messages"}
_SANITIZE_MODES: Dict[Any, Union[bool, str]] = {
    False: False, None: False, True: True, "markers": True, "provenance": "provenance"}
# per-row variables that are the render's own arguments rather than template variables
_ROW_OPTIONS = ("add_generation_prompt", "continue_final_message")
_CONVERSATION_KEYS = ("messages", "tools", "documents")
_MAX_MESSAGE = 2000  # characters of an error message kept (ChatTemplateValueError may quote a chat)


class MalformedRowError(ValueError):
    """A row the chat layer cannot take as it is: no conversation, a conversation that is not a
    list of message objects with a string ``role``, tools or documents that are not lists,
    variables that are not an object, or JSON text in one of those columns that does not
    parse."""


# ---- errors as data ---------------------------------------------------------------------------
def error_details(exc: BaseException) -> Dict[str, Any]:
    """``{"class", "message", "location"}`` of a row's error: the class name, the first line of
    its message (capped), and for a template error ``{"template", "line", "column"}`` (else
    None)."""
    if isinstance(exc, TemplateError):
        message = exc.message if exc.message is not None else ""
    else:
        message = str(exc)
    lines = message.strip().splitlines()
    message = lines[0] if lines else ""
    if len(message) > _MAX_MESSAGE:
        message = f"{message[:_MAX_MESSAGE]}... ({len(message) - _MAX_MESSAGE:,} more characters)"
    location = None
    if isinstance(exc, TemplateError) and exc.lineno is not None:
        location = {"template": exc.name, "line": exc.lineno, "column": exc.column}
    return {"class": type(exc).__name__, "message": message, "location": location}


def describe_error(exc: BaseException) -> str:
    """One line: ``"ClassName: message (line L, column C)"`` (the location only for a template
    error that has one)."""
    details = error_details(exc)
    text = f"{details['class']}: {details['message']}" if details["message"] \
        else details["class"]
    location = details["location"]
    if location is not None:
        where = f"line {location['line']}"
        if location["column"] is not None:
            where += f", column {location['column']}"
        text += f" ({where})"
    return text


# ---- the processor ----------------------------------------------------------------------------
class ChatBatchProcessor:
    """Render (or encode) the conversation of every row of a column batch.

    ``template`` is a model folder, a ``tokenizer_config.json``, a ``.jinja`` or ``.gguf`` file
    (a path), a template source (a string with a line break, or with ``{{``, ``{%`` or ``{#``
    and not ending in ``.jinja``, ``.json`` or ``.gguf``: ``apply_chat_template``'s rule), a parsed
    tokenizer config (a dict) or a :class:`~minijinja_py.ChatTemplate` (its source, name and
    special tokens are kept). With several named templates, ``name`` picks one; otherwise each
    row gets ``tool_use`` when it has tools and the config has it, else ``default``, as in
    transformers.

    Tokens: ``tokens=True`` (or a ``tokenizer`` model folder) encodes with
    :meth:`ChatTokenizer.apply_chat_template <minijinja_py.chat.ChatTokenizer.apply_chat_template>`;
    the tokenizer is ``tokenizer`` or else ``template`` (which must then be a model folder). When
    ``template`` is that very folder its own templates are used; otherwise ``template``'s
    template is rendered with the tokenizer's special tokens (transformers' ``chat_template=``).
    ``mask`` (False, True/``"generation"``, ``"messages"``) adds ``assistant_masks``;
    ``sanitize`` (False, True/``"markers"``, ``"provenance"``) is ``sanitize_control_tokens``;
    ``max_length`` truncates (``truncation=True``). These three need tokens.

    Columns: ``messages_column`` holds the conversation (a list of message dicts, each with a
    string ``role``); ``tools_column`` and ``documents_column`` are used when the batch has them
    (None values mean none); ``variables_column`` (off by default) holds a dict of template
    variables per row, over ``variables`` (the same for every row); in either,
    ``add_generation_prompt`` and ``continue_final_message`` set those render options. A string
    in any of these columns is read as JSON text first (Parquet files often store heterogeneous
    tool schemas that way). ``now`` fixes what ``strftime_now()`` formats.

    Calling the processor on ``{column: [values]}`` returns every input column unchanged plus
    ``text`` (or ``input_ids``, ``attention_mask`` and with ``mask`` ``assistant_masks``) and
    ``error``: None, or ``"ClassName: message (line L, column C)"`` for a row that failed, whose
    outputs are then None. With ``errors="raise"`` the first failing row's exception propagates
    instead.

    >>> processor = ChatBatchProcessor("{% for m in messages %}<{{ m.role }}>{{ m.content }}"
    ...                                "{% endfor %}")
    >>> processor({"id": [1, 2], "messages": [[{"role": "user", "content": "Hi"}], "oops"]})
    ... # doctest: +NORMALIZE_WHITESPACE
    {'id': [1, 2], 'messages': [[{'role': 'user', 'content': 'Hi'}], 'oops'],
     'text': ['<user>Hi', None],
     'error': [None, "MalformedRowError: 'messages' holds a string that is not JSON (Expecting
     value: line 1 column 1 (char 0))"]}
    """

    def __init__(self, template: Any, *, tokenizer: Any = None, tokens: bool = False,
                 messages_column: str = "messages", tools_column: Optional[str] = "tools",
                 documents_column: Optional[str] = "documents",
                 variables_column: Optional[str] = None,
                 variables: Optional[Mapping[str, Any]] = None,
                 add_generation_prompt: bool = False, mask: Union[bool, str] = False,
                 sanitize: Union[bool, str] = False, max_length: Optional[int] = None,
                 now: Any = None, errors: str = "column", name: Optional[str] = None) -> None:
        self._template = _template_spec(template)
        self.tokens = bool(tokens) or tokenizer is not None
        if mask not in _MASK_MODES:
            raise ValueError(f"mask must be False, True, 'generation' or 'messages', not {mask!r}")
        if sanitize not in _SANITIZE_MODES:
            raise ValueError("sanitize must be False, True, 'markers' or 'provenance', not "
                             f"{sanitize!r}")
        if max_length is not None and (not isinstance(max_length, int)
                                       or isinstance(max_length, bool) or max_length < 1):
            raise ValueError(f"max_length must be a positive int, not {max_length!r}")
        if errors not in ("column", "raise"):
            raise ValueError(f"errors must be 'column' or 'raise', not {errors!r}")
        needs_tokens = [option for option, value in (("mask", _MASK_MODES[mask]),
                                                      ("sanitize", _SANITIZE_MODES[sanitize]),
                                                      ("max_length", max_length)) if value]
        if needs_tokens and not self.tokens:
            raise ValueError(f"{', '.join(needs_tokens)} need(s) token ids: pass tokens=True "
                             "(template a model folder) or tokenizer=MODEL_DIR")
        self.tokenizer_path: Optional[str] = None
        if self.tokens:
            if tokenizer is not None:
                if not isinstance(tokenizer, (str, os.PathLike)):
                    raise TypeError("tokenizer must be the path of a model folder (the processor "
                                    "is pickled to workers, which load it themselves), not "
                                    f"{type(tokenizer).__name__}")
                self.tokenizer_path = os.fspath(tokenizer)
            elif self._template[0] == "path":
                self.tokenizer_path = self._template[1]
            else:
                raise ValueError("tokens=True needs a model folder: give tokenizer=MODEL_DIR")
        self.messages_column = messages_column
        self.tools_column = tools_column
        self.documents_column = documents_column
        self.variables_column = variables_column
        self.variables: Dict[str, Any] = dict(variables or {})
        for key in self.variables:
            _check_variable_name(key, self.tokens, "variables")
        self.add_generation_prompt = add_generation_prompt
        self.mask = _MASK_MODES[mask]
        self.sanitize = _SANITIZE_MODES[sanitize]
        self.max_length = max_length
        self.now = now
        self.errors = errors
        self.name = name
        self._loaded: Optional[_Loaded] = None

    # -- what comes out ------------------------------------------------------------------
    @property
    def output_columns(self) -> Tuple[str, ...]:
        """The columns a call adds (besides ``error``): ``("text",)``, or
        ``("input_ids", "attention_mask")`` and ``"assistant_masks"`` with a mask."""
        if not self.tokens:
            return (TEXT_COLUMN,)
        return TOKEN_COLUMNS + ((MASK_COLUMN,) if self.mask else ())

    @property
    def conversation_columns(self) -> Tuple[str, ...]:
        """The columns a row's conversation is read from."""
        return tuple(column for column in (self.messages_column, self.tools_column,
                                           self.documents_column, self.variables_column)
                     if column is not None)

    # -- pickling: configuration only ---------------------------------------------------
    def __getstate__(self) -> Dict[str, Any]:
        state = dict(self.__dict__)
        state["_loaded"] = None  # templates and tokenizers are rebuilt in each process
        return state

    def __setstate__(self, state: Dict[str, Any]) -> None:
        self.__dict__.update(state)

    def __repr__(self) -> str:
        kind, value = self._template[0], self._template[1]
        shown = value if kind == "path" else f"<{kind}>"
        mode = f"tokens from {self.tokenizer_path!r}" if self.tokens else "text"
        return f"<ChatBatchProcessor {shown!r}, {mode}>"

    # -- loading ----------------------------------------------------------------------------
    def load(self) -> "ChatBatchProcessor":
        """Build the template(s) and tokenizer now (a call does it on first use): raises what
        loading raises (:class:`~minijinja_py.chat.ChatConfigError`, FileNotFoundError,
        :class:`~minijinja_py.TemplateSyntaxError`, TokenizersNotInstalledError). Returns
        self."""
        if self._loaded is None:
            self._loaded = _Loaded(self)
        return self

    # -- one row ----------------------------------------------------------------------------
    def process_row(self, row: Mapping[str, Any]) -> Dict[str, Any]:
        """The output columns for one row (a mapping from column names to values); raises
        whatever makes the row fail (:class:`MalformedRowError`, a
        :class:`~minijinja_py.TemplateError`, a ValueError or TypeError of the chat layer)."""
        loaded = self._loaded if self._loaded is not None else self.load()._loaded
        assert loaded is not None
        messages = _conversation(row, self.messages_column)
        tools = _optional(row, self.tools_column, list, "a list of tool schemas")
        documents = _optional(row, self.documents_column, list, "a list of documents")
        options: Dict[str, Any] = {"add_generation_prompt": self.add_generation_prompt}
        kwargs: Dict[str, Any] = {}
        for key, value in self.variables.items():
            (options if key in _ROW_OPTIONS else kwargs)[key] = value
        if self.variables_column is not None:
            row_variables = _optional(row, self.variables_column, dict, "an object of variables")
            for key, value in (row_variables or {}).items():
                if key in _ROW_OPTIONS:
                    options[key] = value
                    continue
                try:
                    _check_variable_name(key, self.tokens, repr(self.variables_column))
                except ValueError as exc:
                    raise MalformedRowError(str(exc)) from None
                kwargs[key] = value
        if not self.tokens:
            template = loaded.template_for(tools)
            return {TEXT_COLUMN: template.render(messages, tools=tools, documents=documents,
                                                 **options, **kwargs)}
        encoding = loaded.tokenizer.apply_chat_template(
            messages, tools=tools, documents=documents, chat_template=loaded.chat_template(tools),
            sanitize_control_tokens=self.sanitize, return_assistant_tokens_mask=self.mask,
            truncation=self.max_length is not None, max_length=self.max_length,
            **options, **kwargs)
        result = {TOKEN_COLUMNS[0]: list(encoding["input_ids"]),
                  TOKEN_COLUMNS[1]: list(encoding["attention_mask"])}
        if self.mask:
            result[MASK_COLUMN] = list(encoding["assistant_masks"])
        return result

    # -- a batch ----------------------------------------------------------------------------
    def __call__(self, batch: Mapping[str, Sequence[Any]]) -> Dict[str, List[Any]]:
        """Process a column batch ``{column: [value per row]}`` (see the class docstring)."""
        columns = list(batch.keys())
        lengths = {column: len(batch[column]) for column in columns}
        if len(set(lengths.values())) > 1:
            raise ValueError(f"the batch's columns differ in length: {lengths}")
        if self.messages_column not in lengths:
            raise ValueError(f"the batch has no {self.messages_column!r} column (columns: "
                             f"{', '.join(map(repr, columns)) or 'none'})")
        clashes = [column for column in self.output_columns + (ERROR_COLUMN,)
                   if column in lengths]
        if clashes:
            raise ValueError(f"the batch already has column(s) {', '.join(map(repr, clashes))}, "
                             "which the processor writes: rename or drop them first")
        count = lengths[self.messages_column]
        read = [column for column in self.conversation_columns if column in lengths]
        outputs: Dict[str, List[Any]] = {column: [] for column in self.output_columns}
        errors: List[Optional[str]] = []
        self.load()
        for index in range(count):
            try:
                values = self.process_row({column: batch[column][index] for column in read})
            except Exception as exc:
                if self.errors == "raise":
                    raise
                for column in outputs:
                    outputs[column].append(None)
                errors.append(describe_error(exc))
            else:
                for column in outputs:
                    outputs[column].append(values[column])
                errors.append(None)
        result: Dict[str, List[Any]] = {column: batch[column] for column in columns}
        result.update(outputs)
        result[ERROR_COLUMN] = errors
        return result


# ---- what one process builds ------------------------------------------------------------------
class _Loaded:
    """The compiled template(s) and the tokenizer of one processor, in one process."""

    def __init__(self, processor: ChatBatchProcessor) -> None:
        kind, value = processor._template[0], processor._template[1]
        self.name = processor.name
        self.tokenizer: Any = None
        self.own_templates = False
        self.config: Optional[ChatConfig] = None
        self.templates: Dict[str, ChatTemplate] = {}
        if processor.tokens:
            from ..tokens import ChatTokenizer

            assert processor.tokenizer_path is not None
            self.tokenizer = ChatTokenizer.from_pretrained(processor.tokenizer_path,
                                                           now=processor.now)
            self.own_templates = kind == "path" and _same_path(value, processor.tokenizer_path)
        if self.own_templates:
            names = [self.name] if self.name is not None else sorted(
                self.tokenizer.chat_templates)
            if not names:
                self.tokenizer.get_chat_template(None)  # raises the folder's reason
            for name in names:  # compile now: a syntax error shows once, not on every row
                if name not in self.tokenizer.chat_templates:
                    select_template(self.tokenizer.chat_templates, name=name)  # raises
                self.tokenizer.get_chat_template(name)
            return
        if kind == "path":
            self.config = load_chat_config(value)
        elif kind == "config":
            self.config = load_chat_config(value)
        else:
            self.config = ChatConfig({"default": value}, dict(processor._template[3]),
                                     processor._template[2] or "<template>")
        names = [self.name] if self.name is not None else sorted(self.config.templates)
        for name in names:
            self._compile(name, processor.now)

    def _compile(self, name: str, now: Any) -> ChatTemplate:
        assert self.config is not None
        template = self.templates.get(name)
        if template is None:
            selected, source = select_template(self.config.templates, name=name)
            label = self.config.origin if len(self.config.templates) == 1 \
                else f"{self.config.origin} [{selected}]"
            template = ChatTemplate(source, now=now, name=label,
                                    special_tokens=self.config.special_tokens,
                                    template_name=selected)
            self.templates[name] = template
        return template

    def template_for(self, tools: Any) -> ChatTemplate:
        assert self.config is not None
        selected, _ = select_template(self.config.templates, name=self.name, tools=tools)
        return self.templates[selected]

    def chat_template(self, tools: Any) -> Union[None, str, ChatTemplate]:
        """What to pass as ``chat_template=``: a name of the tokenizer's own templates (None:
        its choice by tools), or the compiled template of the other config."""
        if self.own_templates:
            return self.name
        return self.template_for(tools)


# ---- helpers ----------------------------------------------------------------------------------
def _template_spec(template: Any) -> Tuple[Any, ...]:
    """The picklable description of ``template``: ("path", str), ("source", str, name,
    special tokens) or ("config", dict)."""
    if isinstance(template, ChatTemplate):
        return ("source", template.source, template.name, dict(template.special_tokens))
    if isinstance(template, os.PathLike):
        return ("path", os.fspath(template))
    if isinstance(template, str):  # the rule of apply_chat_template
        return ("path", template) if names_a_path(template) else ("source", template, None, {})
    if isinstance(template, abc.Mapping):
        return ("config", dict(template))
    raise TypeError("template must be a path, a template source, a tokenizer config dict or a "
                    f"ChatTemplate, not {type(template).__name__}")


def _same_path(first: str, second: str) -> bool:
    try:
        return os.path.samefile(first, second)
    except OSError:
        return os.path.realpath(first) == os.path.realpath(second)


_APPLY_PARAMETERS: Optional[frozenset] = None


def _check_variable_name(key: Any, tokens: bool, where: str) -> None:
    """A template variable must not take the place of a render argument (``messages``...) or,
    with tokens, of one of ``apply_chat_template``'s own options (``padding``, ``now``...)."""
    global _APPLY_PARAMETERS
    if not isinstance(key, str):
        raise ValueError(f"{where}: a variable name must be a string, not {key!r}")
    if key in _CONVERSATION_KEYS:
        raise ValueError(f"{where}: {key!r} is not a template variable here (it comes from its "
                         "own column)")
    if tokens:
        if _APPLY_PARAMETERS is None:
            from ..tokens import ChatTokenizer

            _APPLY_PARAMETERS = frozenset(
                name for name, parameter in
                inspect.signature(ChatTokenizer.apply_chat_template).parameters.items()
                if parameter.kind is not inspect.Parameter.VAR_KEYWORD) - set(_ROW_OPTIONS)
        if key in _APPLY_PARAMETERS:
            raise ValueError(f"{where}: {key!r} is an option of apply_chat_template, so it "
                             "cannot be passed as a template variable")


def _decoded(value: Any, column: str) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except (ValueError, RecursionError) as exc:
            reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise MalformedRowError(f"{column!r} holds a string that is not JSON ({reason})") \
                from None
    return value


def _conversation(row: Mapping[str, Any], column: str) -> List[Any]:
    if column not in row:
        raise MalformedRowError(f"the row has no {column!r} column")
    messages = _decoded(row[column], column)
    if messages is None:
        raise MalformedRowError(f"{column!r} is null")
    if not isinstance(messages, (list, tuple)):
        raise MalformedRowError(f"{column!r} must be a list of messages, not "
                                f"{_type_name(messages)}")
    for index, message in enumerate(messages):
        if not isinstance(message, abc.Mapping):  # not typing's alias: 5x faster per message
            raise MalformedRowError(f"{column}[{index}] must be a message object, not "
                                    f"{_type_name(message)}")
        role = message.get("role")
        if role is None:
            raise MalformedRowError(f"{column}[{index}] has no 'role'")
        if not isinstance(role, str):
            raise MalformedRowError(f"{column}[{index}].role must be a string, not "
                                    f"{_type_name(role)}")
    if not messages:  # the chat layer's own error, with its wording
        raise ChatTemplateValueError("Cannot apply a chat template to an empty conversation: "
                                     "give at least one message.")
    return list(messages)


def _optional(row: Mapping[str, Any], column: Optional[str], kind: type, what: str) -> Any:
    if column is None or column not in row:
        return None
    value = _decoded(row[column], column)
    if value is None:
        return None
    if kind is list and isinstance(value, tuple):
        value = list(value)
    if not isinstance(value, kind):
        raise MalformedRowError(f"{column!r} must be {what}, not {_type_name(value)}")
    return value


def _type_name(value: Any) -> str:
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean",
             int: "a number", float: "a number"}
    return names.get(type(value), type(value).__name__)
