"""What a chat template can do, decided by what its probes write into the output.

``ChatTemplate.capabilities(**template_kwargs)`` renders a fixed set of small conversations
(the probes) with provenance (:meth:`ChatTemplate.render_with_provenance`) and decides every
capability from which input paths reach the output: a capability holds when the probe's input
(the system message's text, the tool's name, a tool call's arguments...) is written into the
output, verbatim or derived, and not merely read. A probe that raises says so in the witness.

Where one probe could mislead, several are rendered: tool calls in the last assistant turn and
in an earlier one, with arguments as a JSON string and as an object; content as a string and
as a list of typed parts, for each role.

Each capability keeps its witness (:meth:`Capabilities.witness`): the probes that decided it
(messages, tools, keyword arguments, the output) and the evidence, the output ranges with the
input path that wrote them, or the exception a probe raised. Anyone can re-render a probe and
check the ranges (tests/test_capabilities.py does, on every corpus template).

The chat layer reaches the engine only through :class:`ChatTemplate`; this module renders
nothing by other means.
"""

from __future__ import annotations

import copy
import json
import re
from collections import OrderedDict
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple, Union

from .. import LimitExceededError
from .probe_deadline import ProbeDeadline, ProbesDeadlineExceededError

if TYPE_CHECKING:  # pragma: no cover
    from .pipeline import ChatTemplate

__all__ = ["Capabilities", "CAPABILITY_NAMES", "ProbesDeadlineExceededError",
           "capabilities_of", "resolve_path", "probe_render"]

#: The capability names, in the order ``to_dict`` gives them (bool unless said).
CAPABILITY_NAMES: Tuple[str, ...] = (
    "supports_system_role",
    "supports_tools",
    "supports_tool_calls",
    "supports_tool_responses",
    "supports_parallel_tool_calls",
    "supports_tool_call_id",
    "requires_object_arguments",
    "requires_typed_content",
    "requires_non_null_content",
    "supports_reasoning",
    "supports_preserve_reasoning",
    "content_format",            # "string" or "openai"
    "tool_call_arguments",       # how a tool call's arguments are written (str, see below)
    "output_kwargs",             # the extra keyword arguments that change the output (str)
)

# ---- the probes' inputs ----------------------------------------------------------------------
# Distinct texts, so that a needle found in the output can only be that input's (the
# provenance decides, the texts only make a witness readable and re-checkable by eye).
SYSTEM_TEXT = "System needle S7"
USER_TEXT = "User needle U1"
USER_TEXT_2 = "User needle U2"
ASSISTANT_TEXT = "Assistant needle A1"
ASSISTANT_TEXT_2 = "Assistant needle A2"
REASONING_TEXT = "Reasoning needle R1"
REASONING_TEXT_2 = "Reasoning needle R2"
TOOL_RESULT_TEXT = "Tool result needle T1"
TOOL_NAME = "probe_tool"
CALL_ID = "Ab3Cd5Ef7"        # 9 alphanumeric characters: Mistral's templates insist on it
CALL_ID_2 = "Gh9Ij1Kl3"
ARGUMENT_VALUE = "argument needle V1"
ARGUMENTS = {"argument_needle": ARGUMENT_VALUE}
ARGUMENTS_JSON = json.dumps(ARGUMENTS)

PROBE_TOOL = {
    "type": "function",
    "function": {
        "name": TOOL_NAME,
        "description": "A probe tool.",
        "parameters": {
            "type": "object",
            "properties": {"argument_needle": {"type": "string", "description": "An argument."}},
            "required": ["argument_needle"],
        },
    },
}

#: Given (with PROBE_TOOL) to a probe that raises without: see _Decider.probe.
PROBE_DOCUMENT = {"title": "Probe document", "text": "A probe document's text."}

#: Keyword arguments templates commonly read, each with two values whose outputs are compared
#: (only those named in the template's source are tried).
OUTPUT_KWARGS: Dict[str, Tuple[Any, Any]] = {
    "enable_thinking": (True, False),
    "thinking": (True, False),
    "reasoning_effort": ("low", "high"),
    "add_vision_id": (True, False),
    "thinking_budget": (0, 1024),
    "builtin_tools": (None, ["code_interpreter"]),
    "tools_in_user_message": (True, False),
    "date_string": ("01 Jan 2020", "31 Dec 2030"),
}

#: The largest number of evidence ranges a probe keeps per target (the rest are counted).
MAX_RANGES = 8


