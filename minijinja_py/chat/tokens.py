"""Token ids and masks: what ``tokenizer.apply_chat_template(tokenize=True)`` returns.

:class:`ChatTokenizer` loads a model folder the way transformers 5.24 loads one for its
``TokenizersBackend``: ``tokenizer.json`` with the `tokenizers` library (the Rust tokenizer
transformers itself runs), ``tokenizer_config.json`` for the special tokens, pad token,
``model_max_length``, padding/truncation side, ``split_special_tokens`` and
``chat_control_tokens``, and the folder's chat template(s) (:mod:`.config`). Its
:meth:`ChatTokenizer.apply_chat_template` takes transformers' arguments, with their defaults, and
returns the same ids, masks and errors:

- the rendered text is encoded with ``add_special_tokens=False`` (the template writes them);
- ``return_assistant_tokens_mask`` marks every token whose character offsets overlap the output
  of a ``{% generation %}`` block (spans from :meth:`ChatTemplate.render_with_spans`);
- ``sanitize_control_tokens`` wraps every control token found in the caller's strings (messages,
  tools, documents, template variables) in two private-use marker characters before rendering,
  then encodes the rendered text piece by piece: marked tokens as plain text (special tokens
  split), the rest normally, each later piece after a newline that is dropped again, so that a
  SentencePiece tokenizer does not add its prefix space in the middle of the text;
- ``padding`` (``True``/``"longest"``/``"max_length"``), ``truncation`` and ``max_length`` follow
  transformers' strategy rules (``max_length`` defaults to ``model_max_length``; a tokenizer
  without a pad token refuses to pad).

Beyond transformers, ``sanitize_control_tokens=True`` and ``return_assistant_tokens_mask=True``
work together: the ids are the sanitised ids, and each token's mask bit says whether its
characters overlap a generation span, the same rule on the same text as the unsanitised mask.

Also beyond transformers, from a provenance render (:mod:`.provenance_uses`):
``sanitize_control_tokens="provenance"`` encodes as text every control token that has a
character from the caller, however the template assembled it, and
``return_assistant_tokens_mask="messages"`` builds the mask from the assistant messages'
characters and the text closing their turns, without ``{% generation %}`` tags.

The `tokenizers` package is an optional extra, imported only here and only when a tokenizer is
loaded: without it :class:`TokenizersNotInstalledError` says what to install.

Why one module of this size: loading, encoding, masks, sanitising, padding, truncation and
batches all follow one call's arguments through transformers' order of steps, on one loaded
tokenizer; the provenance variants are in provenance_uses.py, the command in cli.py.
"""

from __future__ import annotations

import bisect
import itertools
import json
import operator
import os
import re
import threading
from collections import OrderedDict
from pathlib import Path
from typing import (Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple,
                    Union)

from .extras import install_hint
from .config import (TOKENIZER_CONFIG_FILE, ChatConfigError, _extra_special_tokens_of,
                     _special_tokens_of, load_chat_config, select_template)
from .files import ModelFolder
from ..exceptions import TemplateError
from .pipeline import ChatTemplate, ChatTemplateValueError, _normalize_conversation
from .tokenizer_api import (NO_GENERATION_TAG_WARNING, TensorLibraryNotInstalledError,
                            TransformersTokenizerAPI, has_generation_tag, to_tensor, warn_once)
from .tokenizer_caps import check_tokenizer_config, check_tokenizer_json

TYPE_CHECKING = False
if TYPE_CHECKING:  # pragma: no cover
    from .pipeline import Now
    from .provenance_uses import AssistantMaskRule, SanitizeRule

__all__ = [
    "ChatTokenizer", "ChatEncoding", "TokenizersNotInstalledError",
    "TensorLibraryNotInstalledError", "UnencodableTextError", "load_tokenizer",
    "INSTALL_HINT", "TOKENIZER_FILE", "CONTROL_TOKEN_START", "CONTROL_TOKEN_END",
    "template_literal_text",
]

PathLike = Union[str, "os.PathLike[str]"]

TOKENIZER_FILE = "tokenizer.json"
INSTALL_HINT = install_hint("tokenizers")

#: Private-use characters wrapped around control tokens found in the caller's strings (the
#: same two transformers uses, so a marked render is byte-identical to transformers' one).
CONTROL_TOKEN_START = "\U000f0000"
CONTROL_TOKEN_END = "\U000f0001"

#: Most bytes read from a ``tokenizer.json`` (real ones reach ~35 MB; the folder budget of
#: :mod:`.config` is for configs and templates).
MAX_TOKENIZER_BYTES = 512 * 1024 * 1024

# transformers' thresholds: a model_max_length above LARGE_INTEGER means "no limit known".
LARGE_INTEGER = int(1e20)
VERY_LARGE_INTEGER = int(1e30)

_PADDING_VALUES = ("longest", "max_length", "do_not_pad")
_TRUNCATION_VALUES = ("longest_first", "only_first", "only_second", "do_not_truncate")

#: Below this many characters one plain encode is faster than pieces encoded in parallel.
_PARALLEL_MIN_CHARS = 4096

#: Most characters of added tokens (all together) for which a text is cut at its added tokens
#: with a regular expression, to encode the pieces in parallel or find control tokens without
#: encoding. Compiling it costs 2.5 to 4 microseconds a character (up to a second at this size,
#: once), so beyond it (tens of thousands of added tokens; real chat models have at most a few
#: thousand, in some kilobytes: command-r 1,008 in 11,219 characters) the Rust encoder does
#: that work itself, with the same result.
_MAX_ADDED_PATTERN_CHARS = 256 * 1024

#: Pre-tokenizers that treat every piece of text alike, wherever it starts.
_PIECEWISE_PRE_TOKENIZERS = ("Split", "ByteLevel", "Whitespace", "WhitespaceSplit", "Punctuation",
                             "Digits", "UnicodeScripts", "BertPreTokenizer",
                             "CharDelimiterSplit")

#: tokenizer_kwargs understood here (the others transformers' __call__ takes return data this
#: API does not produce).
_TOKENIZER_KWARGS = ("padding", "truncation", "max_length", "pad_to_multiple_of", "padding_side",
                     "return_attention_mask", "return_offsets_mapping", "split_special_tokens",
                     "verbose")


class UnencodableTextError(TemplateError, TypeError):
    """The rendered text holds a lone surrogate (a code point U+D800-U+DFFF that is half of a
    pair), which no tokenizer encodes: transformers raises the tokenizers library's
    ``TypeError`` there; this one says why and where. The text renders (``tokenize=False``)."""


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _refuse_surrogates(texts: Sequence[str]) -> None:
    """Raise :class:`UnencodableTextError` for the first text holding a lone surrogate."""
    for text in texts:
        found = _LONE_SURROGATE.search(text)
        if found is not None:
            raise UnencodableTextError(
                f"cannot encode the rendered text: it holds a lone surrogate "
                f"{found.group()!r} at character {found.start():,} (half of a UTF-16 pair, "
                "which no tokenizer encodes)")


