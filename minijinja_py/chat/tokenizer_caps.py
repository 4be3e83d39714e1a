"""Caps on what a model folder's tokenizer files may hold, checked before anything is built.

A model folder is untrusted input (see :mod:`.config`), and the byte cap on ``tokenizer.json``
does not bound what loading it costs: the Rust `tokenizers` library builds every entry the file
lists, at up to ~20 bytes of memory per byte of JSON (a 196 MB file of merges took 4 GB). A
129 MB file with 600,000 added tokens took 76 s and 2.7 GB to load (most of it compiling
regular expressions of all of them, which :mod:`.tokens` no longer does on loading).

So the counts that make a tokenizer large are capped, and checked before the library sees the
file: :func:`check_tokenizer_json` runs one pass over its JSON that builds nothing, matching
the usual entries of the three big lists (vocabulary, merges, added tokens) hundreds at a time
at regex (C) speed and reading everything else value by value, and
:func:`check_tokenizer_config` counts the token lists of the parsed ``tokenizer_config.json``.
A refusal is a :class:`ChatConfigError` naming the file, what was counted, how many and the cap.

The caps are module constants read at every load: a deployment that trusts its model folders
may raise them (``minijinja_py.chat.tokenizer_caps.MAX_VOCABULARY_SIZE = 4_000_000``). They
sit well above the largest real tokenizers (the five of the shared corpus: command-r has
255,957 vocabulary entries, 253,333 merges and 1,008 added tokens, llama-bpe 128,256, 280,147
and 257), and loading a file at all of them at once takes ~11 s and ~1 GB:

- vocabulary: Gemma 3 has 262,144 entries, XLM-V (the largest known) about a million; the cap
  is twice that.
- merges: a byte-level BPE has about one per vocabulary entry (llama-bpe a little more), a BPE
  converted from SentencePiece about two (llama-spm: 61,249 for 32,000 entries), so the
  largest BPE vocabularies (~262,000 entries) bring at most about half a million; the cap is
  four times that, 7.5 times llama-bpe's.
- added tokens: chat models add a few hundred to a few thousand (command-r 1,008); speech
  models add their codec's codes (Llasa adds XCodec2's 65,536 to Llama 3's tokenizer). The cap
  is four times that, and the same cap applies to each token list of
  ``tokenizer_config.json``.
- everything else: the normalizer, pre-tokenizer, post-processor and decoder of real
  tokenizers hold tens to hundreds of JSON values, read one by one here; more than
  :data:`MAX_OTHER_JSON_VALUES` (values outside the usual entries of the three lists, e.g. in
  a list of a million pre-tokenizers) is refused.
"""

from __future__ import annotations

import codecs
import json
import re
from pathlib import Path
from typing import Any, Dict, List, Mapping, Tuple

from .config import ChatConfigError

__all__ = ["check_tokenizer_json", "check_tokenizer_config", "MAX_VOCABULARY_SIZE",
           "MAX_MERGES", "MAX_ADDED_TOKENS", "MAX_OTHER_JSON_VALUES"]

#: Most entries in a tokenizer's vocabulary (``model.vocab``).
MAX_VOCABULARY_SIZE = 2_097_152
#: Most BPE merges (``model.merges``).
MAX_MERGES = 2_097_152
#: Most added tokens in ``tokenizer.json`` (``added_tokens``), and most entries in each token
#: list of ``tokenizer_config.json`` (``added_tokens_decoder``, ``additional_special_tokens``
#: or ``extra_special_tokens``, ``chat_control_tokens``).
MAX_ADDED_TOKENS = 262_144
#: Most JSON values in a ``tokenizer.json`` besides the usual entries of those three lists.
MAX_OTHER_JSON_VALUES = 100_000

# serde_json's own nesting limit: anything deeper the library refuses anyway.
_MAX_DEPTH = 128

# (where in the file, the cap's name, what is counted)
_COUNTED_LISTS: Dict[Tuple[str, ...], Tuple[str, str]] = {
    ("model", "vocab"): ("MAX_VOCABULARY_SIZE", "vocabulary entries"),
    ("model", "merges"): ("MAX_MERGES", "merges"),
    ("added_tokens",): ("MAX_ADDED_TOKENS", "added tokens"),
}
# (key in tokenizer_config.json, what is counted); the cap is MAX_ADDED_TOKENS
_CONFIG_LISTS = (("added_tokens_decoder", "added tokens"),
                 ("additional_special_tokens", "additional special tokens"),
                 ("extra_special_tokens", "extra special tokens"),
                 ("chat_control_tokens", "chat control tokens"))