def _content(text: str, typed: bool) -> Any:
    return [{"type": "text", "text": text}] if typed else text


def _message(role: str, text: Optional[str], typed: bool, **fields: Any) -> Dict[str, Any]:
    message: Dict[str, Any] = {"role": role}
    message["content"] = None if text is None else _content(text, typed)
    message.update(fields)
    return message


def _tool_call(name: str, arguments: Any, call_id: str) -> Dict[str, Any]:
    return {"id": call_id, "type": "function",
            "function": {"name": name, "arguments": arguments}}


def _tool_call_turn(calls: List[Dict[str, Any]], null_content: bool) -> Dict[str, Any]:
    return {"role": "assistant", "content": None if null_content else "", "tool_calls": calls}


def _tool_response(typed: bool) -> Dict[str, Any]:
    return _message("tool", TOOL_RESULT_TEXT, typed, tool_call_id=CALL_ID, name=TOOL_NAME)


# ---- provenance paths ------------------------------------------------------------------------
_PATH_STEP = re.compile(r'\.([A-Za-z_][A-Za-z_0-9]*)|\[(-?\d+)\]|\[("(?:[^"\\]|\\.)*")\]'
                        r'|\{("(?:[^"\\]|\\.)*")\}')
_PATH_HEAD = re.compile(r"[A-Za-z_][A-Za-z_0-9]*")


def resolve_path(variables: Dict[str, Any], path: str) -> Any:
    """The value a provenance path names in ``variables`` (``messages[1].content``,
    ``tools[0].function.name``, ``d["key"]``); a dict key's own text (``x{"city"}``) is the
    key. Raises KeyError when the path names nothing."""
    head = _PATH_HEAD.match(path)
    if head is None:
        raise KeyError(path)
    value = variables[head.group(0)]
    at = head.end()
    while at < len(path):
        step = _PATH_STEP.match(path, at)
        if step is None:
            raise KeyError(path)
        name, index, quoted, key = step.groups()
        if name is not None:
            value = value[name]
        elif index is not None:
            value = value[int(index)]
        elif quoted is not None:
            value = value[json.loads(quoted)]
        else:
            wanted = json.loads(key)
            if wanted not in value:
                raise KeyError(path)
            value = wanted
        at = step.end()
    return value


def _under(path: str, prefix: str) -> bool:
    """Whether ``path`` is ``prefix`` or names something inside it (an item, a key)."""
    return path == prefix or (path.startswith(prefix) and path[len(prefix)] in ".[{")