class TokenizersNotInstalledError(ImportError):
    """Token ids were asked for, but the optional ``tokenizers`` package is not installed."""


def _import_tokenizers() -> Any:
    try:
        import tokenizers
    except ImportError as exc:
        raise TokenizersNotInstalledError(
            "token ids need the optional 'tokenizers' package (the Rust tokenizer transformers "
            f"runs); install it with: {INSTALL_HINT}") from exc
    return tokenizers


# ---- the result ------------------------------------------------------------------------------
class ChatEncoding(dict):
    """A dict (``input_ids``, ``attention_mask`` and, when asked, ``assistant_masks``) whose
    keys are also attributes, like transformers' ``BatchEncoding``. ``text`` holds the rendered
    prompt(s) the ids were made of (markers removed when sanitising)."""

    text: Union[str, List[str], None] = None

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


# ---- control tokens --------------------------------------------------------------------------
_LITERAL_CACHE: "OrderedDict[str, str]" = OrderedDict()


def template_literal_text(chat_template: ChatTemplate) -> str:
    """The template's literal text and string constants joined by NUL characters (so a search
    cannot match across two of them): where transformers looks for added tokens the template
    writes itself, when the tokenizer does not list its ``chat_control_tokens``."""
    source = chat_template.source
    cached = _LITERAL_CACHE.get(source)
    if cached is not None:
        return cached
    text = "\0".join(sorted(chat_template.template.literal_strings()))
    _LITERAL_CACHE[source] = text
    if len(_LITERAL_CACHE) > 64:
        _LITERAL_CACHE.popitem(last=False)
    return text


def _alternation(tokens: Iterable[str]) -> str:
    """A regex matching any of ``tokens``, leftmost and then longest first (the Rust added
    vocabulary's leftmost-longest rule). Grouped by first character, which makes a scan over
    a long text with a thousand tokens about ten times faster than a flat alternation."""
    groups: Dict[str, List[str]] = {}
    for token in set(tokens):
        if token:
            groups.setdefault(token[0], []).append(token[1:])
    branches = []
    for first in sorted(groups):
        rests = sorted(groups[first], key=len, reverse=True)
        if rests == [""]:
            branches.append(re.escape(first))
            continue
        inner = "|".join(re.escape(rest) for rest in rests if rest)
        optional = "?" if "" in rests else ""
        branches.append(f"{re.escape(first)}(?:{inner}){optional}")
    return "|".join(branches) or "(?!)"


def _mark(value: Any, pattern: "re.Pattern[str]") -> Any:
    """Wrap the control tokens in every string of ``value`` (dict values, list and tuple items;
    keys are left alone) in the markers; markers already present are dropped first, so they
    cannot be forged. Tuples become lists, as in transformers."""
    if isinstance(value, str):
        value = value.replace(CONTROL_TOKEN_START, "").replace(CONTROL_TOKEN_END, "")
        return pattern.sub(lambda m: CONTROL_TOKEN_START + m.group(0) + CONTROL_TOKEN_END, value)
    if isinstance(value, dict):
        return {key: _mark(item, pattern) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_mark(item, pattern) for item in value]
    return value


# ---- the tokenizer ---------------------------------------------------------------------------
def _render_conversations(template: ChatTemplate, conversations: List[Any],
                          with_provenance: bool, with_spans: bool, **call: Any
                          ) -> Tuple[List[str], List[List[Tuple[int, int]]], List[Any]]:
    """(texts, generation spans, provenance results) of rendering each conversation with
    ``template`` (``call``: the render's other arguments): with provenance (spans and
    results), else with spans, else plain (neither)."""
    texts: List[str] = []
    spans: List[List[Tuple[int, int]]] = []
    provenance: List[Any] = []
    for chat in conversations:
        if with_provenance:
            result = template.render_with_provenance(chat, **call)
            texts.append(result.text)
            spans.append(list(result.generation_spans))
            provenance.append(result)
        elif with_spans:
            result = template.render_with_spans(chat, **call)
            texts.append(result.text)
            spans.append(list(result.generation_spans))
        else:
            texts.append(template.render(chat, **call))
    return texts, spans, provenance


