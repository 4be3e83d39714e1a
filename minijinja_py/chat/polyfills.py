"""Polyfills: rewrite a conversation so that a template renders what it cannot render itself.

These are google/minja's six polyfills (``include/minja/chat-template.hpp``,
``chat_template::apply``), with its output shapes, so that a conversation renders as llama.cpp
users saw it while llama.cpp used minja. Each one is applied only when the input needs it and
the template's :class:`~minijinja_py.chat.capabilities.Capabilities` say it is missing:

========================  ====================================  ===============================
polyfill                  applied when                          what it does
========================  ====================================  ===============================
``tools``                 tools are given, ``supports_tools``   the tools as indented JSON (and
                          is false                              an example call, rendered by the
                                                                template itself) go into the
                                                                system message
``tool_calls``            a message has tool calls,             the calls become the message's
                          ``supports_tool_calls`` is false      content: ``{"tool_calls": [...],
                                                                "content": ...}`` as indented
                                                                JSON
``tool_responses``        a ``tool`` message is given,          it becomes a ``user`` message
                          ``supports_tool_responses`` is        whose content is
                          false                                 ``{"tool_response": {...}}``
``system_role``           a system message is given,            its text goes at the start of
                          ``supports_system_role`` is false     the next user message (or
                                                                becomes a user message)
``object_arguments``      a tool call's arguments are a JSON    they are parsed into an object
                          string, ``requires_object_arguments``
``typed_content``         a message's content is a string,      it becomes ``[{"type": "text",
                          ``requires_typed_content``            "text": ...}]``
========================  ====================================  ===============================

Differences from minja, each on purpose: the typed-content polyfill keeps a message's other
keys (minja keeps only ``role`` and ``content``, which drops tool calls); a content that is
already a list is left as it is by the system-role polyfill where minja raises; the tool-call
example is rendered through transformers' pipeline (tools=None, None-valued keys dropped).
"""

from __future__ import annotations

import copy
import json
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Tuple, Union

from .. import LimitExceededError

if TYPE_CHECKING:  # pragma: no cover
    from .capabilities import Capabilities
    from .pipeline import ChatTemplate

__all__ = ["POLYFILLS", "polyfills_needed", "apply_polyfills", "tool_call_example"]

#: The polyfills, in the order they act on a conversation (minja's).
POLYFILLS: Tuple[str, ...] = ("tools", "object_arguments", "tool_calls", "tool_responses",
                              "system_role", "typed_content")

# minja's words, kept byte for byte: templates were tuned (and outputs compared) against them
TOOLS_PREAMBLE = "You can call any of the following tools to satisfy the user's requests: "
EXAMPLE_HEADER = "\n\nExample tool call syntax:\n\n"


def _dump(value: Any) -> str:
    """JSON as minja writes it (``dump(2)``): two-space indent, UTF-8 kept. (For the tools,
    minja's own writer prints an empty list or object over two lines; this prints ``[]``.)"""
    return json.dumps(value, indent=2, ensure_ascii=False)


def selected_polyfills(polyfill: Union[bool, Mapping[str, bool]]) -> Tuple[str, ...]:
    """The polyfills ``polyfill`` allows: all for True, none for False, the names set to
    True for a mapping (unknown names are a ValueError listing the known ones)."""
    if polyfill is True:
        return POLYFILLS
    if polyfill is False or polyfill is None:
        return ()
    if not isinstance(polyfill, Mapping):
        raise TypeError("polyfill must be True, False or a mapping of polyfill names to bools, "
                        f"not {type(polyfill).__name__}")
    unknown = sorted(set(polyfill) - set(POLYFILLS))
    if unknown:
        raise ValueError(f"unknown polyfill name(s) {', '.join(map(repr, unknown))}; the "
                         f"polyfills are {', '.join(POLYFILLS)}")
    return tuple(name for name in POLYFILLS if polyfill.get(name))


def _has_tool_calls(message: Mapping[str, Any]) -> bool:
    return message.get("tool_calls") is not None