# ---- one probe -------------------------------------------------------------------------------
class Probe:
    """One rendered conversation: its inputs, its output (or the error) and its runs."""

    __slots__ = ("name", "messages", "tools", "add_generation_prompt", "kwargs", "text", "runs",
                 "error", "failed_first", "retries")

    def __init__(self, name: str, messages: List[Dict[str, Any]], tools: Any = None,
                 add_generation_prompt: bool = False, kwargs: Optional[Dict[str, Any]] = None
                 ) -> None:
        self.name = name
        self.messages = messages
        self.tools = tools
        self.add_generation_prompt = add_generation_prompt
        self.kwargs = dict(kwargs or {})
        self.text: Optional[str] = None
        self.runs: List[Tuple[int, int, str, Tuple[str, ...]]] = []
        self.error: Optional[Dict[str, str]] = None
        #: the error of the probe as first asked, when this one is its retry with a tool
        #: (and a document)
        self.failed_first: Optional[Dict[str, str]] = None
        #: the retries (with a tool, a document) that failed too: name and error each
        self.retries: List[Dict[str, Any]] = []

    def run(self, template: "ChatTemplate") -> "Probe":
        try:
            result = probe_render(template, self.as_call(), provenance=True)
        except LimitExceededError:
            # a probe is a few short messages: a template that exceeds a limit on one is
            # refused, once, instead of being run to the limit by every probe
            raise
        except Exception as error:  # a template's own failure is evidence, never a crash
            self.error = {"type": type(error).__name__, "message": str(error)[:500]}
            return self
        self.text = result.text
        for run in result.runs:
            origin = run.origin
            if origin.kind == "input":
                self.runs.append((run.start, run.end, "input", (origin.path,)))
            elif origin.kind in ("derived", "unknown"):
                self.runs.append((run.start, run.end, origin.kind, tuple(origin.paths or ())))
        return self

    def as_call(self) -> Dict[str, Any]:
        """The probe as the arguments of a render: ``messages``, ``tools``,
        ``add_generation_prompt`` and ``kwargs``."""
        return {"messages": self.messages, "tools": self.tools,
                "add_generation_prompt": self.add_generation_prompt, "kwargs": self.kwargs}

    def ranges(self, prefix: str) -> List[Dict[str, Any]]:
        """The output ranges written by the input at ``prefix`` (or inside it): verbatim
        copies and text derived from it."""
        found = []
        for start, end, kind, paths in self.runs:
            matching = [path for path in paths if _under(path, prefix)]
            if matching:
                found.append({"start": start, "end": end, "text": self.text[start:end],
                              "origin": kind, "paths": matching})
        return found

    def reaches(self, prefix: str, exclude: Sequence[str] = ()) -> bool:
        """Whether the input at ``prefix`` is written into the output, and none of the
        ``exclude`` inputs is (a text part printed with its ``type``, as the list's repr or
        JSON, is the list printed, not its text)."""
        if not self.ranges(prefix):
            return False
        return not any(self.ranges(other) for other in exclude)

    def writes_verbatim(self, prefix: str, value: str) -> bool:
        """Whether the whole string ``value`` at ``prefix`` is written as one unbroken copy
        (not escaped, cut or interleaved with other text)."""
        if not value:
            return False
        covered = 0
        for start, end, kind, paths in self.runs:
            if kind == "input" and paths[0] == prefix:
                covered += end - start
                if covered >= len(value):
                    return True
            else:
                covered = 0
        return False

    def evidence(self, targets: Dict[str, str], exclude: Sequence[str] = ()) -> Dict[str, Any]:
        """The probe and what each target path wrote, for a witness."""
        record: Dict[str, Any] = {"probe": self.name, **copy.deepcopy(self.as_call())}
        if self.failed_first is not None:
            record["as_asked"] = {"error": dict(self.failed_first)}
        if self.retries:
            record["retries"] = copy.deepcopy(self.retries)
        if self.error is not None:
            record["error"] = dict(self.error)
            return record
        record["output"] = self.text
        found = {}
        for label, prefix in targets.items():
            ranges = self.ranges(prefix)
            found[label] = {"path": prefix, "excluding": list(exclude),
                            "ranges": ranges[:MAX_RANGES],
                            "more_ranges": max(0, len(ranges) - MAX_RANGES)}
            if exclude:
                structure = [piece for other in exclude for piece in self.ranges(other)]
                found[label]["excluded_ranges"] = structure[:MAX_RANGES]
        record["written"] = found
        return record


def probe_render(template: "ChatTemplate", call: Dict[str, Any], provenance: bool = False
                 ) -> Any:
    """Render a probe's ``call`` (as :meth:`Probe.as_call` gives it) with ``template``: the
    text, or with ``provenance`` the ProvenanceResult."""
    render = template.render_with_provenance if provenance else template.render
    return render(copy.deepcopy(call["messages"]), tools=copy.deepcopy(call["tools"]),
                  add_generation_prompt=call["add_generation_prompt"],
                  **copy.deepcopy(call["kwargs"]))


# ---- the result ------------------------------------------------------------------------------
class Capabilities:
    """What a chat template can do, each answer with its witness.

    ``to_dict()`` gives ``{name: bool | str}``; every name is also an attribute
    (``caps.supports_tools``). ``witness(name)`` gives the probes that decided it with their
    evidence. Made by :meth:`ChatTemplate.capabilities`; immutable.
    """

    __slots__ = ("_values", "_witnesses", "_kwargs", "tool_call_example")

    def __init__(self, values: Dict[str, Any], witnesses: Dict[str, Dict[str, Any]],
                 kwargs: Dict[str, Any], tool_call_example: Optional[str] = None) -> None:
        self._values = dict(values)
        self._witnesses = witnesses
        self._kwargs = dict(kwargs)
        #: minja's tool-call example (see :mod:`.polyfills`), filled in on first need
        self.tool_call_example = tool_call_example

    def to_dict(self) -> Dict[str, Any]:
        """Every capability by name: a bool, or a str for ``content_format``,
        ``tool_call_arguments`` and ``output_kwargs``."""
        return dict(self._values)

    def witness(self, name: str) -> Dict[str, Any]:
        """How ``name`` was decided: ``value``, ``rule`` (the decision in words), ``summary``
        (one line: the input path and the output text it wrote, or the error) and ``probes``,
        one record per rendered probe with its ``messages``, ``tools``,
        ``add_generation_prompt``, ``kwargs`` and either ``error`` (type and message) or
        ``output`` and ``written``: for each input path looked for, the output ranges
        (``start``, ``end``, ``text``, ``origin`` "input" or "derived", ``paths``) it wrote."""
        if name not in self._witnesses:
            raise KeyError(f"no capability named {name!r}; the names are "
                           f"{', '.join(CAPABILITY_NAMES)}")
        return copy.deepcopy(self._witnesses[name])

    def __getattr__(self, name: str) -> Any:
        values = object.__getattribute__(self, "_values")
        if name in values:
            return values[name]
        raise AttributeError(name)

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={value!r}" for name, value in self._values.items())
        return f"Capabilities({shown})"