class ChatTokenizer(TransformersTokenizerAPI):
    """A model folder's tokenizer and chat template(s), encoding chats like transformers.

    Load with ``ChatTokenizer.from_pretrained(folder)`` (or :func:`load_tokenizer`, which
    caches). ``backend`` is the ``tokenizers.Tokenizer``; ``special_tokens_map`` the special
    tokens passed to templates; ``bos_token``, ``eos_token``, ``unk_token``, ``sep_token``,
    ``pad_token``, ``cls_token``, ``mask_token`` and their ``*_token_id``, ``chat_template``,
    ``padding_side``, ``truncation_side``, ``model_max_length``, ``chat_control_tokens`` and
    ``clean_up_tokenization_spaces`` mirror transformers' attributes (setting a special token
    or ``chat_template`` works as there); ``chat_templates`` maps every template's name to its
    source. ``now`` fixes ``strftime_now()``. Calling the tokenizer encodes text as
    transformers' ``tokenizer(text)`` does (:meth:`__call__`), :meth:`decode` and
    :meth:`batch_decode` turn ids back into text.
    """

    def __init__(self, backend: Any, config: Optional[Mapping[str, Any]] = None, *,
                 chat_templates: Optional[Mapping[str, str]] = None,
                 template_error: Optional[Exception] = None, now: Now = None,
                 name: Optional[str] = None) -> None:
        config = dict(config or {})
        self.backend = backend
        self.name = name or "<tokenizer>"
        self.now = now
        self.chat_templates: Dict[str, str] = dict(chat_templates or {})
        self._template_error = template_error
        self.special_tokens_map: Dict[str, str] = _special_tokens_of(config)
        self.extra_special_tokens: List[str] = _extra_special_tokens_of(config)
        self.clean_up_tokenization_spaces = bool(config.get("clean_up_tokenization_spaces",
                                                            False))
        self._clean_up_bpe_anyway = bool(config.get(
            "clean_up_tokenization_spaces_for_bpe_even_though_it_will_corrupt_output", False))
        self._warned_too_long = False
        self.model_max_length = config.get("model_max_length", VERY_LARGE_INTEGER)
        if not isinstance(self.model_max_length, (int, float)) or \
                isinstance(self.model_max_length, bool):
            self.model_max_length = VERY_LARGE_INTEGER
        self.padding_side = self._side(config, "padding_side")
        self.truncation_side = self._side(config, "truncation_side")
        self.split_special_tokens = bool(config.get("split_special_tokens", False))
        control = config.get("chat_control_tokens")
        if control is not None and not isinstance(control, (list, tuple)):
            raise TypeError(f"`chat_control_tokens` should be a list of strings, got {control!r}")
        self.chat_control_tokens: Optional[Tuple[str, ...]] = \
            None if control is None else tuple(str(item) for item in control)

        self._add_config_tokens(config.get("added_tokens_decoder"))
        self._add_special_tokens(config)
        backend.no_truncation()
        backend.no_padding()
        backend.encode_special_tokens = self.split_special_tokens
        self.added_tokens_decoder: Dict[int, Any] = dict(
            sorted(backend.get_added_tokens_decoder().items()))
        self.added_tokens_encoder: Dict[str, int] = {
            token.content: index for index, token in self.added_tokens_decoder.items()}
        # The pattern of every added token is compiled on first use, and only when short
        # enough (see _MAX_ADDED_PATTERN_CHARS); the shortcuts that use it need _segmentable.
        self._added_pattern: Optional["re.Pattern[str]"] = None
        self._segmentable = self._position_independent() and \
            sum(map(len, self.added_tokens_encoder)) <= _MAX_ADDED_PATTERN_CHARS
        self._lock = threading.Lock()
        self._backends: Dict[bool, Any] = {}  # copies with the other encode_special_tokens
        self._templates: "OrderedDict[Any, ChatTemplate]" = OrderedDict()
        self._control_patterns: Dict[Tuple[str, ...], "re.Pattern[str]"] = {}
        self._newline_ids: List[int] = self._encode_texts(["\n"])[0][0]

    def _position_independent(self) -> bool:
        """Whether encoding the pieces between added tokens separately (in parallel) gives the
        very ids and offsets of one encode. The Rust tokenizer itself cuts the text at added
        tokens first and normalizes and pre-tokenizes each piece on its own; that holds when
        no added token strips or joins its neighbours, all match before normalization, and no
        pre-tokenizer treats the start of the text specially (Metaspace's "first" scheme)."""
        for token in self.added_tokens_decoder.values():
            if token.lstrip or token.rstrip or token.single_word or token.normalized:
                return False
        pre_tokenizer = self.backend.pre_tokenizer
        if pre_tokenizer is None:
            return True
        try:
            state = json.loads(pre_tokenizer.__getstate__())
        except Exception:
            return False
        stack = [state]
        while stack:
            node = stack.pop()
            if not isinstance(node, dict):
                return False
            kind = node.get("type")
            if kind == "Sequence":
                stack.extend(node.get("pretokenizers") or [])
            elif kind == "Metaspace":
                if node.get("prepend_scheme", "always") not in ("always", "never"):
                    return False
            elif kind not in _PIECEWISE_PRE_TOKENIZERS:
                return False
        return True

    @property
    def _added_re(self) -> "re.Pattern[str]":
        """Every added token, leftmost and then longest first (the Rust added vocabulary's
        rule): how a text is cut at its added tokens without the Rust encoder. Compiled on
        first use (see _MAX_ADDED_PATTERN_CHARS), for a tokenizer that is
        :attr:`_segmentable`."""
        pattern = self._added_pattern
        if pattern is None:
            with self._lock:
                pattern = self._added_pattern
                if pattern is None:
                    pattern = re.compile(_alternation(self.added_tokens_encoder))
                    self._added_pattern = pattern
        return pattern

    @staticmethod
    def _side(config: Mapping[str, Any], key: str) -> str:
        side = config.get(key, "right")
        if side not in ("left", "right"):
            raise ValueError(f"{key} should be 'right' or 'left', not {side!r}")
        return side

    def _add_config_tokens(self, decoder: Any) -> None:
        """Added tokens listed by tokenizer_config.json but missing from tokenizer.json."""
        if not isinstance(decoder, Mapping):
            return
        tokenizers = _import_tokenizers()
        present = {token.content for token in self.backend.get_added_tokens_decoder().values()}
        missing = []
        for _, entry in sorted(decoder.items(), key=lambda item: int(item[0])
                               if str(item[0]).isdigit() else 0):
            if not isinstance(entry, Mapping) or not isinstance(entry.get("content"), str):
                continue
            if entry["content"] in present:
                continue
            missing.append(tokenizers.AddedToken(
                entry["content"], single_word=bool(entry.get("single_word", False)),
                lstrip=bool(entry.get("lstrip", False)), rstrip=bool(entry.get("rstrip", False)),
                normalized=bool(entry.get("normalized", not entry.get("special", False))),
                special=bool(entry.get("special", False))))
        # One call per run of special or plain tokens, in order: the same ids as one call per
        # token, but the backend rebuilds its matcher of all added tokens once per call, so
        # a call per token made this quadratic (20,000 tokens took 74 s).
        for special, run in itertools.groupby(missing, key=operator.attrgetter("special")):
            add = self.backend.add_special_tokens if special else self.backend.add_tokens
            add(list(run))

    def _add_special_tokens(self, config: Mapping[str, Any]) -> None:
        """As transformers does on loading: the special tokens (bos, eos, ..., and the
        config's ``extra_special_tokens``/``additional_special_tokens``) become special added
        tokens of the backend, so they are never split and count as control tokens."""
        tokenizers = _import_tokenizers()
        names = list(self.special_tokens_map.values())
        extra = config.get("extra_special_tokens", config.get("additional_special_tokens"))
        if isinstance(extra, Mapping):
            extra = list(extra.values())
        if isinstance(extra, (list, tuple)):
            for item in extra:
                if isinstance(item, Mapping):
                    item = item.get("content")
                if isinstance(item, str):
                    names.append(item)
        tokens = [tokenizers.AddedToken(name, special=True, normalized=False)
                  for name in dict.fromkeys(names) if name]
        if tokens:
            self.backend.add_special_tokens(tokens)

    # -- loading ---------------------------------------------------------------------------
    @classmethod
    def from_pretrained(cls, path: PathLike, *, now: Now = None) -> "ChatTokenizer":
        """Load a model folder (``tokenizer.json`` is required; ``tokenizer_config.json`` and a
        chat template are optional: without a template, pass ``chat_template=`` when encoding).
        Files are read under :mod:`.config`'s rules (regular files inside the folder, bounded
        sizes), and what the tokenizer holds (vocabulary, merges, added tokens) under the caps
        of :mod:`.tokenizer_caps`, checked before it is built; problems are
        :class:`~minijinja_py.chat.ChatConfigError`. Raises
        :class:`TokenizersNotInstalledError` without the ``tokenizers`` extra."""
        tokenizers = _import_tokenizers()
        directory = Path(path)
        if not directory.is_dir():
            if directory.name == TOKENIZER_FILE or directory.name == TOKENIZER_CONFIG_FILE:
                directory = directory.parent
            elif not directory.exists():
                raise FileNotFoundError(f"no such model folder: {path}")
            else:
                raise ChatConfigError(f"{path}: a tokenizer is loaded from a model folder (with "
                                      f"{TOKENIZER_FILE}), not from this file")
        folder = ModelFolder(directory)
        config: Dict[str, Any] = {}
        loaded = folder.read_json(directory / TOKENIZER_CONFIG_FILE)
        if loaded is not None:
            if not isinstance(loaded, dict):
                raise ChatConfigError(f"{directory / TOKENIZER_CONFIG_FILE}: expected a JSON "
                                      "object")
            config = loaded
        check_tokenizer_config(config, directory / TOKENIZER_CONFIG_FILE)
        folder.budget = MAX_TOKENIZER_BYTES
        data = folder.read(directory / TOKENIZER_FILE, MAX_TOKENIZER_BYTES, "a tokenizer")
        if data is None:
            raise ChatConfigError(f"{directory}: no {TOKENIZER_FILE} (token ids need the "
                                  "tokenizer itself, not only its config)")
        # UTF-8 and the caps of .tokenizer_caps, before the library builds anything; the
        # library reads the bytes (a text copy of them would double the memory)
        check_tokenizer_json(data, directory / TOKENIZER_FILE)
        try:
            backend = tokenizers.Tokenizer.from_buffer(data)
        except Exception as exc:  # the Rust side reports a malformed file as a plain Exception
            raise ChatConfigError(f"{directory / TOKENIZER_FILE}: the tokenizers library cannot "
                                  f"load it ({str(exc).splitlines()[0] if str(exc) else exc!r})"
                                  ) from None
        del data
        templates: Dict[str, str] = {}
        template_error: Optional[Exception] = None
        try:
            chat_config = load_chat_config(directory)
            templates = dict(chat_config.templates)
        except ChatConfigError as exc:
            template_error = exc
        return cls(backend, config, chat_templates=templates, template_error=template_error,
                   now=now, name=str(directory))

    # -- plain encoding --------------------------------------------------------------------
    def encode(self, text: str, *, split_special_tokens: Optional[bool] = None,
               add_special_tokens: bool = False) -> List[int]:
        """Token ids of ``text``, by default without the special tokens the tokenizer's
        post-processor adds (``add_special_tokens=False``, unlike transformers' ``encode``: the
        texts encoded here are rendered prompts, whose template writes its special tokens);
        ``add_special_tokens=True`` gives transformers' ``tokenizer.encode(text)``."""
        if add_special_tokens:
            return self(text, split_special_tokens=split_special_tokens)["input_ids"]
        return self._encode_texts([text], split_special_tokens)[0][0]

    def _encode_texts(self, texts: Sequence[str], split_special_tokens: Optional[bool] = None,
                      offsets: bool = False
                      ) -> List[Tuple[List[int], Optional[List[Tuple[int, int]]]]]:
        """(ids, character offsets or None) of each text, as one Rust ``encode`` with
        ``add_special_tokens=False`` gives them. When the tokenizer allows it (see
        :meth:`_position_independent`), the pieces between added tokens are encoded in one
        parallel ``encode_batch`` and the added tokens mapped to their ids directly."""
        split = self.split_special_tokens if split_special_tokens is None \
            else bool(split_special_tokens)
        if split or not self._segmentable or \
                sum(len(text) for text in texts) < _PARALLEL_MIN_CHARS:
            encodings = self._run_encoder(list(texts), offsets, self._backend_for(split))
            return [(encoding.ids, [tuple(pair) for pair in encoding.offsets] if offsets
                     else None) for encoding in encodings]

        # plans[i]: (start, id of an added token or -1 for the next piece, end)
        pieces: List[str] = []
        plans: List[List[Tuple[int, int, int]]] = []
        token_ids = self.added_tokens_encoder
        for text in texts:
            plan = []
            position = 0
            for match in self._added_re.finditer(text):
                start, end = match.span()
                if start > position:
                    plan.append((position, -1, start))
                    pieces.append(text[position:start])
                plan.append((start, token_ids[match.group()], end))
                position = end
            if position < len(text):
                plan.append((position, -1, len(text)))
                pieces.append(text[position:])
            plans.append(plan)
        # the pieces hold no added token, so encode_special_tokens does not matter for them
        encodings = self._run_encoder(pieces, offsets, self.backend) if pieces else []
        results: List[Tuple[List[int], Optional[List[Tuple[int, int]]]]] = []
        next_piece = 0
        for plan in plans:
            ids: List[int] = []
            spans: Optional[List[Tuple[int, int]]] = [] if offsets else None
            for start, token_id, end in plan:
                if token_id >= 0:
                    ids.append(token_id)
                    if spans is not None:
                        spans.append((start, end))
                    continue
                encoding = encodings[next_piece]
                next_piece += 1
                ids.extend(encoding.ids)
                if spans is not None:
                    spans.extend([(first + start, last + start)
                                  for first, last in encoding.offsets])
            results.append((ids, spans))
        return results

    def _backend_for(self, split: bool) -> Any:
        """The backend with ``encode_special_tokens`` set to ``split``: the tokenizer's own, or
        a copy made once for the other setting (the flag is never toggled on a shared
        backend, so concurrent calls from several threads are safe)."""
        backend = self.backend
        if backend.encode_special_tokens == split:
            return backend
        with self._lock:
            copy = self._backends.get(split)
            if copy is None:
                copy = type(backend).from_str(backend.to_str())
                copy.no_truncation()
                copy.no_padding()
                copy.encode_special_tokens = split
                self._backends[split] = copy
        return copy

    def _run_encoder(self, texts: List[str], offsets: bool, backend: Any,
                     add_special_tokens: bool = False) -> List[Any]:
        """The Rust encoder on ``texts`` (no special tokens added unless asked). Without
        offsets, its ``encode_batch_fast`` (when the installed tokenizers has it), which skips
        tracking them."""
        batch_fast = getattr(backend, "encode_batch_fast", None)
        try:
            if not offsets and batch_fast is not None:
                return batch_fast(texts, add_special_tokens=add_special_tokens)
            if len(texts) == 1:
                return [backend.encode(texts[0], add_special_tokens=add_special_tokens)]
            return backend.encode_batch(texts, add_special_tokens=add_special_tokens)
        except TypeError:
            _refuse_surrogates(texts)
            raise

    def _encode_as_text(self, text: str) -> List[int]:
        """Ids of ``text`` with no added token matched, special or not: the backend's
        normalizer, pre-tokenizer and model without its added vocabulary (what transformers'
        fast tokenizers do for ``sanitize_control_tokens``)."""
        backend = self.backend
        _refuse_surrogates((text,))
        if backend.normalizer is not None:
            text = backend.normalizer.normalize_str(text)
        splits = [text]
        if backend.pre_tokenizer is not None:
            splits = [split for split, _ in backend.pre_tokenizer.pre_tokenize_str(text)]
        model = backend.model
        return [token.id for split in splits for token in model.tokenize(split)]

    def token_text(self, index: int) -> str:
        """What one token id stands for, as text (its decoding, or the raw token string when
        it does not decode to text on its own, like one byte of a multi-byte character)."""
        text = self.backend.decode([int(index)], skip_special_tokens=False)
        if not text or "\ufffd" in text:
            raw = self.backend.id_to_token(int(index))
            return raw if raw is not None else text
        return text

    # -- templates -------------------------------------------------------------------------
    def get_chat_template(self, chat_template: Union[None, str, ChatTemplate] = None,
                          tools: Any = None, now: Now = None) -> ChatTemplate:
        """The template to render with, compiled once: ``chat_template`` (a source, the name of
        one of the folder's templates, or a :class:`ChatTemplate`, whose source is used), else
        the folder's (``tool_use`` when tools are given and it exists, else ``default``)."""
        label = None
        if isinstance(chat_template, ChatTemplate):
            source = chat_template.source
            label = chat_template.name
        elif chat_template is not None and chat_template in self.chat_templates:
            source = self.chat_templates[chat_template]
            label = f"{self.name} [{chat_template}]"
        elif chat_template is not None:
            if not isinstance(chat_template, str):
                raise TypeError("chat_template must be a template source or a template name, "
                                f"not {type(chat_template).__name__}")
            source = chat_template
        else:
            if not self.chat_templates:
                if self._template_error is not None and \
                        "no chat template found" not in str(self._template_error):
                    raise self._template_error
                raise ChatTemplateValueError(
                    f"{self.name}: no chat template: the folder has no chat_template.jinja and "
                    "its tokenizer_config.json no chat_template; pass chat_template=")
            selected, source = select_template(self.chat_templates, tools=tools)
            label = self.name if len(self.chat_templates) == 1 else f"{self.name} [{selected}]"
        now = self.now if now is None else now
        key = (source, now) if not callable(now) else None
        if key is not None:
            cached = self._templates.get(key)
            if cached is not None:
                self._templates.move_to_end(key)
                return cached
        template = ChatTemplate(source, now=now, name=label,
                                special_tokens=self.special_tokens_map)
        if key is not None:
            self._templates[key] = template
            if len(self._templates) > 16:
                self._templates.popitem(last=False)
        return template

    def control_tokens(self, chat_template: Union[None, str, ChatTemplate] = None,
                       tools: Any = None) -> Tuple[str, ...]:
        """The tokens ``sanitize_control_tokens`` encodes as text when they come from the
        caller: the special added tokens, plus those listed in ``chat_control_tokens`` or,
        when the config lists none, the added tokens the template writes literally (except
        whitespace tokens)."""
        template = chat_template if isinstance(chat_template, ChatTemplate) \
            else self.get_chat_template(chat_template, tools)
        tokens = self.added_tokens_decoder.values()
        if self.chat_control_tokens is not None:
            listed = set(self.chat_control_tokens)
            return tuple(token.content for token in tokens
                         if token.special or token.content in listed)
        literal = template_literal_text(template)
        return tuple(token.content for token in tokens
                     if token.special or (token.content in literal
                                          and not token.content.isspace()))

    def _control_pattern(self, template: ChatTemplate) -> "re.Pattern[str]":
        tokens = self.control_tokens(template)
        pattern = self._control_patterns.get(tokens)
        if pattern is None:
            pattern = re.compile(_alternation(tokens))
            if len(self._control_patterns) > 16:
                self._control_patterns.clear()
            self._control_patterns[tokens] = pattern
        return pattern

    # -- chats -----------------------------------------------------------------------------
    def apply_chat_template(self, conversation: Any, tools: Optional[Sequence[Any]] = None,
                            documents: Optional[Sequence[Any]] = None,
                            chat_template: Union[None, str, ChatTemplate] = None,
                            add_generation_prompt: bool = False,
                            continue_final_message: Union[bool, str] = False,
                            tokenize: bool = True,
                            sanitize_control_tokens: Union[bool, str] = False,
                            padding: Union[bool, str] = False, truncation: Any = False,
                            max_length: Optional[int] = None, return_tensors: Any = None,
                            return_dict: bool = True,
                            return_assistant_tokens_mask: Union[bool, str] = False,
                            tokenizer_kwargs: Optional[Mapping[str, Any]] = None,
                            now: Now = None, *,
                            assistant_mask_rule: Optional["AssistantMaskRule"] = None,
                            sanitize_rule: Optional["SanitizeRule"] = None,
                            **kwargs: Any) -> Any:
        """Render and encode one conversation or a batch (a list of conversations), exactly
        like transformers' ``tokenizer.apply_chat_template`` with the same arguments.

        Returns a :class:`ChatEncoding` (``input_ids``, ``attention_mask``, and
        ``assistant_masks`` with ``return_assistant_tokens_mask``), the ids alone with
        ``return_dict=False``, or the text with ``tokenize=False``. For a batch each value is a
        list per conversation, and ``text`` holds the rendered prompt(s). ``now`` overrides
        the tokenizer's clock for this call; every other keyword is a template variable.

        ``tokenizer_kwargs`` may hold ``pad_to_multiple_of``, ``padding_side``,
        ``return_attention_mask``, ``split_special_tokens`` and ``return_offsets_mapping``
        (adds ``offset_mapping``, each token's character span in ``text``; also when
        sanitising, where transformers has none); other keys are a TypeError. ``return_tensors``
        is None, ``"np"`` or ``"pt"``: every value is then an array or tensor with a batch
        dimension, also for one conversation (as in transformers), and a library that is not
        installed is a :class:`~minijinja_py.chat.tokenizer_api.TensorLibraryNotInstalledError`
        saying what to install. ``return_assistant_tokens_mask=True`` with a template that has
        no ``{% generation %}`` block logs transformers' warning (once per process, logger
        ``minijinja_py.chat``): the mask is all zeros.

        Beyond transformers: ``sanitize_control_tokens`` may be combined with
        ``return_assistant_tokens_mask`` (transformers refuses the pair). The ids are then the
        sanitised ids, and a token is in the mask when its characters overlap a generation
        span of the rendered text, the rule of the unsanitised mask (the tokens a control token
        from the caller was split into all cover that token's characters).

        Also beyond transformers, from a provenance render (where every character came from,
        :mod:`.provenance_uses`):

        - ``sanitize_control_tokens="provenance"``: every control token the tokenizer finds in
          the rendered text with at least one character from the caller becomes plain text,
          wherever it came from (copied, assembled from a role, a name, a dict key, two fields,
          built by a filter); the template's own control tokens stay, so inputs without control
          tokens give exactly the unsanitised ids. ``sanitize_rule`` (a
          :class:`~.provenance_uses.SanitizeRule`) says which input characters are trusted
          (default: the config's special-token variables the caller did not override, and the
          ``role`` of a message whose role is a standard one).
        - ``return_assistant_tokens_mask="messages"``: the mask marks the tokens overlapping
          the characters each assistant message produced plus the template text closing its
          turn up to and including the end-of-turn token, without ``{% generation %}`` tags;
          ``assistant_mask_rule`` (an :class:`~.provenance_uses.AssistantMaskRule`) changes
          the rule (header, closing newline, roles...).

        Errors: :class:`~minijinja_py.chat.ChatTemplateValueError` (a ValueError) and
        ValueError where transformers raises ValueError (option conflicts, no pad token, an
        invalid padding or truncation strategy, "Can't sanitize" when the tokenizer makes a
        control token out of plain text), the template's own
        :class:`~minijinja_py.TemplateError` subclasses when the render fails.
        """
        if not tokenize:
            return_dict = False
        by_provenance = _provenance_option(sanitize_control_tokens, "sanitize_control_tokens",
                                           "provenance", sanitize_rule, "sanitize_rule")
        by_message = _provenance_option(return_assistant_tokens_mask,
                                        "return_assistant_tokens_mask", "messages",
                                        assistant_mask_rule, "assistant_mask_rule")
        if return_assistant_tokens_mask and not (return_dict and tokenize):
            raise ValueError("`return_assistant_tokens_mask=True` requires `return_dict=True` "
                             "and `tokenize=True`")
        template = self.get_chat_template(chat_template, tools, now)

        if isinstance(conversation, (list, tuple)) and len(conversation) == 0:
            raise ChatTemplateValueError("Cannot apply chat template to an empty conversation. "
                                         "Provide at least one message.")
        if isinstance(conversation, (list, tuple)) and (
                isinstance(conversation[0], (list, tuple)) or hasattr(conversation[0], "messages")):
            conversations = list(conversation)
            is_batched = True
        else:
            conversations = [conversation]
            is_batched = False
        conversations = [_normalize_conversation(chat) for chat in conversations]

        if continue_final_message:
            if add_generation_prompt:
                raise ChatTemplateValueError(
                    "continue_final_message and add_generation_prompt are not compatible: "
                    "continue_final_message lets the model continue the final message, "
                    "add_generation_prompt starts a new assistant message.")
            if return_assistant_tokens_mask:
                raise ValueError("continue_final_message is not compatible with "
                                 "return_assistant_tokens_mask.")
        if sanitize_control_tokens and not tokenize:
            raise ValueError("`sanitize_control_tokens=True` requires `tokenize=True`.")
        if return_assistant_tokens_mask and not by_message and \
                not has_generation_tag(template.source):
            warn_once(NO_GENERATION_TAG_WARNING)  # the mask will be all zeros
        trusted = template.trusted_variables(kwargs)
        by_markers = bool(sanitize_control_tokens) and not by_provenance
        if by_markers:
            pattern = self._control_pattern(template)
            conversations = [_mark(chat, pattern) for chat in conversations]
            tools = _mark(tools, pattern)
            documents = _mark(documents, pattern)
            kwargs = _mark(kwargs, pattern)

        texts, spans, provenance = _render_conversations(
            template, conversations, (by_provenance or by_message) and tokenize,
            bool(return_assistant_tokens_mask), tools=tools, documents=documents,
            add_generation_prompt=add_generation_prompt,
            continue_final_message=continue_final_message, **kwargs)
        if not tokenize:
            return texts if is_batched else texts[0]

        options = self._tokenizer_options(padding, truncation, max_length, tokenizer_kwargs)
        padding_strategy, truncate, max_length = self._strategies(options)
        want_offsets = bool(return_assistant_tokens_mask or options.get("return_offsets_mapping"))
        split = options.get("split_special_tokens")
        if by_provenance or by_message:
            rows, offsets = self._encode_by_provenance(
                texts, spans, provenance, conversations, trusted, by_provenance, sanitize_rule,
                by_message, assistant_mask_rule, by_markers, split, want_offsets)
            plain_texts = texts
        elif sanitize_control_tokens:
            encoded = [self._encode_marked(text, spans[i] if spans else None, want_offsets)
                       for i, text in enumerate(texts)]
            plain_texts = [item[0] for item in encoded]
            rows = [item[1] for item in encoded]
            offsets = [item[2] for item in encoded]
            spans = [item[3] for item in encoded] if spans else spans
        else:
            plain_texts = texts
            encoded_texts = self._encode_texts(texts, split, want_offsets)
            rows = [item[0] for item in encoded_texts]
            offsets = [item[1] or [] for item in encoded_texts]
        columns = self._columns(rows, offsets, spans if return_assistant_tokens_mask else None,
                                truncate, padding_strategy, max_length, want_offsets, options)
        # one conversation's tensors keep their batch dimension, as in transformers
        batched = is_batched or return_tensors is not None
        if not return_dict:
            rows = columns["input_ids"]
            return to_tensor(rows if batched else rows[0], return_tensors)
        result = ChatEncoding()
        for key, key_rows in columns.items():
            result[key] = to_tensor(key_rows if batched else key_rows[0], return_tensors)
        result.text = plain_texts if is_batched else plain_texts[0]
        return result

    def _encode_by_provenance(self, texts: List[str], spans: List[Any], provenance: List[Any],
                              conversations: List[Any], trusted: Any, by_provenance: bool,
                              sanitize_rule: Optional["SanitizeRule"], by_message: bool,
                              assistant_mask_rule: Optional["AssistantMaskRule"],
                              by_markers: bool, split: Any, want_offsets: bool
                              ) -> Tuple[List[Any], List[Any]]:
        """(ids, offsets) of each provenance render of apply_chat_template: sanitised by
        origin (``by_provenance``), masked by message (``by_message``), the rules given or
        the default ones; ``texts`` and ``spans`` are updated in place (the markers'
        sanitising, the messages' spans)."""
        from . import provenance_uses

        mask_rule = (assistant_mask_rule or provenance_uses.AssistantMaskRule()) \
            if by_message else None
        rows, offsets = [], []
        for i, result in enumerate(provenance):
            ids, row_offsets, message_spans = provenance_uses.encode_with_provenance(
                self, result, conversations[i], trusted,
                sanitize=(sanitize_rule or provenance_uses.SanitizeRule())
                if by_provenance else None,
                mask=mask_rule, split_special_tokens=split, want_offsets=want_offsets)
            if message_spans is not None:
                spans[i] = message_spans
            if by_markers:  # the markers' sanitising, with the mask of the marked text
                texts[i], ids, row_offsets, spans[i] = self._encode_marked(
                    texts[i], spans[i], want_offsets)
            rows.append(ids)
            offsets.append(row_offsets)
        return rows, offsets

    def _columns(self, rows: List[Any], offsets: List[Any], mask_spans: Optional[List[Any]],
                 truncate: bool, padding_strategy: Any, max_length: Optional[int],
                 want_offsets: bool, options: Mapping[str, Any]) -> Dict[str, List[Any]]:
        """The encoding's columns from the rows of ids and offsets: truncated, padded, with
        the assistant masks of ``mask_spans`` (None: no masks), without the columns the
        options leave out."""
        if truncate and max_length is not None:
            rows = [_truncated(row, max_length, self.truncation_side) for row in rows]
            offsets = [_truncated(row, max_length, self.truncation_side) for row in offsets]
        columns = {"input_ids": rows, "attention_mask": [[1] * len(row) for row in rows]}
        if want_offsets:
            columns["offset_mapping"] = offsets
        self._pad_columns(columns, padding_strategy, max_length, options)
        self._warn_if_too_long(columns["input_ids"], max_length, options.get("verbose", True))
        if mask_spans is not None:
            columns["assistant_masks"] = [_overlap_mask(row, mask_spans[i]) for i, row
                                          in enumerate(columns["offset_mapping"])]
        if not options.get("return_offsets_mapping"):
            columns.pop("offset_mapping", None)
        if options.get("return_attention_mask", True) is False:
            del columns["attention_mask"]
        return columns

    # -- options ---------------------------------------------------------------------------
    @staticmethod
    def _tokenizer_options(padding: Any, truncation: Any, max_length: Any,
                           tokenizer_kwargs: Optional[Mapping[str, Any]]) -> Dict[str, Any]:
        options: Dict[str, Any] = {"padding": padding, "truncation": truncation,
                                   "max_length": max_length}
        for key, value in dict(tokenizer_kwargs or {}).items():
            if key in ("padding", "truncation", "max_length", "add_special_tokens",
                       "return_tensors", "sanitize_control_tokens"):
                raise TypeError(f"tokenizer_kwargs: got multiple values for keyword argument "
                                f"'{key}'")
            if key not in _TOKENIZER_KWARGS:
                raise TypeError(f"tokenizer_kwargs: {key!r} is not supported here (supported: "
                                f"{', '.join(_TOKENIZER_KWARGS[3:])})")
            options[key] = value
        return options

    def _strategies(self, options: Mapping[str, Any]) -> Tuple[Optional[str], bool, Optional[int]]:
        """transformers' padding/truncation strategy rules: (padding strategy or None, whether
        to truncate, max_length)."""
        padding, truncation, max_length = (options["padding"], options["truncation"],
                                           options["max_length"])
        if max_length is not None and padding is False and truncation is None:
            truncation = "longest_first"
        if padding is True:
            strategy: Optional[str] = "longest"
        elif padding is False or padding is None:
            strategy = None
        else:
            value = _strategy(padding, _PADDING_VALUES, "PaddingStrategy")
            strategy = None if value == "do_not_pad" else value
        if truncation is True:
            truncate = True
        elif truncation is False or truncation is None:
            truncate = False
        else:
            truncate = (_strategy(truncation, _TRUNCATION_VALUES, "TruncationStrategy")
                        != "do_not_truncate")
        if max_length is not None and (not isinstance(max_length, int)
                                       or isinstance(max_length, bool) or max_length < 0):
            raise ValueError(f"max_length must be a non-negative int, not {max_length!r}")
        if max_length is None:
            if strategy == "max_length":
                if self.model_max_length > LARGE_INTEGER:
                    strategy = None
                else:
                    max_length = int(self.model_max_length)
            if truncate:
                if self.model_max_length > LARGE_INTEGER:
                    truncate = False
                else:
                    max_length = int(self.model_max_length)
        if strategy is not None and (self.pad_token is None or self.pad_token_id is None
                                     or self.pad_token_id < 0):
            raise ValueError(
                "Asking to pad but the tokenizer does not have a padding token. Please select a "
                "token to use as `pad_token` `(tokenizer.pad_token = tokenizer.eos_token e.g.)` "
                "or add a new pad token via `tokenizer.add_special_tokens({'pad_token': "
                "'[PAD]'})`.")
        multiple = options.get("pad_to_multiple_of")
        if truncate and strategy is not None and multiple is not None and \
                max_length is not None and max_length % multiple != 0:
            raise ValueError("Truncation and padding are both activated but truncation length "
                             f"({max_length}) is not a multiple of pad_to_multiple_of "
                             f"({multiple}).")
        return strategy, truncate, max_length

    # -- sanitising ------------------------------------------------------------------------
    def _encode_marked(self, marked: str, spans: Optional[List[Tuple[int, int]]],
                       want_offsets: bool = False) -> Tuple[str, List[int], List[Tuple[int, int]],
                                  List[Tuple[int, int]]]:
        """Encode a render of marked inputs: marked control tokens as plain text, the rest
        normally. Returns (the text without markers, ids, each token's character offsets in
        that text, the generation spans moved into that text)."""
        pieces = self._marked_pieces(marked)
        ids, offsets = self._encode_pieces(pieces, want_offsets)
        moved: List[Tuple[int, int]] = []
        if spans:
            # every marker character is dropped: a position moves back by the markers before it
            markers = [m.start() for m in _ANY_MARKER_RE.finditer(marked)]
            moved = [(start - bisect.bisect_left(markers, start),
                      end - bisect.bisect_left(markers, end)) for start, end in spans]
        return "".join(piece for piece, _ in pieces), ids, offsets, moved

    def _marked_pieces(self, marked: str) -> List[Tuple[str, bool]]:
        """A marked render cut into ``(piece, as_plain_text)``: an added token between a start
        and an end marker is a plain-text piece; a lone marker is dropped, but it still
        separates the text around it. A marker pair holds an added token exactly when the
        text between the two is one (no added token the caller's strings can contain holds a
        marker, as they are removed from those), so one dictionary lookup per marker pair
        does it, however many added tokens there are."""
        tokens = self.added_tokens_encoder
        pieces: List[Tuple[str, bool]] = []
        markers = [match.start() for match in _ANY_MARKER_RE.finditer(marked)]
        position = 0
        index = 0
        while index < len(markers):
            at = markers[index]
            index += 1
            if at > position:
                pieces.append((marked[position:at], False))
            position = at + 1
            if marked[at] != CONTROL_TOKEN_START or index == len(markers):
                continue
            end = markers[index]
            inside = marked[at + 1:end]
            if marked[end] == CONTROL_TOKEN_END and inside and inside in tokens:
                pieces.append((inside, True))
                position = end + 1
                index += 1
        if position < len(marked):
            pieces.append((marked[position:], False))
        return pieces

    def _encode_pieces(self, pieces: Sequence[Tuple[str, bool]], want_offsets: bool = False,
                       split_special_tokens: Optional[bool] = None
                       ) -> Tuple[List[int], List[Tuple[int, int]]]:
        """Encode consecutive pieces of one text, each ``(text, as_plain_text)``: a plain-text
        piece (a control token to sanitise) with no added token matched, the others normally.
        Every normal piece but the first is encoded after a newline that is then dropped (no
        SentencePiece prefix space in the middle of the text); all of them in one call, in
        parallel where the tokenizer allows. Returns (ids, each token's character offsets in
        the joined text; empty without ``want_offsets``)."""
        newline_ids = self._newline_ids
        skip = len(newline_ids)
        texts = [(i, piece) for i, (piece, plain) in enumerate(pieces) if piece and not plain]
        first = next((i for i, (piece, _) in enumerate(pieces) if piece), -1)
        requests = [piece if i == first else "\n" + piece for i, piece in texts]
        encoded = dict(zip((i for i, _ in texts),
                           self._encode_texts(requests, split_special_tokens, want_offsets)))
        ids: List[int] = []
        offsets: List[Tuple[int, int]] = []
        position = 0
        for i, (piece, plain) in enumerate(pieces):
            if not piece:
                continue
            piece_offsets: Optional[List[Tuple[int, int]]]
            if plain:
                # a control token from the caller: plain text, its tokens all cover its span
                piece_ids = self._encode_as_text("\n" + piece)
                if piece_ids[:skip] == newline_ids:
                    piece_ids = piece_ids[skip:]
                else:
                    piece_ids = self._encode_as_text(piece)
                if self.backend.token_to_id(piece) in piece_ids:
                    raise ValueError(f"Can't sanitize {piece!r}: the tokenizer produces it from "
                                     "plain text")
                piece_offsets = [(0, len(piece))] * len(piece_ids) if want_offsets else None
            else:
                piece_ids, piece_offsets = encoded[i]
                if i == first:
                    pass
                elif piece_ids[:skip] == newline_ids:
                    piece_ids = piece_ids[skip:]
                    if piece_offsets is not None:
                        piece_offsets = [(max(start - 1, 0), max(end - 1, 0))
                                         for start, end in piece_offsets[skip:]]
                else:  # the newline merged with the text: encode the piece alone
                    piece_ids, piece_offsets = self._encode_texts([piece], split_special_tokens,
                                                                  want_offsets)[0]
            ids.extend(piece_ids)
            if piece_offsets is not None:
                offsets.extend((start + position, end + position)
                               for start, end in piece_offsets)
            position += len(piece)
        return ids, offsets