# ---- the JSON grammar, as regular expressions over the file's bytes ---------------------------
# (UTF-8 never has a quote or backslash byte inside a multi-byte character, so a string is
# found in the bytes as in the text.)
_WS = r"[ \t\n\r]*"
_STRING = r'"[^"\\]*(?:\\.[^"\\]*)*"'
_NUMBER = r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?"
_SCALAR = rf"(?:{_STRING}|{_NUMBER}|true|false|null)"
_MEMBER = rf"{_STRING}{_WS}:{_WS}{_SCALAR}"

# The usual entries of each big list, by (where, opening bracket): "token": id (a BPE,
# WordPiece or WordLevel vocabulary), ["token", score] (a Unigram one), ["a", "b"] or "a b" (a
# merge), an object of up to 16 plain fields (an added token). An entry of another form is
# read value by value, like the rest of the file. (Looser than JSON where that is faster,
# e.g. an id of leading zeros: the library refuses what is not JSON anyway.)
_USUAL_ENTRIES: Dict[Tuple[Tuple[str, ...], bytes], Tuple[str, ...]] = {
    (("model", "vocab"), b"{"): (rf"{_STRING}{_WS}:{_WS}[0-9]+",),
    (("model", "vocab"), b"["): (rf"\[{_WS}{_STRING}{_WS},{_WS}{_NUMBER}{_WS}\]",),
    (("model", "merges"), b"["): (rf"\[{_WS}{_STRING}{_WS},{_WS}{_STRING}{_WS}\]", _STRING),
    (("added_tokens",), b"["): (rf"\{{{_WS}{_MEMBER}(?:{_WS},{_WS}{_MEMBER}){{0,15}}{_WS}\}}",),
}
# Entries matched per regex call: enough that the Python loop costs nothing next to the match.
_BATCH = 256


def _compiled(pattern: str) -> "re.Pattern[bytes]":
    return re.compile(pattern.encode("ascii"))


_WS_RE = _compiled(_WS)
_STRING_RE = _compiled(_STRING)
_SCALAR_RE = _compiled(_SCALAR)
_EntryRes = List[Tuple["re.Pattern[bytes]", "re.Pattern[bytes]"]]
# per list, for each usual form: (a batch of entries each followed by a comma, one entry)
_ENTRY_RES: Dict[Tuple[Tuple[str, ...], bytes], _EntryRes] = {
    key: [(_compiled(rf"(?:{_WS}{form}{_WS},){{{_BATCH}}}"), _compiled(rf"{_WS}{form}"))
          for form in forms]
    for key, forms in _USUAL_ENTRIES.items()}
_CLOSING = {b"{": b"}", b"[": b"]"}
# UTF-8 is checked this many bytes at a time (a text of the whole file would double its size)
_UTF8_CHUNK = 1 << 20


def _cap(name: str) -> int:
    return globals()[name]  # read at every load, so that raising a cap takes effect