# ---- deciding --------------------------------------------------------------------------------
def _range_rank(item: Tuple[int, Dict[str, Any], Dict[str, Any]]
                ) -> Tuple[bool, int, int, int]:
    """Verbatim copies first, then derived text made of the fewest inputs; the longest
    range among those (a piece of escaped JSON says less than the whole value), then probe
    order."""
    order, _, found = item
    return (found["origin"] != "input", len(found["paths"]), found["start"] - found["end"],
            order)


def _summary(evidence: List[Dict[str, Any]], labels: Union[str, Tuple[str, ...]]) -> str:
    """One line: the clearest range the probes' targets named by ``labels`` wrote, else the
    first error, else that nothing was written."""
    labels = (labels,) if isinstance(labels, str) else labels
    candidates, errors, looked = [], [], []
    for order, record in enumerate(evidence):
        for label in labels:
            written = record.get("written", {}).get(label)
            if written is None:
                continue
            looked.append(written["path"])
            for found in written["ranges"]:
                candidates.append((order, record, found, written))
        if "error" in record:
            message = (record["error"]["message"].splitlines() or [""])[0]
            errors.append(f"{record['probe']}: raised {record['error']['type']}: "
                          f"{message[:100]}")
    if candidates:
        _, record, found, written = min(candidates, key=lambda item: _range_rank(item[:3]))
        line = (f"{record['probe']}: {', '.join(found['paths'][:3])} wrote "
                f"{found['text'][:60]!r} at {found['start']}:{found['end']}")
        structure = written.get("excluded_ranges")
        if structure:
            line += f", with the part's structure ({structure[0]['text'][:40]!r})"
        return line
    if errors:
        return errors[0]
    return f"{', '.join(dict.fromkeys(looked))} wrote nothing to the output"


