"""What a transformers tokenizer offers besides chat templates, on
:class:`~minijinja_py.chat.tokens.ChatTokenizer`: the special token attributes (``eos_token``,
``eos_token_id``...), ``chat_template``, calling the tokenizer on text (``tokenizer(texts)``),
``decode`` and ``batch_decode``, with transformers 5's signatures, defaults, results and errors.

They are a mixin, :class:`TransformersTokenizerAPI`, so that tokens.py keeps to what
``apply_chat_template`` does. The mixin uses what ChatTokenizer holds: ``backend`` (the
``tokenizers.Tokenizer``), ``special_tokens_map``, ``chat_templates`` and the compiled
templates' cache ``_templates``, the padding and truncation settings, and its
``_strategies`` (transformers' padding/truncation rules), ``_backend_for`` and ``_run_encoder``.

Where transformers raises, these raise the same class with the same message; what they do not
take (sentence pairs, target texts, pretokenized words, overflowing windows) is a TypeError
naming the option, as is any keyword they do not know (transformers ignores those).
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:  # pragma: no cover - what static analysis sees
    from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

    from .tokens import ChatEncoding

__all__ = ["TransformersTokenizerAPI", "TensorLibraryNotInstalledError", "to_tensor",
           "warn_once", "has_generation_tag", "NO_GENERATION_TAG_WARNING"]


# ---- tensors ---------------------------------------------------------------------------------
class TensorLibraryNotInstalledError(ModuleNotFoundError):
    """``return_tensors`` asked for arrays of a library that is not installed (``"pt"``
    without PyTorch, ``"np"`` without NumPy); the message says what to install. A
    ModuleNotFoundError (so an ImportError), as the bare import error it replaces."""


#: return_tensors value -> (module, the library's name, its package, a tensor of int64 values)
_TENSOR_LIBRARIES = {
    "np": ("numpy", "NumPy", "numpy",
           lambda module, value: module.array(value, dtype=module.int64)),
    "pt": ("torch", "PyTorch", "torch",
           lambda module, value: module.tensor(value, dtype=module.long)),
}


def to_tensor(value: Any, return_tensors: Any) -> Any:
    """``value`` (lists of ints) as ``return_tensors`` asks: unchanged for None, a NumPy array
    for ``"np"``, a PyTorch tensor for ``"pt"`` (strings or transformers' TensorType)."""
    if return_tensors is None:
        return value
    kind = getattr(return_tensors, "value", return_tensors)
    library = _TENSOR_LIBRARIES.get(kind) if isinstance(kind, str) else None
    if library is None:
        raise ValueError(f"return_tensors must be None, 'np' or 'pt', not {return_tensors!r}")
    module_name, title, package, make = library
    try:
        module = __import__(module_name)
    except ImportError as exc:
        raise TensorLibraryNotInstalledError(
            f"return_tensors={kind!r} needs {title}, which is not installed: pip install "
            f"{package} (or return_tensors=None for Python lists)", name=module_name) from exc
    return make(module, value)


# ---- warnings transformers logs ---------------------------------------------------------------
_WARNED: set = set()

#: What transformers logs (``logger.warning_once``) when ``return_assistant_tokens_mask=True``
#: meets a template without ``{% generation %}``: the mask is then all zeros.
NO_GENERATION_TAG_WARNING = ("return_assistant_tokens_mask==True but chat template does not "
                             "contain `{% generation %}` keyword.")
#: What transformers logs when batch_decode is given one sequence (it decodes it all the same).
SINGLE_SEQUENCE_WARNING = ("Passing a single sequence to `batch_decode` is deprecated and will "
                           "be removed in a future version, use `decode` instead.")
#: What transformers logs when clean_up_tokenization_spaces=True meets a BPE model (skipped).
BPE_CLEAN_UP_WARNING = (
    "Ignoring clean_up_tokenization_spaces=True for BPE tokenizer ChatTokenizer. The "
    "clean_up_tokenization post-processing step is designed for WordPiece tokenizers and is "
    "destructive for BPE (it strips spaces before punctuation). Set "
    "clean_up_tokenization_spaces=False to suppress this warning, or set "
    "clean_up_tokenization_spaces_for_bpe_even_though_it_will_corrupt_output=True to force "
    "cleanup anyway.")


def warn_once(message: str) -> None:
    """Log ``message`` as a warning of the logger ``minijinja_py.chat``, once per process, as
    transformers' ``logger.warning_once`` does (logging is imported only to say something)."""
    if message in _WARNED:
        return
    _WARNED.add(message)
    import logging

    logging.getLogger("minijinja_py.chat").warning(message)


def has_generation_tag(source: str) -> bool:
    """transformers' test for a ``{% generation %}`` tag in a template's source."""
    import re

    return re.search(r"\{\%-?\s*generation\s*-?\%\}", source) is not None


# ---- special tokens --------------------------------------------------------------------------
class _SpecialToken:
    """A special token attribute (``eos_token``...), as in transformers: the token's text from
    ``special_tokens_map``, None when the model has none. Setting it (a str, or None to remove
    it) changes the template variable of the same name too."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, tokenizer: Any, owner: Any = None) -> Any:
        if tokenizer is None:
            return self
        return tokenizer.special_tokens_map.get(self.name)

    def __set__(self, tokenizer: Any, value: Optional[str]) -> None:
        if value is not None and not isinstance(value, str):
            raise ValueError(f"Cannot set a non-string value as the {self.name}")
        tokenizer._set_special_token(self.name, value)


class _SpecialTokenId:
    """The id of a special token (``eos_token_id``...), as in transformers: None without the
    token, the unknown token's id when the vocabulary lacks it. Setting an id sets the token
    to that id's text (None for an id the vocabulary lacks)."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.token_name = name[:-len("_id")]

    def __get__(self, tokenizer: Any, owner: Any = None) -> Any:
        if tokenizer is None:
            return self
        return tokenizer.convert_tokens_to_ids(tokenizer.special_tokens_map.get(self.token_name))

    def __set__(self, tokenizer: Any, value: Optional[int]) -> None:
        token = None if value is None else tokenizer.backend.id_to_token(int(value))
        tokenizer._set_special_token(self.token_name, token)


# ---- calling the tokenizer -------------------------------------------------------------------
#: The options of transformers' ``tokenizer(text, ...)`` taken here, with their defaults.
_CALL_OPTIONS = {"add_special_tokens": True, "padding": False, "truncation": None,
                 "max_length": None, "pad_to_multiple_of": None, "padding_side": None,
                 "return_tensors": None, "return_token_type_ids": None,
                 "return_attention_mask": None, "return_special_tokens_mask": False,
                 "return_offsets_mapping": False, "return_length": False, "verbose": True,
                 "split_special_tokens": None}
#: Its options for inputs not taken here -> what they are about (refused unless unused).
_CALL_UNSUPPORTED = {"text_pair": "sentence pairs", "text_target": "target texts (labels)",
                     "text_pair_target": "target texts (labels)",
                     "stride": "overflowing windows",
                     "return_overflowing_tokens": "overflowing windows",
                     "is_split_into_words": "pretokenized words"}

#: output key -> (the option that asks for it, the Encoding attribute that holds it), in
#: transformers' order; input_ids always come first, length last.
_CALL_COLUMNS = (("token_type_ids", "return_token_type_ids", "type_ids"),
                 ("attention_mask", "return_attention_mask", "attention_mask"),
                 ("special_tokens_mask", "return_special_tokens_mask", "special_tokens_mask"),
                 ("offset_mapping", "return_offsets_mapping", "offsets"))
#: What padding adds to each output (input_ids get the pad token's id), as the Rust padder.
_PAD_FILLS = {"attention_mask": 0, "token_type_ids": 0, "special_tokens_mask": 1,
              "offset_mapping": (0, 0)}

_TEXT_INPUT_ERROR = ("text input must be of type `str` (single example), `list[str]` (batch or "
                     "single pretokenized example) or `list[list[str]]` (batch of pretokenized "
                     "examples) or `list[tuple[list[str], list[str]]]` (batch of pretokenized "
                     "sequence pairs).")

#: transformers' clean_up_tokenization, in its order.
_CLEAN_UPS = ((" .", "."), (" ?", "?"), (" !", "!"), (" ,", ","), (" ' ", "'"), (" n't", "n't"),
              (" 'm", "'m"), (" 's", "'s"), (" 've", "'ve"), (" 're", "'re"))
#: decode() options transformers' fast tokenizers accept and ignore.
_IGNORED_DECODE_OPTIONS = ("use_source_tokenizer", "spaces_between_special_tokens")


def _unused(value: Any) -> bool:
    return value is None or value is False or (type(value) is int and value == 0)


def _call_texts(text: Any) -> "tuple":
    """(the texts, whether they are a batch) of ``tokenizer(text)``'s first argument."""
    if text is None:
        raise ValueError("You need to specify either `text` or `text_target`.")
    if isinstance(text, str):
        return [text], False
    if isinstance(text, (list, tuple)) and all(isinstance(item, str) for item in text):
        return list(text), True
    if isinstance(text, (list, tuple)) and text and all(isinstance(item, (list, tuple))
                                                        for item in text):
        raise ValueError(_TEXT_INPUT_ERROR + " (Pretokenized input is not supported here.)")
    raise ValueError(_TEXT_INPUT_ERROR)


def _kept_positions(encoding: Any, limit: Optional[int], side: str) -> Optional[List[int]]:
    """The positions of ``encoding``'s tokens that truncation to ``limit`` tokens of the text
    keeps (None: all), as the Rust library truncates before adding special tokens: the text's
    tokens only (those of a sequence), cut on ``side``, the special tokens around them kept.
    A negative ``limit`` (a max_length below the special tokens' count) cuts nothing, as there
    (the count wraps around)."""
    if limit is None or limit < 0:
        return None
    sequence = encoding.sequence_ids
    text_positions = [i for i, which in enumerate(sequence) if which is not None]
    if len(text_positions) <= limit:
        return None
    dropped = set(text_positions[limit:] if side == "right"
                  else text_positions[:len(text_positions) - limit])
    return [i for i in range(len(sequence)) if i not in dropped]


def _plain_ids(value: Any) -> Any:
    """Token ids as Python ints and lists: arrays and tensors (anything with ``tolist``), a
    dict's ``input_ids``, one id."""
    if hasattr(value, "keys") and hasattr(value, "__getitem__"):
        value = value["input_ids"]
    if hasattr(value, "tolist"):
        value = value.tolist()
    return [value] if isinstance(value, int) else value


def _is_batch(ids: Any) -> bool:
    """Whether ``ids`` (from :func:`_plain_ids`) holds sequences rather than ids."""
    if len(ids) == 0:
        return False
    first = ids[0]
    return isinstance(first.tolist() if hasattr(first, "tolist") else first, (list, tuple))


class TransformersTokenizerAPI:
    """transformers' tokenizer attributes and text methods, for
    :class:`~minijinja_py.chat.tokens.ChatTokenizer` (see the module docstring)."""

    # transformers' special token attributes (config.SPECIAL_TOKEN_NAMES and their ids)
    bos_token = _SpecialToken()
    eos_token = _SpecialToken()
    unk_token = _SpecialToken()
    sep_token = _SpecialToken()
    pad_token = _SpecialToken()
    cls_token = _SpecialToken()
    mask_token = _SpecialToken()
    bos_token_id = _SpecialTokenId()
    eos_token_id = _SpecialTokenId()
    unk_token_id = _SpecialTokenId()
    sep_token_id = _SpecialTokenId()
    pad_token_id = _SpecialTokenId()
    cls_token_id = _SpecialTokenId()
    mask_token_id = _SpecialTokenId()

    def __getattr__(self, name: str) -> Any:
        # a model's own named tokens (image_token, image_token_id...), as transformers has them
        tokens = self.__dict__.get("special_tokens_map") or {}
        if name in tokens:
            return tokens[name]
        if name.endswith("_id") and name[:-len("_id")] in tokens:
            return self.convert_tokens_to_ids(tokens[name[:-len("_id")]])
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    @property
    def all_special_tokens(self) -> List[str]:
        """Every special token once, as transformers lists them: the named ones (standard
        names first, then the model's own, like ``image_token``), then
        ``extra_special_tokens``. ``convert_ids_to_tokens(skip_special_tokens=True)`` leaves
        these out."""
        from .config import SPECIAL_TOKEN_NAMES

        named = self.special_tokens_map
        order = [name for name in SPECIAL_TOKEN_NAMES if name in named]
        order += [name for name in named if name not in SPECIAL_TOKEN_NAMES]
        return list(dict.fromkeys([named[name] for name in order] + self.extra_special_tokens))

    @property
    def all_special_ids(self) -> List[Optional[int]]:
        """The ids of :attr:`all_special_tokens`, in their order."""
        return self.convert_tokens_to_ids(self.all_special_tokens)

    def _set_special_token(self, name: str, value: Optional[str]) -> None:
        if value is None:
            self.special_tokens_map.pop(name, None)
        else:
            self.special_tokens_map[name] = value
        self._templates.clear()  # (a compiled template keeps the special tokens it was given)

    def convert_tokens_to_ids(self, tokens: Union[None, str, Sequence[str]]) -> Any:
        """The id of a token (the unknown token's id, or None, when the vocabulary lacks it),
        or the list of ids of a list of tokens; None for None."""
        if tokens is None:
            return None
        if not isinstance(tokens, str):
            return [self.convert_tokens_to_ids(token) for token in tokens]
        index = self.backend.token_to_id(tokens)
        if index is None:
            unknown = self.special_tokens_map.get("unk_token")
            index = None if unknown is None else self.backend.token_to_id(unknown)
        return index

    def convert_ids_to_tokens(self, ids: Union[int, Sequence[int]],
                              skip_special_tokens: bool = False) -> Any:
        """The token (string) of an id, or the list of tokens of a list of ids (None for an id
        out of the vocabulary); ``skip_special_tokens`` leaves :attr:`all_special_tokens` out
        (as transformers does: :meth:`decode` skips what the tokenizer marks special, which
        may be more)."""
        if isinstance(ids, int):
            return self.backend.id_to_token(ids)
        special = set(self.all_special_ids) if skip_special_tokens else set()
        return [self.backend.id_to_token(int(index)) for index in _plain_ids(ids)
                if int(index) not in special]

    # -- chat_template ---------------------------------------------------------------------
    @property
    def chat_template(self) -> Union[None, str, Dict[str, str]]:
        """The model's chat template as transformers has it: None without one, its source when
        it is the only one and is called ``default``, else a dict name -> source. Setting it (a
        source, a dict or a list of ``{"name", "template"}``, or None) replaces them all."""
        templates = self.chat_templates
        if not templates:
            return None
        if list(templates) == ["default"]:
            return templates["default"]
        return dict(templates)

    @chat_template.setter
    def chat_template(self, value: Any) -> None:
        from .config import _templates_of

        self.chat_templates = {} if value is None else _templates_of(value, self.name)
        self._template_error = None
        self._templates.clear()

    # -- text to ids -----------------------------------------------------------------------
    def __call__(self, text: Union[str, Sequence[str], None] = None, text_pair: Any = None,
                 text_target: Any = None, text_pair_target: Any = None,
                 add_special_tokens: bool = True, padding: Union[bool, str] = False,
                 truncation: Any = None, max_length: Optional[int] = None, stride: int = 0,
                 is_split_into_words: bool = False, pad_to_multiple_of: Optional[int] = None,
                 padding_side: Optional[str] = None, return_tensors: Any = None,
                 return_token_type_ids: Optional[bool] = None,
                 return_attention_mask: Optional[bool] = None,
                 return_overflowing_tokens: bool = False,
                 return_special_tokens_mask: bool = False,
                 return_offsets_mapping: bool = False, return_length: bool = False,
                 verbose: bool = True, tokenizer_kwargs: Optional[Mapping[str, Any]] = None,
                 **kwargs: Any) -> "ChatEncoding":
        """Encode a text, or a list of texts, as transformers' ``tokenizer(text, ...)``: a
        :class:`~minijinja_py.chat.tokens.ChatEncoding` (a dict, keys also attributes) with
        ``input_ids`` and ``attention_mask``, and ``token_type_ids``,
        ``special_tokens_mask``, ``offset_mapping``, ``length`` when asked; each a list per
        text for a list of texts, and for one text too with ``return_tensors``.

        ``add_special_tokens`` (default True) adds what the tokenizer's post-processor adds
        (a BOS token for many models; chat templates write theirs, so
        ``apply_chat_template`` encodes without). ``padding``, ``truncation``, ``max_length``,
        ``pad_to_multiple_of`` and ``padding_side`` follow transformers' rules (a
        ``max_length`` alone truncates; truncation keeps the added special tokens);
        ``split_special_tokens`` encodes special tokens in the text as plain text;
        ``tokenizer_kwargs`` and other keywords are these same options. Sentence pairs,
        targets, pretokenized words and overflowing windows are not taken (TypeError).
        """
        options = dict(add_special_tokens=add_special_tokens, padding=padding,
                       truncation=truncation, max_length=max_length,
                       pad_to_multiple_of=pad_to_multiple_of, padding_side=padding_side,
                       return_tensors=return_tensors, return_token_type_ids=return_token_type_ids,
                       return_attention_mask=return_attention_mask,
                       return_special_tokens_mask=return_special_tokens_mask,
                       return_offsets_mapping=return_offsets_mapping, return_length=return_length,
                       verbose=verbose, split_special_tokens=None, text_pair=text_pair,
                       text_target=text_target, text_pair_target=text_pair_target,
                       stride=stride, is_split_into_words=is_split_into_words,
                       return_overflowing_tokens=return_overflowing_tokens)
        options.update(tokenizer_kwargs or {})  # (transformers' order: these, then kwargs)
        options.update(kwargs)
        unknown = sorted(set(options) - set(_CALL_OPTIONS) - set(_CALL_UNSUPPORTED))
        if unknown:
            raise TypeError(f"ChatTokenizer.__call__() got unexpected keyword arguments: "
                            f"{', '.join(unknown)}")
        for name, what in _CALL_UNSUPPORTED.items():
            if not _unused(options[name]):
                raise TypeError(f"ChatTokenizer.__call__() does not take {name}: {what} are not "
                                "supported here (one text or a list of texts is)")
        texts, is_batched = _call_texts(text)
        split = options["split_special_tokens"]
        backend = self._backend_for(self.split_special_tokens if split is None else bool(split))
        strategy, truncate, max_length = self._strategies(options)
        add = bool(options["add_special_tokens"])
        encodings = self._run_encoder(texts, bool(options["return_offsets_mapping"]), backend,
                                      add_special_tokens=add) if texts else []
        limit = None
        if truncate and max_length is not None:
            processor = backend.post_processor
            added = processor.num_special_tokens_to_add(False) if add and processor else 0
            limit = max_length - added
        columns: Dict[str, List[Any]] = {"input_ids": []}
        wanted = [(key, attribute) for key, option, attribute in _CALL_COLUMNS
                  if options[option] or (key == "attention_mask" and options[option] is None)]
        for key, _ in wanted:
            columns[key] = []
        for encoding in encodings:
            keep = _kept_positions(encoding, limit, self.truncation_side)
            for key, attribute in [("input_ids", "ids")] + wanted:
                values = getattr(encoding, attribute)
                columns[key].append(list(values) if keep is None
                                    else [values[i] for i in keep])
        self._pad_columns(columns, strategy, max_length, options)
        if options["return_length"]:
            columns["length"] = [len(row) for row in columns["input_ids"]]
        self._warn_if_too_long(columns["input_ids"], max_length, options["verbose"])
        return self._call_result(columns, texts, is_batched, options["return_tensors"])

    @staticmethod
    def _call_result(columns: Dict[str, List[Any]], texts: List[str], is_batched: bool,
                     return_tensors: Any) -> "ChatEncoding":
        from .tokens import ChatEncoding

        result = ChatEncoding()
        for key, rows in columns.items():
            if return_tensors is not None:
                result[key] = to_tensor(rows, return_tensors)
            elif is_batched or not rows or not isinstance(rows[0], list):
                result[key] = rows  # (one text's length stays a list of one, as there)
            else:
                result[key] = rows[0]
        result.text = texts if is_batched else texts[0]
        return result

    def _pad_columns(self, columns: Dict[str, List[Any]], strategy: Optional[str],
                     max_length: Optional[int], options: Mapping[str, Any]) -> None:
        """Pad every row of every column in place, as transformers (its Rust padder) does:
        ``strategy`` "longest" or "max_length" (None: no padding), to a multiple of
        ``pad_to_multiple_of``, on ``padding_side`` (else the tokenizer's); ids with the pad
        token's id, the other columns with :data:`_PAD_FILLS`."""
        rows = columns["input_ids"]
        if strategy is None or not rows:
            return
        target = max(map(len, rows)) if strategy == "longest" else max_length
        multiple = options.get("pad_to_multiple_of")
        if target is None:
            return
        if multiple and target % multiple:
            target = (target // multiple + 1) * multiple
        side = options.get("padding_side") or self.padding_side
        if side not in ("left", "right"):
            raise ValueError(f"Invalid padding strategy:{side}")
        fills = dict(_PAD_FILLS, input_ids=self.pad_token_id)
        for key, key_rows in columns.items():
            fill = fills[key]
            for i, row in enumerate(key_rows):
                missing = target - len(row)
                if missing > 0:
                    key_rows[i] = row + [fill] * missing if side == "right" \
                        else [fill] * missing + row

    def _warn_if_too_long(self, rows: List[List[int]], max_length: Optional[int],
                          verbose: Any) -> None:
        """transformers' warning (once per tokenizer) for ids longer than the model takes,
        when neither padding nor truncation set a max_length."""
        if max_length is not None or not verbose or self._warned_too_long \
                or not self.model_max_length:
            return
        for row in rows:
            if len(row) > self.model_max_length:
                self._warned_too_long = True
                import logging

                logging.getLogger("minijinja_py.chat").warning(
                    "Token indices sequence length is longer than the specified maximum "
                    f"sequence length for this model ({len(row)} > {self.model_max_length}). "
                    "Running this sequence through the model will result in indexing errors")
                return

    # -- ids to text -----------------------------------------------------------------------
    def decode(self, token_ids: Any, skip_special_tokens: bool = False,
               clean_up_tokenization_spaces: Optional[bool] = None, **kwargs: Any) -> Any:
        """The text of a sequence of ids (a list, an array or tensor, one id, or a dict's
        ``input_ids``), or the list of texts of a batch of sequences, as transformers'
        ``decode``: ``skip_special_tokens`` leaves the special tokens out;
        ``clean_up_tokenization_spaces`` (default: the tokenizer's setting, from its config,
        False unless it says so) removes spaces before punctuation as transformers does,
        except for BPE models (a logged warning then, as there)."""
        ids = _plain_ids(token_ids)
        if _is_batch(ids):
            return self._decode_all(ids, skip_special_tokens, clean_up_tokenization_spaces,
                                    kwargs)
        return self._decode_all([ids], skip_special_tokens, clean_up_tokenization_spaces,
                                kwargs)[0]

    def batch_decode(self, sequences: Any, skip_special_tokens: bool = False,
                     clean_up_tokenization_spaces: Optional[bool] = None,
                     **kwargs: Any) -> List[str]:
        """The texts of a batch of sequences of ids (a list of lists, a 2-D array or tensor),
        as transformers' ``batch_decode`` (see :meth:`decode`); one sequence gives a list of
        one text, with transformers' logged warning."""
        ids = _plain_ids(sequences)
        if len(ids) == 0:
            return []
        if not _is_batch(ids):
            warn_once(SINGLE_SEQUENCE_WARNING)
            ids = [ids]
        return self._decode_all(ids, skip_special_tokens, clean_up_tokenization_spaces, kwargs)

    def _decode_all(self, sequences: Sequence[Any], skip_special_tokens: bool,
                    clean_up: Optional[bool], options: Mapping[str, Any]) -> List[str]:
        unknown = sorted(set(options) - set(_IGNORED_DECODE_OPTIONS))
        if unknown:
            raise TypeError(f"decode() got unexpected keyword arguments: {', '.join(unknown)}")
        rows = [[int(index) for index in _plain_ids(sequence)] for sequence in sequences]
        texts = self.backend.decode_batch(rows, skip_special_tokens=bool(skip_special_tokens))
        if clean_up is None:
            clean_up = self.clean_up_tokenization_spaces
        if not clean_up:
            return texts
        if type(self.backend.model).__name__ == "BPE" and not self._clean_up_bpe_anyway:
            warn_once(BPE_CLEAN_UP_WARNING)
            return texts
        cleaned = []
        for text in texts:
            for before, after in _CLEAN_UPS:
                text = text.replace(before, after)
            cleaned.append(text)
        return cleaned
