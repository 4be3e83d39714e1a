"""``minijinja-py dataset``: its options (added to the command line's parser by
:mod:`minijinja_py.chat.cli`) and the command itself, a thin layer over
:func:`~.run.run_dataset`. Kept apart from the engine so that building the parser imports
nothing heavy."""

from __future__ import annotations

import argparse
import datetime
import os
import sys
from typing import Any, Dict, Optional

__all__ = ["add_dataset_parser", "run_command"]


def add_dataset_parser(commands: Any) -> argparse.ArgumentParser:
    """Add the ``dataset`` subcommand to ``commands`` (an argparse subparsers object)."""
    parser = commands.add_parser(
        "dataset", help="render or encode every conversation of a JSONL/JSON/Parquet dataset",
        description=(
            "Render the conversation of every row of INPUT with the chat template of "
            "TEMPLATE_OR_MODEL_DIR (with --tokens: token ids and masks from the model folder's "
            "tokenizer) and write each row to OUTPUT with its other columns unchanged plus "
            "'text' (or 'input_ids', 'attention_mask' and with --mask 'assistant_masks'). "
            "Runs on every core, in input order, resumable: after a kill, the same command "
            "goes on from the last finished batch. Rows that fail are not written to OUTPUT; "
            "each is a record in the errors file. Exit code 0 when every row was written, 3 "
            "when some rows failed, 1 when the run could not finish, 2 for a usage error."),
        epilog=(
            "INPUT is a .jsonl/.ndjson file (.gz too), a .json file (an array of rows, or JSON "
            "Lines), a .parquet file, a folder (searched recursively) or a glob ('data/*.jsonl'"
            ", quoted). OUTPUT is .jsonl or .parquet (or --format)."))
    parser.add_argument("template", metavar="TEMPLATE_OR_MODEL_DIR",
                        help="model folder, tokenizer_config.json, .jinja or .gguf file")
    parser.add_argument("input", metavar="INPUT", help="file, folder or glob of rows")
    parser.add_argument("output", metavar="OUTPUT", help="the output file (.jsonl or .parquet)")

    what = parser.add_argument_group("what to make")
    what.add_argument("--tokens", action="store_true",
                      help="token ids and attention masks from the model folder's tokenizer "
                           "instead of text (needs the tokenizers extra)")
    what.add_argument("--tokenizer", metavar="MODEL_DIR",
                      help="encode with this model folder's tokenizer (implies --tokens; the "
                           "template still comes from TEMPLATE_OR_MODEL_DIR)")
    what.add_argument("--name", metavar="NAME",
                      help="which named template to use (default: tool_use for rows with "
                           "tools when there is one, else default)")
    what.add_argument("--add-generation-prompt", action="store_true",
                      help="end every prompt with the header of a new assistant message")
    what.add_argument("--mask", nargs="?", const="generation", choices=("generation", "messages"),
                      help="add assistant_masks: of the {%% generation %%} blocks (default), or "
                           "'messages' for templates without the tag (implies --tokens)")
    what.add_argument("--sanitize", nargs="?", const="markers", choices=("markers", "provenance"),
                      help="encode control tokens from the rows as plain text, as transformers "
                           "does (default) or by 'provenance' (implies --tokens)")
    what.add_argument("--max-length", type=int, metavar="N",
                      help="truncate the token ids to N (implies --tokens)")
    what.add_argument("--var", action="append", default=[], metavar="NAME=JSON",
                      help="a template variable for every row, its value in JSON (repeatable)")
    what.add_argument("--now", metavar="ISO",
                      help="the date and time strftime_now() formats (default: the run's start, "
                           "kept by a resumed run)")

    columns = parser.add_argument_group("columns")
    columns.add_argument("--messages-column", default="messages", metavar="NAME",
                         help="the conversation column (default: messages)")
    columns.add_argument("--tools-column", default="tools", metavar="NAME",
                         help="the tools column, used when present (default: tools)")
    columns.add_argument("--documents-column", default="documents", metavar="NAME",
                         help="the documents column, used when present (default: documents)")
    columns.add_argument("--variables-column", metavar="NAME",
                         help="a column holding an object of template variables per row")
    columns.add_argument("--keep-conversation", action="store_true",
                         help="also copy the conversation columns (messages, tools, documents, "
                              "variables) to OUTPUT")
    columns.add_argument("--key-column", action="append", metavar="NAME", dest="key_columns",
                         help="a column that identifies a row in the errors file (repeatable; "
                              "default: id)")

    files = parser.add_argument_group("files and running")
    files.add_argument("--format", choices=("jsonl", "parquet"), dest="output_format",
                       help="the output format (default: by OUTPUT's suffix)")
    files.add_argument("--input-format", choices=("jsonl", "json", "parquet"),
                       help="the input format (default: by each file's suffix)")
    files.add_argument("--errors", metavar="FILE", dest="errors_path",
                       help="where failed rows are recorded (default: OUTPUT.errors.jsonl)")
    files.add_argument("--workers", type=int, metavar="N",
                       help="worker processes (default: one per core)")
    files.add_argument("--batch-size", type=int, default=256, metavar="N",
                       help="rows per batch: the unit of work and of checkpoints (default: 256)")
    files.add_argument("--fail-fast", action="store_true",
                       help="stop at the first row that fails (exit code 1)")
    files.add_argument("--overwrite", action="store_true",
                       help="start afresh: replace OUTPUT and drop a checkpoint")
    files.add_argument("--progress", choices=("auto", "bar", "lines", "none"), default="auto",
                       help="a bar on a terminal, plain lines otherwise (default: auto)")
    files.add_argument("--progress-interval", type=float, default=10.0, metavar="SECONDS",
                       help="seconds between plain progress lines (default: 10)")
    files.add_argument("--quiet", "-q", action="store_true",
                       help="no progress, only the summary")
    return parser