class _Decider:
    """Renders the probes of one template and decides each capability in turn."""

    def __init__(self, template: "ChatTemplate", kwargs: Dict[str, Any]) -> None:
        self.template = template
        self.kwargs = kwargs
        self.values: Dict[str, Any] = {}
        self.witnesses: Dict[str, Dict[str, Any]] = {}
        self.typed = False  # whether probes give content as typed parts
        self.content_pending: Any = None
        self.earlier_call_probe: Optional[Probe] = None
        self.deadline = ProbeDeadline(template, "capability probes")

    def check_deadline(self) -> None:
        """Refuse the template once the probes so far took longer than one render may."""
        self.deadline.check()

    def probe(self, name: str, messages: List[Dict[str, Any]], tools: Any = None,
              add_generation_prompt: bool = False, kwargs: Optional[Dict[str, Any]] = None
              ) -> Probe:
        merged = dict(self.kwargs)
        merged.update(kwargs or {})
        probe = Probe(name, messages, tools, add_generation_prompt, merged).run(self.template)
        self.check_deadline()
        if probe.error is None:
            return probe
        # Templates made for tool use or retrieval (Hermes' and Command-R's "tool_use" and
        # "rag" templates) iterate over tools or documents unconditionally, and transformers
        # passes None for both: without them they render nothing at all. The same
        # conversation with a tool (and a document) says what they do with it.
        fallbacks = []
        if tools is None:
            fallbacks.append(("_with_tools", [copy.deepcopy(PROBE_TOOL)], merged))
        if "documents" not in merged:
            fallbacks.append(("_with_tools_and_documents",
                              tools or [copy.deepcopy(PROBE_TOOL)],
                              {**merged, "documents": [dict(PROBE_DOCUMENT)]}))
        for suffix, more_tools, more_kwargs in fallbacks:
            retried = Probe(name + suffix, messages, more_tools, add_generation_prompt,
                            more_kwargs).run(self.template)
            self.check_deadline()
            if retried.error is None:
                retried.failed_first = probe.error
                return retried
            probe.retries.append({"probe": retried.name, "tools": retried.tools,
                                  "documents": more_kwargs.get("documents"),
                                  "error": retried.error})
        return probe

    def decide(self, name: str, value: Any, rule: str, evidence: List[Dict[str, Any]],
               label: Union[str, Tuple[str, ...]], **extra: Any) -> None:
        self.values[name] = value
        self.witnesses[name] = {"capability": name, "value": value, "rule": rule,
                                "summary": _summary(evidence, label),
                                "targets": [label] if isinstance(label, str) else list(label),
                                "probes": evidence, **extra}

    def user(self, text: str = USER_TEXT) -> Dict[str, Any]:
        return _message("user", text, self.typed)

    # -- content -----------------------------------------------------------------------------
    def content(self) -> None:
        string_target, _ = _content_target(0, False)
        typed_target, structure = _content_target(0, True)
        as_string = self.probe("user_string_content", [_message("user", USER_TEXT, False)])
        as_parts = self.probe("user_typed_content", [_message("user", USER_TEXT, True)])
        string_ok = as_string.reaches(string_target)
        typed_ok = as_parts.reaches(typed_target, exclude=structure)
        self.typed = not string_ok and typed_ok
        evidence = [as_string.evidence({"user": string_target}),
                    as_parts.evidence({"user": typed_target}, exclude=structure)]
        self.decide("requires_typed_content", self.typed,
                    "the user's text reaches the output when content is a list of text parts "
                    "and not when it is a string", evidence, "user")
        self.content_format(list(evidence), string_ok, typed_ok)

    def content_format(self, evidence: List[Dict[str, Any]], string_ok: bool,
                       typed_ok: bool) -> None:
        """The system and assistant roles' shapes (the user's are ``string_ok`` and
        ``typed_ok``); the tool role and the decision wait for :meth:`finish_content_format`."""
        per_role: Dict[str, Dict[str, Any]] = {"user": {"string": string_ok, "openai": typed_ok}}
        conversations = {
            "system": ([("system", SYSTEM_TEXT), ("user", USER_TEXT)], 0),
            "assistant": ([("user", USER_TEXT), ("assistant", ASSISTANT_TEXT),
                           ("user", USER_TEXT_2)], 1),
        }
        for role, (turns, index) in conversations.items():
            per_role[role] = {}
            for shape, typed in (("string", False), ("openai", True)):
                probe = self.probe(f"{role}_{shape}_content",
                                   [_message(r, text, typed) for r, text in turns])
                target, exclude = _content_target(index, typed)
                per_role[role][shape] = probe.reaches(target, exclude)
                evidence.append(probe.evidence({role: target}, exclude))
        self.content_pending = (per_role, evidence, typed_ok)

    def finish_content_format(self) -> None:
        """The tool role's shapes (rendered after the tool-call capabilities are known, so that
        its tool call is one the template takes), then the decision."""
        per_role, evidence, typed_ok = self.content_pending
        per_role["tool"] = {}
        for shape, typed in (("string", False), ("openai", True)):
            probe = self.tool_response_probe(f"tool_{shape}_content", typed)
            target, exclude = _content_target(2, typed)
            per_role["tool"][shape] = probe.reaches(target, exclude)
            evidence.append(probe.evidence({"tool": target}, exclude))
        formats = {role: ("openai" if shapes["openai"] else "string")
                   for role, shapes in per_role.items()}
        openai = typed_ok and all(shapes["openai"] or not shapes["string"]
                                  for shapes in per_role.values())
        self.decide("content_format", "openai" if openai else "string",
                    "\"openai\" when a list of text parts reaches the output part by part "
                    "(not as the list's printed form) for every role whose string content does",
                    evidence, "user", per_role=per_role, per_role_format=formats)
        self.witnesses["content_format"]["summary"] = "per role: " + ", ".join(
            f"{role} {shape}" + ("" if per_role[role]["string"] or per_role[role]["openai"]
                                 else " (not written either way)")
            for role, shape in formats.items())

    # -- system, tools -----------------------------------------------------------------------
    def system_role(self) -> None:
        probe = self.probe("system_message",
                           [_message("system", SYSTEM_TEXT, self.typed), self.user()])
        target, exclude = _content_target(0, self.typed)
        self.decide("supports_system_role", probe.reaches(target, exclude),
                    "the system message's text reaches the output",
                    [probe.evidence({"system": target}, exclude)], "system")

    def tools(self) -> None:
        probe = self.probe("tools_given", [self.user()], tools=[copy.deepcopy(PROBE_TOOL)])
        target = "tools[0].function.name"
        self.decide("supports_tools", probe.reaches(target),
                    "the tool's name, given in tools=, reaches the output",
                    [probe.evidence({"tool": target})], "tool")

    # -- tool calls --------------------------------------------------------------------------
    def tool_call_probe(self, name: str, arguments: Any, earlier: bool,
                        calls: int = 1) -> Probe:
        null_content = not self.values.get("requires_non_null_content", False)
        turn = _tool_call_turn([_tool_call(f"{TOOL_NAME}_{index + 1}" if calls > 1 else TOOL_NAME,
                                           copy.deepcopy(arguments),
                                           (CALL_ID, CALL_ID_2)[index])
                                for index in range(calls)], null_content)
        messages = [self.user(), turn]
        if earlier:
            messages += [_tool_response(self.typed),
                         _message("assistant", ASSISTANT_TEXT, self.typed),
                         self.user(USER_TEXT_2)]
        return self.probe(name, messages, tools=[copy.deepcopy(PROBE_TOOL)])

    def tool_calls(self) -> None:
        arguments_path = "messages[1].tool_calls[0].function.arguments"
        value_path = f"{arguments_path}.argument_needle"
        rendered: Dict[str, Dict[str, bool]] = {}
        evidence = []
        probes = {}
        for position, earlier in (("last", False), ("earlier", True)):
            as_string = self.tool_call_probe(f"tool_call_string_arguments_{position}",
                                             ARGUMENTS_JSON, earlier)
            as_object = self.tool_call_probe(f"tool_call_object_arguments_{position}",
                                             ARGUMENTS, earlier)
            probes[position] = (as_string, as_object)
            rendered[position] = {
                "string": as_string.writes_verbatim(arguments_path, ARGUMENTS_JSON),
                "string_escaped": as_string.reaches(arguments_path),
                "object": as_object.reaches(value_path),
            }
            evidence.append(as_string.evidence({"arguments": arguments_path}))
            evidence.append(as_object.evidence({"arguments": value_path}))
        string_ok = any(shapes["string"] for shapes in rendered.values())
        object_ok = any(shapes["object"] for shapes in rendered.values())
        self.decide("supports_tool_calls", string_ok or object_ok,
                    "a tool call's arguments reach the output, given as a JSON string (written "
                    "unescaped) or as an object, as the last assistant turn or an earlier one",
                    evidence, "arguments", per_probe=rendered)
        self.decide("requires_object_arguments", object_ok and not string_ok,
                    "arguments given as an object reach the output and arguments given as a "
                    "JSON string do not (or only escaped a second time, as a JSON string)",
                    evidence, "arguments", per_probe=rendered)
        self.values["tool_call_arguments"] = _argument_style(string_ok, probes, rendered)
        # the earlier-turn probe in the arguments' working form also holds a tool message
        # before the last turn: tool_responses looks at it too
        self.earlier_call_probe = probes["earlier"][0 if string_ok else 1]
        self.witnesses["tool_call_arguments"] = {
            "capability": "tool_call_arguments", "value": self.values["tool_call_arguments"],
            "rule": "how the arguments reach the output: 'string' (a JSON string written as "
                    "given), 'json' (an object written as JSON), 'python' (an object written "
                    "as a Python dict), 'per_key' (keys and values written apart), "
                    "'escaped_string' (a JSON string written as a JSON string literal), "
                    "'none'",
            "summary": _summary(evidence, "arguments"), "targets": ["arguments"],
            "probes": evidence, "per_probe": rendered}
        self.parallel_calls(string_ok)

    def parallel_calls(self, string_ok: bool) -> None:
        arguments = ARGUMENTS_JSON if string_ok else ARGUMENTS
        probe = self.tool_call_probe("parallel_tool_calls", arguments, False, calls=2)
        targets = {f"call_{index + 1}": f"messages[1].tool_calls[{index}].function"
                   for index in range(2)}
        both = all(probe.reaches(path) for path in targets.values())
        evidence = [probe.evidence(targets)]
        self.decide("supports_parallel_tool_calls", both,
                    "both tool calls of one assistant turn reach the output (their names or "
                    "arguments)", evidence, "call_2")

    def tool_response_probe(self, name: str, typed: bool) -> Probe:
        string_ok = self.values.get("tool_call_arguments", "string") == "string"
        turn = _tool_call_turn([_tool_call(TOOL_NAME, ARGUMENTS_JSON if string_ok else ARGUMENTS,
                                           CALL_ID)],
                               not self.values.get("requires_non_null_content", False))
        return self.probe(name, [self.user(), turn, _tool_response(typed)],
                          tools=[copy.deepcopy(PROBE_TOOL)])

    def tool_responses(self) -> None:
        """Decided by a conversation ending with the tool message and by one where it comes
        before the last turn (the earlier-turn tool-call probe)."""
        last = self.tool_response_probe("tool_response", self.typed)
        probes = (last, self.earlier_call_probe)
        target, exclude = _content_target(2, self.typed)
        self.decide("supports_tool_responses",
                    any(probe.reaches(target, exclude) for probe in probes),
                    "a tool message's content reaches the output, as the last message or "
                    "before the last turn",
                    [probe.evidence({"response": target}, exclude) for probe in probes],
                    "response")
        targets = {"response_id": "messages[2].tool_call_id",
                   "call_id": "messages[1].tool_calls[0].id"}
        self.decide("supports_tool_call_id",
                    any(probe.reaches(path) for probe in probes for path in targets.values()),
                    "the tool call's id or the tool message's tool_call_id reaches the output",
                    [probe.evidence(targets) for probe in probes], ("response_id", "call_id"))

    # -- null content ------------------------------------------------------------------------
    def non_null_content(self) -> None:
        def conversation(content: Any) -> List[Dict[str, Any]]:
            return [self.user(), {"role": "assistant", "content": content},
                    self.user(USER_TEXT_2), {"role": "assistant", "content": content}]

        target, exclude = _content_target(0, self.typed)
        empty = self.probe("assistant_empty_content", conversation(""))
        null = self.probe("assistant_null_content", conversation(None))
        value = empty.reaches(target, exclude) and not null.reaches(target, exclude)
        self.decide("requires_non_null_content", value,
                    "with assistant content \"\" the conversation renders and with null content "
                    "it does not (the user's text is missing or the template raises)",
                    [empty.evidence({"user": target}, exclude),
                     null.evidence({"user": target}, exclude)], "user")

    # -- reasoning ---------------------------------------------------------------------------
    def reasoning(self) -> None:
        messages = [self.user(),
                    _message("assistant", ASSISTANT_TEXT, self.typed,
                             reasoning_content=REASONING_TEXT),
                    self.user(USER_TEXT_2),
                    _message("assistant", ASSISTANT_TEXT_2, self.typed,
                             reasoning_content=REASONING_TEXT_2)]
        probe = self.probe("reasoning_turns", messages)
        single = self.probe("reasoning_single_turn", messages[:2])
        current = {"current": "messages[3].reasoning_content",
                   "current_thinking": "messages[3].thinking"}
        earlier = {"earlier": "messages[1].reasoning_content",
                   "earlier_thinking": "messages[1].thinking"}
        single_targets = {"current": "messages[1].reasoning_content",
                          "current_thinking": "messages[1].thinking"}
        evidence = [probe.evidence({**current, **earlier}),
                    single.evidence(single_targets)]
        self.decide("supports_reasoning",
                    any(probe.reaches(path) for path in current.values())
                    or any(single.reaches(path) for path in single_targets.values()),
                    "the reasoning (reasoning_content, also given as thinking) of the last "
                    "assistant turn reaches the output", evidence, ("current", "current_thinking"))
        self.decide("supports_preserve_reasoning",
                    any(probe.reaches(path) for path in earlier.values()),
                    "the reasoning of an assistant turn before the last user message reaches "
                    "the output", evidence, ("earlier", "earlier_thinking"))

    # -- keyword arguments -------------------------------------------------------------------
    def output_kwargs(self) -> None:
        messages = [self.user(),
                    _message("assistant", ASSISTANT_TEXT, self.typed,
                             reasoning_content=REASONING_TEXT),
                    self.user(USER_TEXT_2)]
        changing, records = [], []
        for name, values in OUTPUT_KWARGS.items():
            if name in self.kwargs or name not in self.template.source:
                continue
            outputs = []
            for value in values:
                call = {"messages": messages, "tools": None, "add_generation_prompt": True,
                        "kwargs": {**self.kwargs, name: value}}
                try:
                    outputs.append(probe_render(self.template, call))
                except LimitExceededError:
                    raise
                except Exception as error:
                    outputs.append(f"<raised {type(error).__name__}>")
                self.check_deadline()
            differs = outputs[0] != outputs[1]
            records.append({"kwarg": name, "values": list(values), "outputs": outputs,
                            "changes_output": differs})
            if differs:
                changing.append(name)
        value = ",".join(changing)
        self.values["output_kwargs"] = value
        self.witnesses["output_kwargs"] = {
            "capability": "output_kwargs", "value": value,
            "rule": "the keyword arguments, among " + ", ".join(OUTPUT_KWARGS) + ", that the "
                    "template names and whose two values tried give different outputs "
                    "(comma-separated)",
            "summary": (f"{value} {'changes' if len(changing) == 1 else 'change'} the output"
                        if value else
                        "no keyword argument tried changes the output"),
            "targets": [], "probes": [], "tried": records,
            "messages": copy.deepcopy(messages)}

    def run(self) -> Capabilities:
        self.content()
        self.system_role()
        self.tools()
        self.non_null_content()
        self.tool_calls()
        self.tool_responses()
        self.finish_content_format()
        self.reasoning()
        self.output_kwargs()
        ordered = {name: self.values[name] for name in CAPABILITY_NAMES}
        return Capabilities(ordered, self.witnesses, self.kwargs)


