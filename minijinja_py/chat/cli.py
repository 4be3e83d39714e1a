"""The ``minijinja-py`` command line (also ``python -m minijinja_py``).

``minijinja-py encode MODEL_DIR`` shows the token ids (with ``--mask`` the assistant mask,
with ``--sanitize`` control tokens from the conversation encoded as text) that
``apply_chat_template(tokenize=True)`` makes of a conversation, as a table or ``--json``.
``minijinja-py render TEMPLATE_OR_CONFIG`` prints the prompt a chat template makes of a
conversation (a built-in example when ``--messages`` is not given); ``minijinja-py check
TEMPLATE_OR_CONFIG`` parses the template(s), shows syntax errors with a caret, and lists the
variables, message keys and features a template uses. ``render --provenance`` tells the
template's own text from the text that came from the input (colours on a terminal, plain markers
otherwise, the runs as JSON with ``--json``: see provenance_display.py). TEMPLATE_OR_CONFIG is a
``.jinja`` file, a ``tokenizer_config.json``, a model directory or a ``.gguf`` file.
``minijinja-py inspect TEMPLATE_OR_CONFIG`` prints what the template can do (system role,
tools, tool calls, reasoning, content format...), each with a one-line witness (see
capabilities.py), whether turns extend each other and the derived response parser.
``minijinja-py parse TEMPLATE_OR_CONFIG --text FILE`` parses a model's output back into an
assistant message with the parser derived from the template (response_parser.py).
``minijinja-py dataset TEMPLATE_OR_MODEL_DIR INPUT OUTPUT`` renders or encodes every row of a
JSON Lines, JSON or Parquet dataset on every core, resumably (minijinja_py/chat/dataset/).

Exit codes: 0 success, 1 template or data error (syntax error, render error, invalid JSON, a
refused model file...), 2 usage error (bad option, missing file); ``dataset`` also returns 3
when it finished but some rows failed (they are in its errors file). Errors are one message on
stderr, never a traceback: the specific problems each have their own message, and anything
unforeseen is still caught by a last-resort handler in :func:`main` and printed as one
``minijinja-py: error: ...`` line (exit code 1).

The prompt is written to stdout as UTF-8. A lone surrogate in it (U+D800-U+DFFF, e.g. from a
JSON string ``"\\ud800"`` in the messages) has no UTF-8 encoding: it is written as the visible
escape ``\\ud800`` and a note on stderr says so (exit code 0). With ``--json`` that escape is
the exact JSON spelling, so no note is printed.
"""

from __future__ import annotations

import argparse
import datetime as _datetime
import json
import os
import sys
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from ..meta import analyze_template
from .pipeline import (SPECIAL_TOKEN_NAMES, ChatConfig, ChatTemplate, ChatTemplateValueError,
                   load_chat_config, select_template)
from ..exceptions import TemplateError, TemplateSyntaxError
from .extras import install_hint
from .provenance_display import MARKERS, span_events, span_marks_at

__all__ = ["main", "EXAMPLE_MESSAGES", "EXAMPLE_TOOLS"]

SPAN_OPEN, SPAN_CLOSE = "\u27e6", "\u27e7"  # ⟦ ⟧ mark generation spans with --spans

EXAMPLE_TOOLS: List[Dict[str, Any]] = [{
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "The city, e.g. Vienna"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"],
                         "description": "The temperature unit"},
            },
            "required": ["city"],
        },
    },
}]

EXAMPLE_MESSAGES: List[Dict[str, Any]] = [
    {"role": "system", "content": "You are a helpful assistant with access to a weather tool."},
    {"role": "user", "content": "What's the weather like in Vienna right now?"},
    {"role": "assistant", "content": None, "tool_calls": [{
        "id": "call12345", "type": "function",
        "function": {"name": "get_weather", "arguments": {"city": "Vienna", "unit": "celsius"}},
    }]},
    {"role": "tool", "tool_call_id": "call12345", "name": "get_weather",
     "content": "{\"temperature\": 21, \"condition\": \"sunny\"}"},
    {"role": "assistant", "content": "It is sunny in Vienna, at 21 °C."},
    {"role": "user", "content": "Great! Should I take an umbrella this evening?"},
]

# Simpler conversations tried when a template refuses the tool-calling example.
_FALLBACK_EXAMPLES: List[Tuple[str, List[Dict[str, Any]]]] = [
    ("a plain conversation", [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "What's the capital of Austria?"},
        {"role": "assistant", "content": "The capital of Austria is Vienna."},
        {"role": "user", "content": "And its population?"},
    ]),
    ("a plain conversation without a system message", [
        {"role": "user", "content": "What's the capital of Austria?"},
        {"role": "assistant", "content": "The capital of Austria is Vienna."},
        {"role": "user", "content": "And its population?"},
    ]),
]

_CONVERSATION_VARIABLES = ("messages", "tools", "documents", "add_generation_prompt")


class UsageError(Exception):
    """Bad command-line usage: exit code 2."""


class DataError(Exception):
    """Bad input data or template: exit code 1."""