_ANY_MARKER_RE = re.compile(f"[{CONTROL_TOKEN_START}{CONTROL_TOKEN_END}]")


def _provenance_option(value: Any, name: str, word: str, rule: Any, rule_name: str) -> bool:
    """Whether ``value`` (a bool, or ``word``) asks for the provenance variant; its ``rule``
    keyword is only accepted with it."""
    if isinstance(value, str):
        if value != word:
            raise ValueError(f"{name} must be True, False or {word!r}, not {value!r}")
        return True
    if rule is not None:
        raise ValueError(f"{rule_name} applies to {name}={word!r}")
    return False


def _strategy(value: Any, allowed: Any, kind: str) -> str:
    """A padding or truncation strategy given as a string or an enum member, checked with
    transformers' message."""
    value = getattr(value, "value", value)
    if value not in allowed:
        raise ValueError(f"{value!r} is not a valid {kind}, please select one of {list(allowed)}")
    return value


def _truncated(row: List[Any], max_length: int, side: str) -> List[Any]:
    """``row`` cut to ``max_length`` items on ``side`` (the end for "right")."""
    if len(row) <= max_length:
        return row
    return row[:max_length] if side == "right" else row[len(row) - max_length:]


def _overlap_mask(offsets: Sequence[Tuple[int, int]], spans: Sequence[Tuple[int, int]]
                  ) -> List[int]:
    """1 for every token whose character range overlaps a generation span (transformers'
    rule: spans and offsets both in order, one pass)."""
    if spans and type(offsets) is list:
        fast = _overlap_mask_by_search(offsets, spans)
        if fast is not None:
            return fast
    mask = [0] * len(offsets)
    span_index = 0
    count = len(spans)
    for index, (start, end) in enumerate(offsets):
        while span_index < count and start >= spans[span_index][1]:
            span_index += 1
        if span_index == count:
            break
        if end > spans[span_index][0]:
            mask[index] = 1
    return mask