def _structure_of(part: str) -> Tuple[str, ...]:
    return (f"{part}.type", f'{part}{{"type"}}', f'{part}{{"text"}}')


def _content_target(index: int, typed: bool) -> Tuple[str, Tuple[str, ...]]:
    """The path of message ``index``'s text and the paths of the structure around it."""
    if not typed:
        return f"messages[{index}].content", ()
    part = f"messages[{index}].content[0]"
    return f"{part}.text", _structure_of(part)


def _argument_style(string_ok: bool, probes: Dict[str, Tuple[Probe, Probe]],
                    rendered: Dict[str, Dict[str, bool]]) -> str:
    """How the arguments reach the output (see the witness's rule)."""
    if string_ok:
        return "string"
    for position in ("last", "earlier"):
        as_object = probes[position][1]
        if not rendered[position]["object"] or as_object.text is None:
            continue
        text = as_object.text
        if json.dumps(ARGUMENTS) in text or json.dumps(ARGUMENTS, separators=(",", ":")) in text:
            return "json"
        if repr(ARGUMENTS) in text:
            return "python"
        return "per_key"
    if any(shapes["string_escaped"] for shapes in rendered.values()):
        return "escaped_string"
    return "none"


# ---- the cache -------------------------------------------------------------------------------
_CACHE: "OrderedDict[Tuple[Any, ...], Union[Capabilities, LimitExceededError]]" = OrderedDict()
_CACHE_SIZE = 256