# ---- argument parsing ------------------------------------------------------------------------
def _build_parser() -> argparse.ArgumentParser:
    from .. import __version__

    parser = argparse.ArgumentParser(
        prog="minijinja-py",
        description="Render, check and encode LLM chat templates exactly like transformers' "
                    "apply_chat_template, without Jinja2 or transformers.")
    parser.add_argument("--version", action="version", version=f"minijinja-py {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands.required = True

    render = commands.add_parser(
        "render", help="print the prompt a chat template makes of a conversation",
        description="Print the prompt TEMPLATE_OR_CONFIG makes of a conversation. Without "
                    "--messages, a built-in example is rendered (system, user, an assistant tool "
                    "call, the tool result, the answer, a final user message; one example tool) "
                    "with a generation prompt. With --provenance, the text that came from the "
                    "input (messages, tools, --var values, special tokens) is told apart from "
                    "the template's own text.")
    render.add_argument("template", metavar="TEMPLATE_OR_CONFIG",
                        help=".jinja file, tokenizer_config.json, model directory or .gguf file")
    render.add_argument("--messages", metavar="FILE",
                        help="JSON file ('-' for stdin): a list of messages, or an object with "
                             "'messages' and optionally tools, documents, add_generation_prompt, "
                             "continue_final_message and other variables")
    render.add_argument("--tools", metavar="FILE", help="JSON file with a list of tool schemas")
    render.add_argument("--documents", metavar="FILE", help="JSON file with a list of documents")
    render.add_argument("--add-generation-prompt", action=argparse.BooleanOptionalAction,
                        default=None,
                        help="end with the header of a new assistant message (default: off, "
                             "on for the built-in example)")
    render.add_argument("--continue-final-message", action="store_true", default=None,
                        help="end the prompt inside the final message, for the model to "
                             "continue it")
    render.add_argument("--continue-field", metavar="FIELD",
                        help="continue this field of the final message (e.g. reasoning_content);"
                             " implies --continue-final-message")
    render.add_argument("--var", action="append", default=[], metavar="KEY=JSON",
                        help="a template variable, its value in JSON (repeatable): "
                             "--var enable_thinking=false --var 'bos_token=\"<s>\"'")
    render.add_argument("--name", metavar="NAME",
                        help="which named template of the config to use (e.g. tool_use)")
    render.add_argument("--now", metavar="ISO",
                        help="the date and time strftime_now() formats, e.g. 2025-07-10T12:00:00"
                             " (default: now)")
    render.add_argument("--spans", action="store_true",
                        help=f"mark the output of {{%% generation %%}} blocks with "
                             f"{SPAN_OPEN} and {SPAN_CLOSE}")
    render.add_argument("--provenance", action="store_true",
                        help="tell the template's own text from the input's: colours on a "
                             f"terminal, else input marked {MARKERS['input'][0]}verbatim"
                             f"{MARKERS['input'][1]}, {MARKERS['derived'][0]}derived"
                             f"{MARKERS['derived'][1]} (e.g. JSON-encoded), "
                             f"{MARKERS['unknown'][0]}unknown{MARKERS['unknown'][1]}; a legend "
                             "goes to stderr. With --json: the runs as JSON")
    render.add_argument("--color", "--colour", choices=("auto", "always", "never"),
                        default="auto", dest="color",
                        help="colours for --provenance: auto (default: on a terminal, unless "
                             "NO_COLOR is set), always or never (plain markers)")
    render.add_argument("--json", action="store_true",
                        help='print {"text": ..., "generation_spans": [[start, end], ...]}; '
                             'with --provenance also "runs": [{"start", "end", "kind", ...}]')

    encode = commands.add_parser(
        "encode", help="show the token ids (and masks) a model folder makes of a conversation",
        description="Render a conversation with MODEL_DIR's chat template and encode it with its "
                    "tokenizer.json, exactly like transformers' apply_chat_template("
                    "tokenize=True), and print a table: index, token id, token text (plain text "
                    "in quotes, control tokens bare), and with --mask the assistant mask. "
                    "Without --messages the built-in example is encoded. Needs the tokenizers "
                    "extra: " + install_hint("tokenizers") + ".")
    encode.add_argument("model", metavar="MODEL_DIR",
                        help="model folder with tokenizer.json (and tokenizer_config.json, "
                             "chat_template.jinja)")
    encode.add_argument("--messages", metavar="FILE",
                        help="JSON file ('-' for stdin): a list of messages, or an object with "
                             "'messages' and optionally tools, documents, add_generation_prompt, "
                             "continue_final_message and other variables")
    encode.add_argument("--tools", metavar="FILE", help="JSON file with a list of tool schemas")
    encode.add_argument("--documents", metavar="FILE", help="JSON file with a list of documents")
    encode.add_argument("--add-generation-prompt", action=argparse.BooleanOptionalAction,
                        default=None,
                        help="end with the header of a new assistant message (default: off, "
                             "on for the built-in example)")
    encode.add_argument("--continue-final-message", action="store_true", default=None,
                        help="end the prompt inside the final message")
    encode.add_argument("--continue-field", metavar="FIELD",
                        help="continue this field of the final message; implies "
                             "--continue-final-message")
    encode.add_argument("--var", action="append", default=[], metavar="KEY=JSON",
                        help="a template variable, its value in JSON (repeatable)")
    encode.add_argument("--name", metavar="NAME",
                        help="which named template of the folder to use (e.g. tool_use)")
    encode.add_argument("--chat-template", metavar="FILE",
                        help="a .jinja file to use instead of the folder's template")
    encode.add_argument("--now", metavar="ISO",
                        help="the date and time strftime_now() formats (default: now)")
    encode.add_argument("--mask", nargs="?", const="generation",
                        choices=("generation", "messages"),
                        help="add the assistant mask: of the {%% generation %%} blocks (the "
                             "default), or 'messages': of each assistant message and the "
                             "template text closing its turn, for templates without the tag")
    encode.add_argument("--sanitize", nargs="?", const="markers",
                        choices=("markers", "provenance"),
                        help="encode control tokens from the caller as plain text: as "
                             "transformers does (the default), or 'provenance': every control "
                             "token with a character from the caller, however it was built")
    encode.add_argument("--json", action="store_true",
                        help="print the result dict (input_ids, attention_mask, "
                             "assistant_masks) as JSON")

    check = commands.add_parser(
        "check", help="parse a template and list what it reads and uses",
        description="Parse the chat template(s) of TEMPLATE_OR_CONFIG; report syntax errors with "
                    "line, column and caret; list the variables, message keys and features each "
                    "template uses. Exit code 0 when every template parses, 1 otherwise.")
    check.add_argument("template", metavar="TEMPLATE_OR_CONFIG",
                       help=".jinja file, tokenizer_config.json, model directory or .gguf file")
    check.add_argument("--json", action="store_true", help="print the report as JSON")

    _add_inspect_parser(commands)
    from .dataset.command import add_dataset_parser
    from .parse_command import add_parse_parser

    add_parse_parser(commands)
    add_dataset_parser(commands)
    return parser


def _add_inspect_parser(commands: "argparse._SubParsersAction") -> None:
    """Add the ``inspect`` command (capabilities, with a witness each) to ``commands``."""
    inspect = commands.add_parser(
        "inspect", help="what a chat template can do: system role, tools, tool calls, "
                        "reasoning, content format..., each with its witness",
        description="Render small probe conversations with the chat template of "
                    "TEMPLATE_OR_CONFIG and print each capability (supports_system_role, "
                    "supports_tools, ..., content_format) with a one-line witness: the input "
                    "path and the output text it wrote, or the error the template raised. A "
                    "capability holds when the probe's input reaches the output.")
    inspect.add_argument("template", metavar="TEMPLATE_OR_CONFIG",
                         help=".jinja file, tokenizer_config.json, model directory or .gguf file")
    inspect.add_argument("--name", metavar="NAME",
                         help="which named template of the config to inspect (e.g. tool_use)")
    inspect.add_argument("--var", action="append", default=[], metavar="KEY=JSON",
                         help="a template variable passed to every probe (repeatable): "
                              "--var enable_thinking=false")
    inspect.add_argument("--witness", metavar="CAPABILITY",
                         help="print that capability's whole witness (the probes, their "
                              "outputs and the ranges each input wrote) as JSON")
    inspect.add_argument("--json", action="store_true",
                         help='print {"source", "template", "capabilities", "witnesses"} '
                              "(each witness's rule and one-line summary) as JSON")


# ---- input -----------------------------------------------------------------------------------
def _load_config(path: str) -> ChatConfig:
    if not os.path.exists(path):
        raise UsageError(f"no such file or directory: {path}")
    try:
        return load_chat_config(path)
    except (ValueError, OSError) as exc:
        raise DataError(str(exc)) from None


def _first_line(exc: BaseException) -> str:
    text = str(exc)
    return text.splitlines()[0] if text.strip() else type(exc).__name__


def _parse_json_text(text: str, what: str) -> Any:
    """``json.loads`` whose every failure is a DataError with a one-line message."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise DataError(f"{what} is not valid JSON: {exc}") from None
    except RecursionError:
        raise DataError(f"{what}: the JSON is nested too deeply to read") from None
    except ValueError as exc:  # e.g. Python's limit on the digits of an integer
        raise DataError(f"{what}: cannot read the JSON ({_first_line(exc)})") from None


def _read_text(path: str, what: str) -> str:
    """A UTF-8 file's text ('-': standard input); every failure is a one-line error."""
    try:
        if path == "-":
            return sys.stdin.buffer.read().decode("utf-8")
        with open(path, "rb") as handle:
            return handle.read().decode("utf-8")
    except FileNotFoundError:
        raise UsageError(f"{what}: no such file: {path}") from None
    except OSError as exc:
        raise UsageError(f"{what}: cannot read {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise DataError(f"{what}: {path} is not UTF-8 ({exc.reason})") from None


def _read_json(path: str, what: str) -> Any:
    where = "<stdin>" if path == "-" else path
    return _parse_json_text(_read_text(path, what), f"{what}: {where}")


def _parse_var(text: str) -> Tuple[str, Any]:
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key.isidentifier():
        raise UsageError(f"--var {text!r}: expected KEY=JSON, e.g. --var enable_thinking=true")
    try:
        return key, json.loads(raw)
    except json.JSONDecodeError:
        shown = raw if len(raw) <= 60 else raw[:57] + "..."
        raise UsageError(f"--var {key}: {shown!r} is not JSON (write strings in quotes, e.g. "
                         f"--var '{key}=\"{shown}\"')") from None
    except RecursionError:
        raise UsageError(f"--var {key}: the JSON value is nested too deeply to read") from None
    except ValueError as exc:  # e.g. Python's limit on the digits of an integer
        raise UsageError(f"--var {key}: cannot read the JSON value ({_first_line(exc)})") \
            from None


def _parse_now(text: Optional[str]) -> Optional[_datetime.datetime]:
    if text is None:
        return None
    try:
        return _datetime.datetime.fromisoformat(text)
    except ValueError:
        try:
            return _datetime.datetime.combine(_datetime.date.fromisoformat(text),
                                              _datetime.time())
        except ValueError:
            raise UsageError(f"--now {text!r}: not an ISO date/time such as "
                             "2025-07-10T12:00:00") from None


def _expect_list(value: Any, what: str) -> List[Any]:
    if not isinstance(value, list):
        raise DataError(f"{what} must be a JSON list, not {type(value).__name__}")
    return value


# ---- render ----------------------------------------------------------------------------------
def _mark_spans(text: str, spans: Sequence[Tuple[int, int]]) -> str:
    """Insert ⟦ at each span start and ⟧ at each span end (nested spans nest the marks; an
    empty span reads ⟦⟧; at one offset closes come first, so adjacent spans read ⟦a⟧⟦b⟧)."""
    opens, closes, empties = span_events(spans)
    pieces = []
    last = 0
    for offset in sorted(set(opens) | set(closes) | set(empties)):
        pieces.append(text[last:offset])
        pieces.append(span_marks_at(offset, opens, closes, empties, (SPAN_OPEN, SPAN_CLOSE)))
        last = offset
    pieces.append(text[last:])
    return "".join(pieces)


def _write(text: str, exact_escapes: bool = False) -> None:
    """Write ``text`` to stdout as UTF-8 bytes. Lone surrogates (which UTF-8 cannot encode) are
    written as ``\\udXXX`` escapes, with a note on stderr unless ``exact_escapes`` (JSON, where
    that escape is the exact spelling)."""
    out = sys.stdout
    if out.isatty() and text and not text.endswith("\n"):
        text += "\n"
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError:
        data = text.encode("utf-8", "backslashreplace")
        if not exact_escapes:
            count = sum(1 for char in text if "\ud800" <= char <= "\udfff")
            print(f"note: the output holds {count:,} lone surrogate code point(s) "
                  "(U+D800-U+DFFF), which UTF-8 cannot encode; each is written as a \\udXXX "
                  "escape", file=sys.stderr)
    out.flush()
    buffer = getattr(out, "buffer", None)
    if buffer is None:  # a text-only stream (e.g. io.StringIO in a test harness)
        out.write(data.decode("utf-8"))
        out.flush()
        return
    buffer.write(data)
    buffer.flush()


def _conversation_options(args: argparse.Namespace
                          ) -> Tuple[Optional[_datetime.datetime], Dict[str, Any], Dict[str, Any],
                                     bool]:
    """What --messages/--tools/--documents/--add-generation-prompt/--continue-*/--var/--now
    ask for: (now, options, template variables, whether it is the built-in example)."""
    now = _parse_now(args.now)
    variables: Dict[str, Any] = {}
    options: Dict[str, Any] = {}
    builtin_example = args.messages is None
    if builtin_example:
        options = {"messages": EXAMPLE_MESSAGES, "tools": EXAMPLE_TOOLS,
                   "add_generation_prompt": True}
    else:
        data = _read_json(args.messages, "--messages")
        if isinstance(data, dict):
            if "messages" not in data:
                raise DataError("--messages: a JSON object must have a 'messages' list")
            for key, value in data.items():
                if key in _CONVERSATION_VARIABLES or key == "continue_final_message":
                    options[key] = value
                else:
                    variables[key] = value
        else:
            options["messages"] = data
        _expect_list(options["messages"], "--messages")
    if args.tools is not None:
        options["tools"] = _expect_list(_read_json(args.tools, "--tools"), "--tools")
    if args.documents is not None:
        options["documents"] = _expect_list(_read_json(args.documents, "--documents"),
                                            "--documents")
    if args.add_generation_prompt is not None:
        options["add_generation_prompt"] = args.add_generation_prompt
    if args.continue_field is not None:
        options["continue_final_message"] = args.continue_field
    elif args.continue_final_message:
        options["continue_final_message"] = True
    if options.get("continue_final_message") and builtin_example \
            and args.add_generation_prompt is None:
        options["add_generation_prompt"] = False
    for item in args.var:
        key, value = _parse_var(item)
        if key in _CONVERSATION_VARIABLES or key == "continue_final_message":
            raise UsageError(f"--var {key}: use the --{key.replace('_', '-')} option instead")
        variables[key] = value

    return now, options, variables, builtin_example


def _with_fallback_examples(options: Dict[str, Any], builtin_example: bool,
                            run: Callable[[Dict[str, Any]], Any]) -> Any:
    """``run(options)``; with the built-in example, a template that refuses its tool-calling
    conversation gets the simpler fallback examples instead (with a note saying so). Errors
    become one :class:`DataError` about the first attempt."""
    attempts = [("", options)]
    if builtin_example:
        attempts += [(label_text, {**options, "messages": messages, "tools": None})
                     for label_text, messages in _FALLBACK_EXAMPLES]
    first_error: Optional[BaseException] = None
    for attempt, (fallback, attempt_options) in enumerate(attempts):
        try:
            result = run(attempt_options)
        except (TemplateError, ValueError, TypeError) as exc:
            first_error = first_error or exc
            if attempt + 1 < len(attempts) and isinstance(exc, TemplateError) \
                    and not isinstance(exc, ChatTemplateValueError):
                continue
            raise DataError(_render_error_message(first_error)) from None
        if fallback:
            print(f"note: the template refused the built-in tool-calling example "
                  f"({_one_line(first_error)}); showing {fallback} instead", file=sys.stderr)
        return result
    raise AssertionError("unreachable: the last attempt returns or raises")


def _cmd_render(args: argparse.Namespace) -> int:
    now, options, variables, builtin_example = _conversation_options(args)
    config = _load_config(args.template)
    try:
        selected, source = select_template(config.templates, name=args.name,
                                           tools=options.get("tools"))
        label = config.origin if len(config.templates) == 1 else f"{config.origin} [{selected}]"
        chat_template = ChatTemplate(source, now=now, name=label,
                                     special_tokens=config.special_tokens)
    except TemplateSyntaxError as exc:
        raise DataError(f"syntax error: {exc}") from None
    except TemplateError as exc:
        raise DataError(_render_error_message(exc)) from None
    except ValueError as exc:
        raise DataError(str(exc)) from None

    # A bare template file has no tokenizer config: show the special tokens it reads as visible
    # placeholders rather than letting '' (or an undefined-value error) hide where they go.
    read = analyze_template(chat_template.template.ast).variables
    missing = [token for token in SPECIAL_TOKEN_NAMES
               if token in read and token not in config.special_tokens and token not in variables]
    if missing:
        for token in missing:
            variables[token] = f"<{token}>"
        example = missing[0]
        print(f"note: {', '.join(missing)} not set by {config.origin}; shown as "
              f"{', '.join(f'<{token}>' for token in missing)} (set with --var "
              f"'{example}=\"...\"')", file=sys.stderr)

    render_one = chat_template.render_with_provenance if args.provenance \
        else chat_template.render_with_spans
    result = _with_fallback_examples(
        options, builtin_example,
        lambda attempt_options: render_one(**attempt_options, **variables))

    if args.provenance:
        return _show_provenance(args, result, "generation" in chat_template.source)
    if args.json:
        payload = {"text": result.text,
                   "generation_spans": [list(span) for span in result.generation_spans]}
        _write(json.dumps(payload, ensure_ascii=False) + "\n", exact_escapes=True)
        return 0
    if args.spans:
        if "generation" not in chat_template.source:
            print("note: this template has no {% generation %} blocks, so there is nothing to "
                  "mark", file=sys.stderr)
        _write(_mark_spans(result.text, result.generation_spans))
    else:
        _write(result.text)
    return 0


def _show_provenance(args: argparse.Namespace, result: Any, has_generation: bool) -> int:
    """Print a provenance render (see provenance_display.py): ``--json`` the result's
    ``as_json()``; otherwise the text in colours or with plain markers, a legend on stderr."""
    from . import provenance_display as display

    if args.json:
        _write(json.dumps(result.as_json(), ensure_ascii=False) + "\n", exact_escapes=True)
        return 0
    if args.spans and not has_generation:
        print("note: this template has no {% generation %} blocks, so there is nothing to "
              "mark", file=sys.stderr)
    span_marks = (SPAN_OPEN, SPAN_CLOSE) if args.spans else None
    colour = display.use_colour(args.color, sys.stdout)
    terminal = colour or sys.stdout.isatty()  # show the prompt's control characters as symbols
    if colour:
        shown = display.colourize(result.text, result.runs, result.generation_spans,
                                  show_spans=args.spans)
    else:
        shown = display.mark(result.text, result.runs, result.generation_spans, span_marks)
        if terminal:
            shown = display.show_controls(shown)
    legend_colour = colour and (args.color == "always" or display.use_colour("auto", sys.stderr))
    for line in display.legend(result.text, result.runs, legend_colour, span_marks):
        print(line, file=sys.stderr)
    if not colour:
        clashes = display.marker_collisions(result.text, span_marks)
        if clashes:
            print(f"note: the prompt itself holds the marker character(s) "
                  f"{', '.join(f'{char} (U+{ord(char):04X})' for char in clashes)}, so the "
                  "markers are ambiguous here; --json gives the runs exactly", file=sys.stderr)
    controls = display.count_controls(result.text) if terminal else 0
    if controls:
        print(f"note: the prompt holds {controls:,} control character(s), shown as symbols "
              "(ESC as \u241b) so they cannot act on the terminal; --json gives the text "
              "exactly", file=sys.stderr)
    sys.stderr.flush()
    _write(shown)
    return 0


# ---- encode ----------------------------------------------------------------------------------
def _load_tokenizer(path: str) -> Any:
    from .tokens import TokenizersNotInstalledError, load_tokenizer

    if not os.path.exists(path):
        raise UsageError(f"no such file or directory: {path}")
    try:
        return load_tokenizer(path)
    except TokenizersNotInstalledError as exc:
        raise DataError(str(exc)) from None
    except (ValueError, TypeError, OSError) as exc:
        raise DataError(_first_line(exc)) from None


def _token_cell(tokenizer: Any, token_id: int) -> str:
    """Plain text in JSON quotes (escapes visible); a control token, or a piece that is not
    text on its own (one byte of a character), bare."""
    if token_id in tokenizer.added_tokens_decoder:
        return tokenizer.added_tokens_decoder[token_id].content
    text = tokenizer.backend.decode([token_id], skip_special_tokens=False)
    if not text or "\ufffd" in text:
        raw = tokenizer.backend.id_to_token(token_id)
        return raw if raw is not None else "?"
    return json.dumps(text, ensure_ascii=False)


def _cmd_encode(args: argparse.Namespace) -> int:
    now, options, variables, builtin_example = _conversation_options(args)
    tokenizer = _load_tokenizer(args.model)
    chat_template: Optional[str] = None
    if args.chat_template is not None:
        try:
            with open(args.chat_template, "rb") as handle:
                chat_template = handle.read().decode("utf-8")
        except FileNotFoundError:
            raise UsageError(f"--chat-template: no such file: {args.chat_template}") from None
        except OSError as exc:
            raise UsageError(f"--chat-template: cannot read {args.chat_template}: "
                             f"{exc.strerror or exc}") from None
        except UnicodeDecodeError as exc:
            raise DataError(f"--chat-template: {args.chat_template} is not UTF-8 "
                            f"({exc.reason})") from None
    elif args.name is not None:
        if args.name not in tokenizer.chat_templates:
            try:
                select_template(tokenizer.chat_templates, name=args.name)
            except ValueError as exc:
                raise DataError(str(exc)) from None
        chat_template = args.name
    elif not tokenizer.chat_templates:
        raise DataError(f"{args.model} has no chat template (no chat_template.jinja, no "
                        "chat_template in tokenizer_config.json): give one with --chat-template "
                        "FILE")
    try:
        template = tokenizer.get_chat_template(chat_template, options.get("tools"), now)
    except TemplateSyntaxError as exc:
        raise DataError(f"syntax error: {exc}") from None
    except (TemplateError, ValueError, TypeError) as exc:
        raise DataError(_render_error_message(exc)) from None
    if args.mask == "generation" and "generation" not in template.source:
        print("note: this template has no {% generation %} blocks, so the assistant mask is all "
              "zeros", file=sys.stderr)

    result = _with_fallback_examples(
        options, builtin_example,
        lambda attempt_options: tokenizer.apply_chat_template(
            chat_template=template, now=now,
            return_assistant_tokens_mask=_ENCODE_MODES[args.mask],
            sanitize_control_tokens=_ENCODE_MODES[args.sanitize], **{
                ("conversation" if key == "messages" else key): value
                for key, value in attempt_options.items()}, **variables))

    if args.json:
        _write(json.dumps(dict(result)) + "\n")
        return 0
    ids = result["input_ids"]
    mask = result.get("assistant_masks")
    width = max(len(str(max(ids, default=0))), 2)
    lines = [f"{'index':>5}  {'id':>{width}}  " + ("mask  " if mask is not None else "")
             + "token"]
    for index, token_id in enumerate(ids):
        cell = _token_cell(tokenizer, token_id)
        flag = f"{mask[index]:>4}  " if mask is not None else ""
        lines.append(f"{index:>5}  {token_id:>{width}}  {flag}{cell}")
    summary = f"{len(ids):,} tokens"
    if mask is not None:
        summary += f", {sum(mask):,} in the assistant mask"
    if args.sanitize:
        summary += "; control tokens from the conversation encoded as text"
    lines.append(summary)
    _write("\n".join(lines) + "\n")
    return 0


#: ``encode --mask/--sanitize`` values -> the apply_chat_template argument
_ENCODE_MODES = {None: False, "generation": True, "markers": True, "messages": "messages",
                 "provenance": "provenance"}


def _one_line(exc: Optional[BaseException]) -> str:
    if exc is None:
        return ""
    message = getattr(exc, "message", None) or str(exc)
    return str(message).splitlines()[0] if str(message) else type(exc).__name__


_MAX_QUOTED = 4000


def _render_error_message(exc: Optional[BaseException]) -> str:
    if isinstance(exc, ChatTemplateValueError):  # the request, not the template, is at fault
        text = str(exc)  # may quote the whole rendered chat: keep the start
        if len(text) > _MAX_QUOTED:
            text = f"{text[:_MAX_QUOTED]}... ({len(text) - _MAX_QUOTED:,} more characters)"
        return text
    if isinstance(exc, TemplateError):
        kind = type(exc).__name__
        return f"the template raised {kind}: {exc}"
    return f"{type(exc).__name__}: {exc}"


# ---- check -----------------------------------------------------------------------------------
def _check_one(name: str, source: str, label: str, config: ChatConfig
               ) -> Tuple[bool, Dict[str, Any]]:
    try:
        template = ChatTemplate(source, name=label)
    except TemplateSyntaxError as exc:
        return False, {"name": name, "ok": False, "error": str(exc),
                       "lineno": exc.lineno, "column": exc.column}
    except TemplateError as exc:
        return False, {"name": name, "ok": False, "error": str(exc),
                       "lineno": exc.lineno, "column": exc.column}
    report: Dict[str, Any] = dict(analyze_template(template.template.ast).as_dict())
    report["special_tokens"] = {key: value for key, value in config.special_tokens.items()
                                if key in report["variables"]}
    return True, {"name": name, "ok": True, **report}


def _format_report(entry: Dict[str, Any], config: ChatConfig) -> List[str]:
    lines = []
    variables = entry["variables"]
    conversation = [v for v in variables if v in _CONVERSATION_VARIABLES]
    tokens = [v for v in variables if v in SPECIAL_TOKEN_NAMES]
    others = [v for v in variables if v not in _CONVERSATION_VARIABLES
              and v not in SPECIAL_TOKEN_NAMES]

    def row(title: str, values: Sequence[str]) -> None:
        lines.append(f"  {title:<17}{', '.join(values) if values else '-'}")

    row("conversation:", conversation)
    described = []
    for token in tokens:
        value = config.special_tokens.get(token)
        described.append(f"{token}={value!r}" if value is not None else f"{token} (not set)")
    row("special tokens:", described)
    row("other variables:", others)
    row("message keys:", entry["message_keys"])
    row("statements:", entry["statements"])
    row("filters:", entry["filters"])
    row("tests:", entry["tests"])
    row("globals:", entry["globals"])
    row("methods:", entry["methods"])
    row("loop:", entry["loop_attributes"])
    if others:
        lines.append(f"  note: pass other variables with --var, e.g. --var {others[0]}=true")
    if "strftime_now" in entry["globals"]:
        lines.append("  note: the output depends on the current date (strftime_now); fix it "
                     "with --now")
    return lines


def _cmd_check(args: argparse.Namespace) -> int:
    config = _load_config(args.template)
    results = []
    all_ok = True
    for name in sorted(config.templates, key=lambda item: (item != "default", item)):
        label = config.origin if len(config.templates) == 1 else f"{config.origin} [{name}]"
        ok, entry = _check_one(name, config.templates[name], label, config)
        all_ok = all_ok and ok
        results.append(entry)

    if args.json:
        _write(json.dumps({"source": config.origin, "ok": all_ok, "templates": results},
                          ensure_ascii=False, indent=2) + "\n", exact_escapes=True)
        return 0 if all_ok else 1

    lines: List[str] = []
    for entry in results:
        title = config.origin if len(results) == 1 else f"{config.origin} [{entry['name']}]"
        if entry["ok"]:
            lines.append(f"ok: {title} parses")
            lines.extend(_format_report(entry, config))
        else:
            print(f"error: {title}: syntax error: {entry['error']}", file=sys.stderr)
    if lines:
        _write("\n".join(lines) + "\n")
    return 0 if all_ok else 1


# ---- inspect ---------------------------------------------------------------------------------
def _cmd_inspect(args: argparse.Namespace) -> int:
    from .capabilities import CAPABILITY_NAMES

    variables = dict(_parse_var(item) for item in args.var)
    config = _load_config(args.template)
    try:
        selected, source = select_template(config.templates, name=args.name)
        label = config.origin if len(config.templates) == 1 else f"{config.origin} [{selected}]"
        chat_template = ChatTemplate(source, name=label, special_tokens=config.special_tokens)
        caps = chat_template.capabilities(**variables)
    except TemplateSyntaxError as exc:
        raise DataError(f"syntax error: {exc}") from None
    except TemplateError as exc:
        raise DataError(_render_error_message(exc)) from None
    except (ValueError, TypeError) as exc:
        raise DataError(_one_line_of(exc)) from None
    if args.witness is not None:
        if args.witness not in CAPABILITY_NAMES:
            raise UsageError(f"--witness {args.witness}: no such capability; the names are "
                             f"{', '.join(CAPABILITY_NAMES)}")
        _write(json.dumps(caps.witness(args.witness), ensure_ascii=False, indent=1) + "\n",
               exact_escapes=True)
        return 0
    values = caps.to_dict()
    prefix = _prefix_report_of(chat_template, caps, variables)
    parsing = _response_parser_of(chat_template, variables)
    if args.json:
        payload = {"source": config.origin, "template": selected, "capabilities": values,
                   "witnesses": {name: {"rule": caps.witness(name)["rule"],
                                        "summary": caps.witness(name)["summary"]}
                                 for name in values},
                   "turns_extend": prefix["extends"],
                   "prefix_report": [boundary.as_dict() for boundary in prefix["report"]],
                   "response_parser": parsing["data"]}
        _write(json.dumps(payload, ensure_ascii=False, indent=1) + "\n", exact_escapes=True)
        return 0
    rows = {**values, "turns_extend": prefix["extends"], "response_parser": parsing["value"]}
    summaries = {"turns_extend": prefix["summary"], "response_parser": parsing["summary"]}
    width = max(map(len, rows))
    value_width = max(len(json.dumps(value)) for value in rows.values())
    lines = [f"{label}"]
    for name, value in rows.items():
        shown = json.dumps(value) if isinstance(value, str) else str(value).lower()
        summary = summaries[name] if name in summaries else caps.witness(name)["summary"]
        summary = summary.replace("\n", "\\n")
        lines.append(f"  {name:<{width}}  {shown:<{value_width}}  {summary}")
    others = sorted(set(config.templates) - {selected})
    if others:
        lines.append(f"  note: the config also has {', '.join(others)} (inspect it with --name)")
    _write("\n".join(lines) + "\n")
    return 0


def _response_parser_of(chat_template: ChatTemplate, variables: Dict[str, Any]
                        ) -> Dict[str, Any]:
    """The response parser derived in the default prompt context (one user message, a
    generation prompt): a value for the table ("derived", or "partial" when fields are
    declared unsupported, or "error"), its one-line summary and the JSON data."""
    try:
        parser = chat_template.response_parser(**variables)
    except TemplateError as exc:
        message = _one_line_of(exc)
        return {"value": "error", "summary": f"derivation raised: {message}",
                "data": {"error": message}}
    unsupported = parser.unsupported
    fields = ", ".join(sorted(parser.response_template.get("fields", {}))) or "nothing"
    summary = f"reads {fields} (minijinja-py parse shows the response_template)"
    if unsupported:
        summary += f"; not parsed: {', '.join(sorted(unsupported))}"
    return {"value": "partial" if unsupported else "derived", "summary": summary,
            "data": {"response_template": parser.response_template,
                     "unsupported": unsupported}}


def _prefix_report_of(chat_template: ChatTemplate, caps: Any,
                      variables: Dict[str, Any]) -> Dict[str, Any]:
    """Whether the built-in example conversation's turns extend each other (with reasoning in
    the assistant turns and the example tools where the template takes them): ``extends``,
    the report, and a one-line summary (the first break and its cause)."""
    messages = [dict(message) for message in EXAMPLE_MESSAGES]
    if caps.supports_reasoning:
        for number, message in enumerate(messages):
            if message["role"] == "assistant":
                message["reasoning_content"] = f"Reasoning of turn {number}."
    tools = EXAMPLE_TOOLS if caps.supports_tools else None
    report = chat_template.prefix_report(messages, tools=tools, **variables)
    for boundary in report:
        for kind, check in (("", boundary.plain), (" (the prompt asking for it)",
                                                    boundary.generation_prompt)):
            if check is None or check.extends:
                continue
            what = (f"render raised: {check.error.splitlines()[0]}" if check.error
                    else check.cause)
            return {"extends": False, "report": report,
                    "summary": f"example conversation, turn {boundary.turn}{kind}: {what}"}
    return {"extends": True, "report": report,
            "summary": f"every turn of the example conversation extends the previous one "
                       f"({len(report)} boundaries)"}


# ---- parse -----------------------------------------------------------------------------------
def _cmd_parse(args: argparse.Namespace) -> int:
    """``minijinja-py parse``: derive the response parser (parse_command.py has the
    arguments) and parse --text with it, or show its layout."""
    variables = dict(_parse_var(item) for item in args.var)
    messages = (None if args.messages is None
                else _expect_list(_read_json(args.messages, "--messages"), "--messages"))
    tools = (None if args.tools is None
             else _expect_list(_read_json(args.tools, "--tools"), "--tools"))
    text = None if args.text is None else _read_text(args.text, "--text")
    config = _load_config(args.template)
    try:
        selected, source = select_template(config.templates, name=args.name, tools=tools)
        label = config.origin if len(config.templates) == 1 else f"{config.origin} [{selected}]"
        parser = ChatTemplate(source, name=label, special_tokens=config.special_tokens
                              ).response_parser(messages, tools,
                                                args.add_generation_prompt, **variables)
        message = None if text is None else parser.parse(text, strict=args.strict)
    except TemplateSyntaxError as exc:
        raise DataError(f"syntax error: {exc}") from None
    except TemplateError as exc:
        raise DataError(_render_error_message(exc)) from None
    except (ValueError, TypeError) as exc:
        raise DataError(_one_line_of(exc)) from None
    if message is None:
        payload: Dict[str, Any] = {"response_template": parser.response_template,
                                   "unsupported": parser.unsupported}
    else:
        payload = {"message": message, "unsupported": parser.unsupported}
    if args.json or message is None:
        _write(json.dumps(payload, ensure_ascii=False, indent=1) + "\n", exact_escapes=True)
        return 0
    lines = [f"{key}: {json.dumps(value, ensure_ascii=False)}" for key, value in message.items()
             if key != "tool_calls"]
    for call in message.get("tool_calls", ()):
        function = call["function"]
        lines.append(f"tool call: {function['name']} "
                     f"{json.dumps(function['arguments'], ensure_ascii=False)}")
    for field_name, reason in parser.unsupported.items():
        lines.append(f"note: {field_name} not parsed: {reason}")
    _write("\n".join(lines) + "\n", exact_escapes=True)
    return 0


# ---- dataset ---------------------------------------------------------------------------------
def _cmd_dataset(args: argparse.Namespace) -> int:
    """``minijinja-py dataset``: --var and --now read as for render, the rest in
    minijinja_py/chat/dataset/command.py."""
    from .dataset.command import run_command

    now = _parse_now(args.now)
    variables: Dict[str, Any] = {}
    for item in args.var:
        key, value = _parse_var(item)
        if key in ("messages", "tools", "documents"):
            raise UsageError(f"--var {key}: the rows' {key} come from --{key}-column")
        if key == "add_generation_prompt":
            raise UsageError("--var add_generation_prompt: use the --add-generation-prompt "
                             "option instead")
        variables[key] = value
    return run_command(args, variables, now)


# ---- entry point -----------------------------------------------------------------------------
def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the command line with ``argv`` (default: ``sys.argv[1:]``); returns the exit code.

    Never raises (but SystemExit from nowhere else) and never prints a traceback: whatever
    escapes the specific handlers becomes one ``minijinja-py: error: ...`` line and exit code 1.
    """
    try:
        return _main(argv)
    except KeyboardInterrupt:
        return 130
    except BaseException as exc:  # the last-resort net
        if isinstance(exc, SystemExit):
            raise
        try:
            print(f"minijinja-py: error: unexpected {type(exc).__name__}: "
                  f"{_one_line_of(exc)}", file=sys.stderr)
        except Exception:  # pragma: no cover - stderr itself is gone
            pass
        return 1


def _one_line_of(exc: BaseException) -> str:
    try:
        text = str(exc)
    except Exception:  # pragma: no cover - a broken __str__
        return "(no message)"
    lines = text.strip().splitlines()
    line = lines[0] if lines else "(no message)"
    return line if len(line) <= 500 else line[:497] + "..."


def _main(argv: Optional[Sequence[str]]) -> int:
    for stream in (sys.stdout, sys.stderr):
        # help and messages may hold non-ASCII text (⟦, names from templates): never let a
        # narrow terminal encoding turn them into a traceback
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            try:
                reconfigure(errors="backslashreplace")
            except (ValueError, OSError):
                pass
    parser = _build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse: --help/--version (0) or a usage error (2)
        return int(exc.code or 0)
    try:
        if args.command == "render":
            return _cmd_render(args)
        if args.command == "encode":
            return _cmd_encode(args)
        if args.command == "dataset":
            return _cmd_dataset(args)
        if args.command == "inspect":
            return _cmd_inspect(args)
        if args.command == "parse":
            return _cmd_parse(args)
        return _cmd_check(args)
    except UsageError as exc:
        print(f"minijinja-py: error: {exc}", file=sys.stderr)
        return 2
    except DataError as exc:
        print(f"minijinja-py: error: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        try:
            sys.stdout = open(os.devnull, "w")
        except OSError:
            pass
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