def _overlap_mask_by_search(offsets: List[Tuple[int, int]], spans: Sequence[Tuple[int, int]]
                            ) -> Optional[List[int]]:
    """The same mask by binary search, when it gives the same answer as the one-pass rule:
    token starts and ends each in order, spans in order and apart. Every token then overlaps
    a span exactly when its end is past the span's start and its start before the span's end,
    and those tokens are one run per span (found in C-speed searches instead of a Python step
    per token). None otherwise."""
    for (_, first_end), (second_start, _) in zip(spans, spans[1:]):
        if second_start < first_end:
            return None
    starts = list(map(operator.itemgetter(0), offsets))
    ends = list(map(operator.itemgetter(1), offsets))
    if not (all(map(operator.le, starts, starts[1:])) and all(map(operator.le, ends, ends[1:]))):
        return None
    mask = [0] * len(offsets)
    for span_start, span_end in spans:
        first = bisect.bisect_right(ends, span_start)  # first token ending past the start
        last = bisect.bisect_left(starts, span_end)  # first token starting at/after the end
        if last > first:
            mask[first:last] = [1] * (last - first)
    return mask


# ---- loading with a cache --------------------------------------------------------------------
_TOKENIZERS: "OrderedDict[Any, ChatTokenizer]" = OrderedDict()
_TOKENIZER_CACHE_SIZE = 4
_CACHE_LOCK = threading.Lock()