def _cache_key(template: "ChatTemplate", kwargs: Dict[str, Any]) -> Tuple[Any, ...]:
    try:
        frozen = json.dumps(kwargs, sort_keys=True, default=repr)
    except (TypeError, ValueError):
        frozen = repr(sorted(kwargs.items(), key=lambda item: item[0]))
    # the environment stands for the clock (one per fixed clock, shared): a template that
    # prints the date gives other outputs, so other witnesses, under another clock
    return (template.source, tuple(sorted(template.special_tokens.items())), frozen,
            template.environment)


def capabilities_of(template: "ChatTemplate", kwargs: Dict[str, Any]) -> Capabilities:
    """The capabilities of ``template`` rendered with ``kwargs``, computed once per template
    source, special tokens, clock and keyword arguments (a bounded in-memory cache shared by
    every ChatTemplate of the process). A refusal (a limit exceeded) is cached like an
    answer: asking again raises the same error at once instead of probing again."""
    key = _cache_key(template, kwargs)
    cached = _CACHE.get(key)
    if cached is not None:
        _CACHE.move_to_end(key)
        if isinstance(cached, LimitExceededError):
            raise cached.with_traceback(None)
        return cached
    try:
        result: Union[Capabilities, LimitExceededError] = _Decider(template, dict(kwargs)).run()
    except LimitExceededError as refusal:
        result = refusal
    _CACHE[key] = result
    if len(_CACHE) > _CACHE_SIZE:
        _CACHE.popitem(last=False)
    if isinstance(result, LimitExceededError):
        raise result.with_traceback(None)
    return result