def run_command(args: argparse.Namespace, variables: Dict[str, Any],
                now: Optional[datetime.datetime]) -> int:
    """Run ``minijinja-py dataset`` with parsed arguments (``--var`` and ``--now`` already
    read); prints the summary and returns the exit code."""
    from .run import DatasetError, DatasetUsageError, RunConfig, run_dataset

    tokens = bool(args.tokens or args.tokenizer or args.mask or args.sanitize
                  or args.max_length is not None)
    if tokens and args.tokenizer is None and not os.path.isdir(args.template):
        print(f"minijinja-py: error: token ids need a model folder with tokenizer.json: "
              f"{args.template} is not a folder; add --tokenizer MODEL_DIR", file=sys.stderr)
        return 2
    config = RunConfig(
        template=args.template, input=args.input, output=args.output,
        output_format=args.output_format, input_format=args.input_format, tokens=tokens,
        tokenizer=args.tokenizer, name=args.name, messages_column=args.messages_column,
        tools_column=args.tools_column, documents_column=args.documents_column,
        variables_column=args.variables_column, variables=variables,
        add_generation_prompt=args.add_generation_prompt, mask=args.mask or False,
        sanitize=args.sanitize or False, max_length=args.max_length, now=now,
        keep_conversation=args.keep_conversation,
        key_columns=tuple(args.key_columns) if args.key_columns else ("id",),
        errors_path=args.errors_path, workers=args.workers, batch_size=args.batch_size,
        fail_fast=args.fail_fast, overwrite=args.overwrite,
        progress="none" if args.quiet else args.progress,
        progress_interval=args.progress_interval)
    try:
        summary = run_dataset(config)
    except DatasetUsageError as exc:
        print(f"minijinja-py: error: {exc}", file=sys.stderr)
        return 2
    except DatasetError as exc:
        print(f"minijinja-py: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("minijinja-py dataset: interrupted; run the same command again to resume",
              file=sys.stderr)
        return 130
    print(summary.text(), file=sys.stderr)
    return summary.exit_code
