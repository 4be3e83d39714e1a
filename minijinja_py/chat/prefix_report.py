"""Do a conversation's renders extend each other, turn after turn? And where not, why?

An RL trainer that appends a turn's tokens to the previous prompt, and a server whose prefix
cache keeps the previous turn's prompt, both assume that the render of the first ``k + 1``
messages starts with the render of the first ``k``. Many templates break that: they drop past
reasoning, move the system prompt, or close a turn differently once another follows. This
module checks the assumption at every turn boundary and, where it fails, names the cause from
provenance: at the first character where the two renders differ, what wrote each of them (a
message field or the template's own text at a line and column).

Two checks per boundary ``k`` (``1 <= k < len(messages)``):

- ``plain``: ``render(messages[:k])`` is a prefix of ``render(messages[:k + 1])``;
- ``generation_prompt``: ``render(messages[:k], add_generation_prompt=True)`` is a prefix of
  ``render(messages[:k + 1])``, what a trainer or server that lets the model write turn ``k``
  after the prompt relies on. Asked where ``messages[k]`` is an assistant message.

Plain renders decide; provenance renders are made only for a boundary that breaks.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence

if TYPE_CHECKING:  # pragma: no cover
    from .. import ProvenanceResult, Run
    from .pipeline import ChatTemplate

__all__ = ["PrefixCheck", "PrefixBoundary", "prefix_report"]

#: characters of each render shown around the first difference
EXCERPT = 24


@dataclass(frozen=True)
class PrefixCheck:
    """One comparison: whether ``longer`` starts with ``shorter`` and, when not, where and why.

    ``position`` is the index of the first character that differs (``None`` when the shorter
    render is a prefix, or when a render raised); ``shorter_text``/``longer_text`` are excerpts
    of each render from there; ``shorter_origin``/``longer_origin`` say what wrote the
    differing character in each (``Origin.as_dict()`` plus ``"text"``, the whole run it belongs
    to); ``cause`` says it in one line; ``error`` is the message of a render that raised.
    """

    extends: bool
    position: Optional[int] = None
    shorter_text: str = ""
    longer_text: str = ""
    shorter_origin: Optional[Dict[str, Any]] = None
    longer_origin: Optional[Dict[str, Any]] = None
    cause: str = ""
    error: str = ""

    def as_dict(self) -> Dict[str, Any]:
        """The fields as JSON-ready data."""
        return {name: getattr(self, name) for name in self.__dataclass_fields__}


@dataclass(frozen=True)
class PrefixBoundary:
    """The checks at one turn boundary: the render of ``messages[:turn]`` against that of
    ``messages[:turn + 1]`` (``plain``), and, when ``messages[turn]`` is an assistant message,
    the prompt that asks for it (``add_generation_prompt=True``) against the same
    (``generation_prompt``; None otherwise)."""

    turn: int
    role: str
    plain: PrefixCheck
    generation_prompt: Optional[PrefixCheck] = None

    @property
    def extends(self) -> bool:
        """Whether every check made at this boundary holds."""
        checks = [self.plain] + ([self.generation_prompt] if self.generation_prompt else [])
        return all(check.extends for check in checks)

    def as_dict(self) -> Dict[str, Any]:
        """The boundary as JSON-ready data."""
        return {"turn": self.turn, "role": self.role, "extends": self.extends,
                "plain": self.plain.as_dict(),
                "generation_prompt": (self.generation_prompt.as_dict()
                                      if self.generation_prompt else None)}


def _run_at(result: "ProvenanceResult", index: int) -> "Run":
    runs = result.runs
    return runs[bisect_right(runs, index, key=lambda run: run.start) - 1]


def _origin_of(result: "ProvenanceResult", index: int) -> Dict[str, Any]:
    """What wrote character ``index``: the origin's fields and the text of its whole run."""
    if index >= len(result.text):
        return {"kind": "end", "text": ""}
    run = _run_at(result, index)
    return {**run.origin.as_dict(), "text": result.text[run.start:run.end]}


def _describe(origin: Dict[str, Any]) -> str:
    kind = origin["kind"]
    if kind == "end":
        return "the end of the render"
    if kind == "template":
        where = f" (line {origin['line']})" if origin.get("line") else ""
        return f"template text {origin['text'][:40]!r}{where}"
    if kind == "input":
        return origin["path"]
    return f"text {kind} from {', '.join(origin.get('paths', ())) or 'an unknown source'}"


