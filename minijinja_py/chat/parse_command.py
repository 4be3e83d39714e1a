"""The arguments of ``minijinja-py parse`` (cli.py runs it): the response parser derived from a
chat template, applied to what a model generated, or shown as transformers' response_template."""

from __future__ import annotations

import argparse

__all__ = ["add_parse_parser"]


def add_parse_parser(commands: "argparse._SubParsersAction") -> None:
    """Add the ``parse`` command to the ``minijinja-py`` parser's ``commands``."""
    parse = commands.add_parser(
        "parse", help="parse what a model generated back into an assistant message, with the "
                      "parser derived from the chat template",
        description="Derive the parser of TEMPLATE_OR_CONFIG's assistant turn (from "
                    "provenance renders of probe messages: no table of model families) in the "
                    "prompt context of --messages (default: one user message) with a "
                    "generation prompt, and parse the model's output given by --text into "
                    "{role, content, reasoning_content, tool_calls}. Without --text, print "
                    "the derived layout as transformers' response_template and the fields "
                    "the parser could not witness.")
    parse.add_argument("template", metavar="TEMPLATE_OR_CONFIG",
                       help=".jinja file, tokenizer_config.json, model directory or .gguf file")
    parse.add_argument("--text", metavar="FILE",
                       help="the model's output, a UTF-8 text file ('-' for stdin)")
    parse.add_argument("--messages", metavar="FILE",
                       help="JSON file: the conversation the model answered (a list of "
                            "messages), the prompt context the parser is derived in")
    parse.add_argument("--tools", metavar="FILE",
                       help="JSON file with a list of tool schemas (arguments are typed by "
                            "them)")
    parse.add_argument("--add-generation-prompt", action=argparse.BooleanOptionalAction,
                       default=True, help="the prompt ended with a generation prompt "
                                          "(default: on)")
    parse.add_argument("--var", action="append", default=[], metavar="KEY=JSON",
                       help="a template variable (repeatable): --var enable_thinking=false")
    parse.add_argument("--name", metavar="NAME",
                       help="which named template of the config to use (e.g. tool_use)")
    parse.add_argument("--strict", action="store_true",
                       help="fail on text that does not fit the layout (default: it stays in "
                            "content)")
    parse.add_argument("--json", action="store_true",
                       help='print {"message", "unsupported"} (with --text) or '
                            '{"response_template", "unsupported"} as JSON')
