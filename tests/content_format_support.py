"""The content-format truth of a chat template, established with Jinja2 alone.

For each role, the same conversation is rendered by Jinja2 (conformance/reference_jinja2.py,
configured as transformers is, with transformers' data steps from
``ChatTemplate.template_variables``) twice: with the role's text as a string, and as a list
holding one text part. The role takes typed content when the text part's text is in the output
and the part's structure is not (no more ``'type': 'text'`` / ``"type": "text"`` in the output
than the string render has). A template is "openai" when the user role takes text parts and
every role whose string content is written takes them too.

This does not use provenance, so it checks ``capabilities().content_format`` independently
(tests/test_content_format.py); tools/vllm_content_format.py records it for vLLM's examples.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

import minijinja_py as mj

NEEDLE = "Content needle Q7"
CALL_ID = "Ab3Cd5Ef7"
STRUCTURE_MARKS = ("'type': 'text'", '"type": "text"', '"type":"text"')
_ENVIRONMENT: List[Any] = []


def _jinja2() -> Any:
    if not _ENVIRONMENT:
        reference_dir = str(Path(__file__).resolve().parents[1] / "conformance")
        if reference_dir not in sys.path:
            sys.path.insert(0, reference_dir)
        import reference_jinja2

        _ENVIRONMENT.append(reference_jinja2.make_environment())
    return _ENVIRONMENT[0]


TOOL = {"type": "function", "function": {"name": "probe_tool", "description": "A tool.",
                                         "parameters": {"type": "object", "properties": {}}}}


def _call(arguments: Any, content: Any) -> Dict[str, Any]:
    return {"role": "assistant", "content": content, "tool_calls": [
        {"id": CALL_ID, "type": "function",
         "function": {"name": "probe_tool", "arguments": arguments}}]}


def _tool_turns(arguments: Any, call_content: Any) -> Callable[[Any], List[Dict[str, Any]]]:
    return lambda content: [{"role": "user", "content": "Hello"}, _call(arguments, call_content),
                            {"role": "tool", "tool_call_id": CALL_ID, "name": "probe_tool",
                             "content": content}]


#: role -> conversations (functions of the role's content) tried in turn until one renders;
#: each is tried without tools and then with one (tool-use templates iterate over tools)
CONVERSATIONS: Dict[str, List[Callable[[Any], List[Dict[str, Any]]]]] = {
    "user": [lambda content: [{"role": "user", "content": content}]],
    "system": [lambda content: [{"role": "system", "content": content},
                                {"role": "user", "content": "Hello"}]],
    "assistant": [lambda content: [{"role": "user", "content": "Hello"},
                                   {"role": "assistant", "content": content},
                                   {"role": "user", "content": "Thanks"}]],
    "tool": [_tool_turns(arguments, call_content)
             for arguments in ('{"city": "Oslo"}', {"city": "Oslo"})
             for call_content in (None, "")],
}


def _render(templates: Tuple[Any, Any], messages: List[Dict[str, Any]], tools: Any
            ) -> Optional[str]:
    """Jinja2's render of ``messages`` with the variables transformers would pass."""
    ours, reference = templates
    variables = ours.template_variables(messages, tools=tools)
    try:
        return reference.render(**variables)
    except Exception:  # noqa: BLE001 - a template that raises does not take this shape
        return None


def _marks(text: str) -> int:
    return sum(text.count(mark) for mark in STRUCTURE_MARKS)


def jinja2_truth(source: str, special_tokens: Optional[Dict[str, str]] = None
                 ) -> Dict[str, Any]:
    """``{"content_format": "string" | "openai", "per_role": {role: {"string": bool,
    "openai": bool}}}`` as Jinja2 renders ``source``."""
    templates = (mj.ChatTemplate(source, special_tokens=dict(special_tokens or {})),
                 _jinja2().from_string(source))
    per_role = {}
    for role, conversations in CONVERSATIONS.items():
        shapes = {"string": False, "openai": False}
        attempts = [(make, tools) for tools in (None, [TOOL]) for make in conversations]
        for make, tools in attempts:
            as_string = _render(templates, make(NEEDLE), tools)
            as_parts = _render(templates, make([{"type": "text", "text": NEEDLE}]), tools)
            shapes["string"] = as_string is not None and NEEDLE in as_string
            shapes["openai"] = (as_parts is not None and NEEDLE in as_parts
                                and _marks(as_parts) <= _marks(as_string or ""))
            if as_string is not None or as_parts is not None:
                break
        per_role[role] = shapes
    openai = per_role["user"]["openai"] and all(
        shapes["openai"] or not shapes["string"] for shapes in per_role.values())
    return {"content_format": "openai" if openai else "string", "per_role": per_role}