def _input_paths(result: "ProvenanceResult", start: int) -> List[str]:
    """The input paths that wrote characters of ``result`` from ``start`` on, in order."""
    paths: Dict[str, None] = {}
    for run in result.runs:
        if run.end > start and run.origin.kind != "template":
            for path in ((run.origin.path,) if run.origin.kind == "input" else run.origin.paths):
                paths.setdefault(path, None)
    return list(paths)


def _cause(shorter: Dict[str, Any], longer: Dict[str, Any], shorter_render: str,
           longer_render: str, dropped: List[str]) -> str:
    """One line saying why the longer render does not continue the shorter one: an input the
    shorter render writes after the difference and the longer one never writes, else what
    wrote the first differing character of each."""
    if dropped:
        return f"{dropped[0]} written in {shorter_render}, not in {longer_render}"
    before, after = _describe(shorter), _describe(longer)
    if shorter["kind"] == "input" and longer["kind"] != "input":
        return f"{before} written in {shorter_render}, not in {longer_render} (there: {after})"
    if shorter["kind"] == "template" and longer["kind"] == "template":
        return f"{before} replaced by {after}"
    return f"{before} in {shorter_render}, {after} in {longer_render}"


def _first_difference(shorter: str, longer: str) -> Optional[int]:
    """Where ``longer`` stops continuing ``shorter``; None when ``shorter`` is its prefix."""
    if longer.startswith(shorter):
        return None
    low, high = 0, min(len(shorter), len(longer))
    while low < high:  # the longest common prefix, by halves (strings compare at C speed)
        middle = (low + high + 1) // 2
        if shorter[:middle] == longer[:middle]:
            low = middle
        else:
            high = middle - 1
    return low


class _Renders:
    """Renders of prefixes of one conversation, each made once (plain, then provenance)."""

    def __init__(self, template: "ChatTemplate", messages: List[Any], tools: Any,
                 kwargs: Dict[str, Any]) -> None:
        self.template, self.messages, self.tools, self.kwargs = template, messages, tools, kwargs
        self._text: Dict[Any, Any] = {}
        self._provenance: Dict[Any, "ProvenanceResult"] = {}

    def text(self, count: int, prompt: bool) -> Any:
        """The render of the first ``count`` messages, or the exception it raised."""
        key = (count, prompt)
        if key not in self._text:
            try:
                self._text[key] = self.template.render(
                    self.messages[:count], tools=self.tools, add_generation_prompt=prompt,
                    **self.kwargs)
            except Exception as exc:  # noqa: BLE001 - reported in the check, never raised
                self._text[key] = exc
        return self._text[key]

    def provenance(self, count: int, prompt: bool) -> "ProvenanceResult":
        key = (count, prompt)
        if key not in self._provenance:
            self._provenance[key] = self.template.render_with_provenance(
                self.messages[:count], tools=self.tools, add_generation_prompt=prompt,
                **self.kwargs)
        return self._provenance[key]


def _check(renders: _Renders, turn: int, prompt: bool) -> PrefixCheck:
    shorter, longer = renders.text(turn, prompt), renders.text(turn + 1, False)
    for render in (shorter, longer):
        if isinstance(render, Exception):
            return PrefixCheck(False, error=f"{type(render).__name__}: {render}")
    position = _first_difference(shorter, longer)
    if position is None:
        return PrefixCheck(True)
    shorter_result = renders.provenance(turn, prompt)
    longer_result = renders.provenance(turn + 1, False)
    shorter_origin = _origin_of(shorter_result, position)
    longer_origin = _origin_of(longer_result, position)
    written_after = set(_input_paths(longer_result, 0))
    dropped = [path for path in _input_paths(shorter_result, position)
               if path not in written_after]
    shorter_render = (f"the prompt after {turn} messages" if prompt
                      else f"the render of {turn} messages")
    return PrefixCheck(False, position, shorter[position:position + EXCERPT],
                       longer[position:position + EXCERPT], shorter_origin, longer_origin,
                       _cause(shorter_origin, longer_origin, shorter_render,
                              f"the render of {turn + 1}", dropped))


def prefix_report(template: "ChatTemplate", messages: Sequence[Any], tools: Any = None,
                  **template_kwargs: Any) -> List[PrefixBoundary]:
    """One :class:`PrefixBoundary` per turn boundary of ``messages`` (see the module's
    docstring); ``ChatTemplate.prefix_report`` is the method users call."""
    from .pipeline import _normalize_conversation

    chat = _normalize_conversation(messages)
    renders = _Renders(template, chat, tools, dict(template_kwargs))
    report = []
    for turn in range(1, len(chat)):
        role = str(chat[turn].get("role", ""))
        prompt = _check(renders, turn, True) if role == "assistant" else None
        report.append(PrefixBoundary(turn, role, _check(renders, turn, False), prompt))
    return report