#: polyfill -> (the capability that makes it unneeded or needed, whether the capability
#: being True is what needs it, what in the input needs it)
_NEEDS = {
    "tools": ("supports_tools", False,
              lambda messages, tools: bool(tools)),
    "object_arguments": ("requires_object_arguments", True,
                         lambda messages, tools: any(map(_has_tool_calls, messages))),
    "tool_calls": ("supports_tool_calls", False,
                   lambda messages, tools: any(map(_has_tool_calls, messages))),
    "tool_responses": ("supports_tool_responses", False,
                       lambda messages, tools: any(m.get("role") == "tool" for m in messages)),
    "system_role": ("supports_system_role", False,
                    lambda messages, tools: any(m.get("role") == "system" for m in messages)),
    "typed_content": ("requires_typed_content", True,
                      lambda messages, tools: any(isinstance(m.get("content"), str)
                                                  for m in messages)),
}


def polyfills_needed(caps: "Capabilities", messages: List[Dict[str, Any]], tools: Any,
                     allowed: Tuple[str, ...] = POLYFILLS) -> Tuple[str, ...]:
    """The polyfills among ``allowed`` that this input needs with this template."""
    values = caps.to_dict()
    needed = []
    for name in allowed:
        capability, needed_when, input_needs = _NEEDS[name]
        if values[capability] is needed_when and input_needs(messages, tools):
            needed.append(name)
    return tuple(needed)


# ---- the rewrites ----------------------------------------------------------------------------
def _with_system(messages: List[Dict[str, Any]], text: str) -> List[Dict[str, Any]]:
    """``text`` appended to the first message when it is a system message, else a new one."""
    if messages and messages[0].get("role") == "system":
        first = dict(messages[0])
        first["content"] = f"{first.get('content', '')}\n\n{text}"
        return [first] + messages[1:]
    return [{"role": "system", "content": text}] + messages


def _parse_arguments(message: Dict[str, Any]) -> None:
    for call in message.get("tool_calls") or ():
        if not isinstance(call, dict) or call.get("type") != "function":
            continue
        function = call.get("function")
        if isinstance(function, dict) and isinstance(function.get("arguments"), str):
            try:
                function["arguments"] = json.loads(function["arguments"])
            except ValueError:
                pass  # minja keeps arguments it cannot parse as they are


def _calls_as_content(message: Dict[str, Any]) -> None:
    calls = []
    for call in message.get("tool_calls") or ():
        if not isinstance(call, dict) or call.get("type") != "function":
            continue
        function = call.get("function") or {}
        entry = {"name": function.get("name"), "arguments": function.get("arguments")}
        if "id" in call:
            entry["id"] = call["id"]
        calls.append(entry)
    document: Dict[str, Any] = {"tool_calls": calls}
    content = message.get("content")
    if content:
        document["content"] = content
    message["content"] = _dump(document)
    del message["tool_calls"]


def _response_as_user(message: Dict[str, Any]) -> None:
    response: Dict[str, Any] = {}
    if "name" in message:
        response["tool"] = message.pop("name")
    response["content"] = message.get("content")
    if "tool_call_id" in message:
        response["tool_call_id"] = message["tool_call_id"]
    message["role"] = "user"
    message["content"] = _dump({"tool_response": response})


class _SystemMerger:
    """The system-role polyfill: system text waits for the next user message."""

    def __init__(self, out: List[Dict[str, Any]]) -> None:
        self.out = out
        self.pending = ""

    def flush(self) -> None:
        if self.pending:
            self.out.append({"role": "user", "content": self.pending})
            self.pending = ""

    def take(self, message: Dict[str, Any]) -> bool:
        """Whether ``message`` was absorbed (a system message); merges into a user message."""
        content = message.get("content")
        if not isinstance(content, str):
            return False
        role = message.get("role")
        if role == "system":
            self.pending = f"{self.pending}\n{content}" if self.pending else content
            return True
        if role == "user":
            if self.pending:
                message["content"] = self.pending + (f"\n{content}" if content else "")
                self.pending = ""
        else:
            self.flush()
        return False


