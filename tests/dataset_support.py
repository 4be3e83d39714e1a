"""Rows for the dataset tests: the shared corpus's conversations, varied, plus bad rows, and
the single-process answers (ChatTemplate / ChatTokenizer called row by row) to compare with."""

from __future__ import annotations

import copy
import datetime
import json
import os
from pathlib import Path
from typing import Any, Dict, List, Optional

ROOT = Path(__file__).resolve().parent.parent
CORPUS = Path(os.environ.get("MINIJINJA_PY_CORPUS", ROOT.parent / "shared" / "corpus"))
TOKENIZERS = CORPUS / "tokenizers"
TEMPLATES = CORPUS / "templates"
NOW = datetime.datetime(2025, 7, 10, 12, 0, 0)

#: row-level settings of a context that are render options, not template variables
OPTIONS = ("add_generation_prompt", "continue_final_message")


def corpus_available() -> bool:
    return (TOKENIZERS / "qwen2" / "tokenizer.json").exists() and (CORPUS / "contexts").is_dir()


def contexts() -> Dict[str, Dict[str, Any]]:
    return {path.stem: json.loads(path.read_text(encoding="utf-8"))
            for path in sorted((CORPUS / "contexts").glob("*.json"))}


#: contexts that every chat template of the tests renders (no tool calls, no content parts)
PLAIN = ("continue_final", "documents", "empty_system", "injection", "long_multi_turn",
         "no_generation_prompt", "reasoning", "reasoning_disabled", "simple",
         "simple_transformers_nulls", "single_user", "system", "tools_no_calls", "unicode")


def good_rows(count: int, with_variables: bool = True, plain: bool = False
              ) -> List[Dict[str, Any]]:
    """``count`` rows cycling through the corpus contexts: an id, the conversation (every
    third one with its last text message changed, so rows differ), tools and documents when
    the context has them, metadata, and with ``with_variables`` the context's other keys
    (bos_token, enable_thinking, add_generation_prompt...) in a ``vars`` column. ``plain``:
    only the :data:`PLAIN` contexts (Qwen2's template renders all of them)."""
    named = contexts()
    names = sorted(PLAIN if plain else named)
    rows = []
    for index in range(count):
        name = names[index % len(names)]
        context = copy.deepcopy(named[name])
        messages = context.pop("messages")
        if index % 3 == 0:
            for message in reversed(messages):
                if isinstance(message.get("content"), str):
                    message["content"] += f" (variation {index})"
                    break
        row: Dict[str, Any] = {"id": f"row-{index}", "messages": messages,
                               "meta": {"context": name, "n": index}}
        for key in ("tools", "documents"):
            if key in context:
                row[key] = context.pop(key)
        if with_variables:
            row["vars"] = context
        rows.append(row)
    return rows


USER = {"role": "user", "content": "Hello"}

#: bad rows (as JSON values) and the error class and message start each must give
BAD_ROWS: List[Any] = [
    ({"id": "bad-not-list", "messages": 42},
     "MalformedRowError", "'messages' must be a list of messages, not a number"),
    ({"id": "bad-no-role", "messages": [{"content": "no role here"}]},
     "MalformedRowError", "messages[0] has no 'role'"),
    ({"id": "bad-message-type", "messages": ["just a string"]},
     "MalformedRowError", "messages[0] must be a message object, not a string"),
    ({"id": "bad-tools-type", "messages": [USER], "tools": {"name": "not a list"}},
     "MalformedRowError", "'tools' must be a list of tool schemas, not an object"),
    ({"id": "bad-empty", "messages": []},
     "ChatTemplateValueError", "Cannot apply a chat template to an empty conversation"),
    ({"id": "bad-no-messages", "conversation": [USER]},
     "MalformedRowError", "the row has no 'messages' column"),
    ([1, 2, 3], "MalformedRowError", "the row is a list, not a JSON object"),
]


def mixed_rows(count: int, bad_every: int = 7) -> List[Any]:
    """Good rows with the bad rows spread among them (one every ``bad_every``)."""
    rows: List[Any] = []
    bad = 0
    for row in good_rows(count):
        rows.append(row)
        if len(rows) % bad_every == 0:
            rows.append(copy.deepcopy(BAD_ROWS[bad % len(BAD_ROWS)][0]))
            bad += 1
    return rows


def write_jsonl(path: Path, rows: List[Any], extra_lines: Optional[Dict[int, str]] = None) -> None:
    """One JSON value a line; ``extra_lines`` puts raw text (e.g. not JSON) before the row of
    that index."""
    with open(path, "w", encoding="utf-8") as handle:
        for index, row in enumerate(rows):
            if extra_lines and index in extra_lines:
                handle.write(extra_lines[index] + "\n")
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")


def render_options(row: Dict[str, Any], variables_column: Optional[str] = "vars"
                   ) -> Dict[str, Any]:
    """The keyword arguments a single-process call gets for ``row``."""
    options: Dict[str, Any] = {}
    for key in ("tools", "documents"):
        if row.get(key) is not None:
            options[key] = row[key]
    if variables_column is not None:
        options.update(row.get(variables_column) or {})
    return options


def expected_text(template: Any, row: Any, variables_column: Optional[str] = "vars",
                  **extra: Any) -> Dict[str, Any]:
    """``{"text": ...}`` or ``{"class": ..., "message": ..., "line": ...}``: what
    ``ChatTemplate.from_tokenizer_config(template).render(...)`` makes of the row."""
    from minijinja_py import ChatTemplate, TemplateError

    options = render_options(row, variables_column)
    options.update(extra)
    try:
        chat = ChatTemplate.from_tokenizer_config(template, tools=options.get("tools"), now=NOW)
        return {"text": chat.render(row["messages"], **options)}
    except Exception as exc:
        message = exc.message if isinstance(exc, TemplateError) else str(exc)
        return {"class": type(exc).__name__, "message": message.strip().splitlines()[0],
                "line": getattr(exc, "lineno", None), "column": getattr(exc, "column", None)}


def expected_tokens(tokenizer: Any, row: Any, variables_column: Optional[str] = "vars",
                    **extra: Any) -> Dict[str, Any]:
    """What ``tokenizer.apply_chat_template(...)`` (a ChatTokenizer) makes of the row."""
    from minijinja_py import TemplateError

    options = render_options(row, variables_column)
    options.update(extra)
    try:
        return dict(tokenizer.apply_chat_template(row["messages"], **options))
    except Exception as exc:
        message = exc.message if isinstance(exc, TemplateError) else str(exc)
        return {"class": type(exc).__name__, "message": message.strip().splitlines()[0],
                "line": getattr(exc, "lineno", None), "column": getattr(exc, "column", None)}