class _Scan:
    """One pass over a JSON document's bytes: counts the entries of the lists of
    :data:`_COUNTED_LISTS` and every other value, and refuses what passes a cap."""

    def __init__(self, data: bytes, shown: Path) -> None:
        self.data = data
        self.shown = shown
        self.position = 0
        self.other_values = 0
        self.other_cap = _cap("MAX_OTHER_JSON_VALUES")

    def invalid(self, reason: str) -> ChatConfigError:
        return ChatConfigError(f"{self.shown}: not valid JSON ({reason} at byte "
                               f"{self.position:,})")

    def skip_space(self) -> bytes:
        """Moves past whitespace; the next byte (b"" at the end)."""
        self.position = _WS_RE.match(self.data, self.position).end()
        return self.data[self.position:self.position + 1]

    def document(self) -> None:
        self.value((), 0)
        if self.skip_space():
            raise self.invalid("extra data")

    def value(self, path: Tuple[str, ...], depth: int) -> None:
        self.other_values += 1
        if self.other_values > self.other_cap:
            raise ChatConfigError(
                f"{self.shown}: refused: more than {self.other_cap:,} JSON values besides the "
                "usual entries of its vocabulary, merges and added tokens (the cap, "
                "MAX_OTHER_JSON_VALUES)")
        opening = self.skip_space()
        if opening in _CLOSING:
            self.container(path, opening, depth + 1)
            return
        match = _SCALAR_RE.match(self.data, self.position)
        if match is None:
            raise self.invalid("expected a value")
        self.position = match.end()

    def key(self) -> str:
        """An object's key, decoded as the library decodes it ("mod\\u0065l" is "model")."""
        self.skip_space()
        match = _STRING_RE.match(self.data, self.position)
        if match is None:
            raise self.invalid("expected a key")
        try:
            key = json.loads(match.group())
        except ValueError:
            raise self.invalid("bad string") from None
        self.position = match.end()
        if self.skip_space() != b":":
            raise self.invalid("expected ':'")
        self.position += 1
        return key

    def usual_batches(self, entry_res: _EntryRes) -> int:
        """Moves past whole batches of usual entries, each with the comma after it; how many
        entries."""
        count = 0
        for batch, _ in entry_res:
            match = batch.match(self.data, self.position)
            while match is not None:
                self.position = match.end()
                count += _BATCH
                match = batch.match(self.data, self.position)
        return count

    def usual_entry(self, entry_res: _EntryRes) -> bool:
        """Moves past one usual entry, if one is next."""
        for _, one in entry_res:
            match = one.match(self.data, self.position)
            if match is not None:
                self.position = match.end()
                return True
        return False

    def container(self, path: Tuple[str, ...], opening: bytes, depth: int) -> None:
        if depth > _MAX_DEPTH:
            raise ChatConfigError(f"{self.shown}: refused: its JSON is nested too deeply to read")
        closing = _CLOSING[opening]
        self.position += 1
        entry_res = _ENTRY_RES.get((path, opening), [])
        count = 0
        if self.skip_space() == closing:
            self.position += 1
            return
        # Batches are tried again only after an entry of another form: after a batch that
        # failed, the usual entries before the next other one are fewer than a batch, and
        # trying again after each would make the scan quadratic.
        try_batches = True
        while True:
            if try_batches:
                count += self.usual_batches(entry_res)
                try_batches = False
            if not self.usual_entry(entry_res):
                if opening == b"{":
                    self.value(path + (self.key(),), depth)
                else:
                    self.value(path + ("[]",), depth)
                try_batches = bool(entry_res)
            count += 1
            separator = self.skip_space()
            self.position += 1
            if separator == closing:
                break
            if separator != b",":
                self.position -= 1
                raise self.invalid(f"expected ',' or '{closing.decode()}'")
        self.check_count(path, count)

    def check_count(self, path: Tuple[str, ...], count: int) -> None:
        # The whole list is counted (at regex speed, building nothing) so that the message
        # can say how many.
        counted = _COUNTED_LISTS.get(path)
        if counted is None:
            return
        name, what = counted
        cap = _cap(name)
        if count > cap:
            raise ChatConfigError(f"{self.shown}: refused: {count:,} {what}, more than the "
                                  f"{cap:,} accepted (the cap, {name})")


def _check_utf8(data: bytes, shown: Path) -> None:
    decoder = codecs.getincrementaldecoder("utf-8")()
    view = memoryview(data)
    try:
        for start in range(0, len(view), _UTF8_CHUNK):
            decoder.decode(view[start:start + _UTF8_CHUNK])
        decoder.decode(b"", final=True)
    except UnicodeDecodeError as exc:
        raise ChatConfigError(f"{shown}: not UTF-8 text ({exc.reason})") from None


def check_tokenizer_json(data: bytes, shown: Path) -> None:
    """Refuse (:class:`ChatConfigError` naming ``shown``) a ``tokenizer.json`` that is not
    UTF-8, whose JSON is malformed or nested deeper than the library reads, or that has more
    vocabulary entries, merges, added tokens or other JSON values than the caps. Builds
    nothing: time linear in the file, memory constant."""
    _check_utf8(data, shown)
    _Scan(data, shown).document()


def check_tokenizer_config(config: Mapping[str, Any], shown: Path) -> None:
    """Refuse (:class:`ChatConfigError` naming ``shown``) a parsed ``tokenizer_config.json``
    with more entries than :data:`MAX_ADDED_TOKENS` in one of its token lists."""
    cap = _cap("MAX_ADDED_TOKENS")
    for key, what in _CONFIG_LISTS:
        entries = config.get(key)
        if isinstance(entries, (list, tuple, dict)) and len(entries) > cap:
            raise ChatConfigError(f"{shown}: refused: {len(entries):,} {what} ({key}), more "
                                  f"than the {cap:,} accepted (the cap, MAX_ADDED_TOKENS)")