def apply_polyfills(messages: List[Dict[str, Any]], tools: Any, polyfills: Tuple[str, ...],
                    example: Optional[str] = None) -> List[Dict[str, Any]]:
    """``messages`` (plain dicts, not modified) rewritten by ``polyfills`` in minja's order;
    ``example`` is the tool-call example the tools polyfill shows (see
    :func:`tool_call_example`)."""
    if "tools" in polyfills:
        text = TOOLS_PREAMBLE + _dump(tools)
        if example:
            text += EXAMPLE_HEADER + example + "\n\n"
        messages = _with_system(messages, text)
    out: List[Dict[str, Any]] = []
    merger = _SystemMerger(out)
    for original in messages:
        message = copy.deepcopy(original)
        if _has_tool_calls(message):
            if "object_arguments" in polyfills or "tool_calls" in polyfills:
                _parse_arguments(message)
            if "tool_calls" in polyfills:
                _calls_as_content(message)
        if "tool_responses" in polyfills and message.get("role") == "tool":
            _response_as_user(message)
        if "system_role" in polyfills and merger.take(message):
            continue
        out.append(message)
    if "system_role" in polyfills:
        merger.flush()
    if "typed_content" in polyfills:
        for message in out:
            if isinstance(message.get("content"), str):
                message["content"] = [{"type": "text", "text": message["content"]}]
    return out


# ---- the tool-call example -------------------------------------------------------------------
def _strip_final_eos(full: str, prefix: str, eos: str) -> str:
    """minja drops the end-of-sequence token that closes the tool-call turn."""
    if not eos:
        return full
    at = full.rfind(eos)
    if at < 0:
        return full
    if at == len(prefix) - len(eos) or (full.endswith("\n") and at == len(full) - len(eos) - 1):
        return full[:at]
    return full


def _common_prefix_length(prefix: str, full: str) -> int:
    """The length of the common start, never ending just after a ``<`` (DeepSeek-R1's
    generation prompt ends in ``<think>`` where the call starts with another ``<...>``)."""
    length = 0
    for index, (a, b) in enumerate(zip(prefix, full)):
        if a != b:
            break
        if a != "<":
            length = index + 1
    return length


def tool_call_example(template: "ChatTemplate", caps: "Capabilities",
                      template_kwargs: Mapping[str, Any]) -> str:
    """What the template writes for a tool call, for the tools polyfill to show, as minja
    derives it: the render of ``[user, assistant with a call]`` (with the polyfills this
    template needs) after the render of ``[user]`` with the generation prompt. Empty when the
    template writes neither the call's name nor its argument."""
    if caps.tool_call_example is not None:
        return caps.tool_call_example
    arguments: Any = {"arg1": "some_value"}
    if not caps.requires_object_arguments:
        arguments = json.dumps(arguments)  # minja's dump(-1): ", " and ": "
    user = {"role": "user", "content": "Hey"}
    call = {"role": "assistant", "content": "" if caps.requires_non_null_content else None,
            "tool_calls": [{"id": "call_1___", "type": "function",
                            "function": {"name": "tool_name", "arguments": arguments}}]}
    example = ""
    try:
        prefix = template.render([user], add_generation_prompt=True, polyfill=True,
                                 **template_kwargs)
        full = template.render([user, call], add_generation_prompt=False, polyfill=True,
                               **template_kwargs)
    except LimitExceededError:
        raise
    except Exception:  # no example for a template that cannot render one
        prefix = full = ""
    eos = template.special_tokens.get("eos_token", "")
    full = _strip_final_eos(full, prefix, eos if isinstance(eos, str) else "")
    candidate = full[_common_prefix_length(prefix, full):]
    if "tool_name" in candidate or "some_value" in candidate:
        example = candidate
    caps.tool_call_example = example
    return example