def _folder_key(path: PathLike) -> Any:
    directory = Path(path)
    if directory.name in (TOKENIZER_FILE, TOKENIZER_CONFIG_FILE) and not directory.is_dir():
        directory = directory.parent
    stamps = []
    for name in (TOKENIZER_FILE, TOKENIZER_CONFIG_FILE, "chat_template.jinja"):
        try:
            status = os.stat(directory / name)
            stamps.append((name, status.st_mtime_ns, status.st_size, status.st_ino))
        except OSError:
            stamps.append((name, None))
    return os.path.realpath(directory), tuple(stamps)


def load_tokenizer(path: PathLike) -> ChatTokenizer:
    """:meth:`ChatTokenizer.from_pretrained`, cached: a folder is loaded again only when its
    tokenizer.json, tokenizer_config.json or chat_template.jinja changed (the last few folders
    are kept). The tokenizer is shared: pass ``now=`` per call rather than setting it."""
    key = _folder_key(path)
    with _CACHE_LOCK:
        cached = _TOKENIZERS.get(key)
        if cached is not None:
            _TOKENIZERS.move_to_end(key)
            return cached
    tokenizer = ChatTokenizer.from_pretrained(path)
    with _CACHE_LOCK:
        _TOKENIZERS[key] = tokenizer
        while len(_TOKENIZERS) > _TOKENIZER_CACHE_SIZE:
            _TOKENIZERS.popitem(last=False)
    return tokenizer
