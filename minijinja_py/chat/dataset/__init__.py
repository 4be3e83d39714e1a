"""Chat datasets at scale: conversations in (JSON Lines, JSON, Parquet), prompts or token ids
and masks out.

- :class:`ChatBatchProcessor` (:mod:`.batch`): a picklable callable for column batches, for
  ``datasets.Dataset.map(processor, batched=True, num_proc=N)`` and Ray Data's
  ``map_batches``; failed rows keep their place with an ``error``.
- :func:`run_dataset` (:mod:`.run`): the ``minijinja-py dataset`` engine (worker processes,
  ordered output, checkpoint and resume, progress); :mod:`.io` reads and writes the files,
  :mod:`.work` is what a worker does with a chunk of rows, :mod:`.command` the command line.

Parquet needs the optional ``parquet`` extra (pyarrow), token ids the ``tokenizers`` extra; both
are imported only when used.
"""

from .batch import (ERROR_COLUMN, MASK_COLUMN, TEXT_COLUMN, TOKEN_COLUMNS, ChatBatchProcessor,
                    MalformedRowError, describe_error, error_details)

__all__ = ["ChatBatchProcessor", "MalformedRowError", "describe_error", "error_details",
           "ERROR_COLUMN", "MASK_COLUMN", "TEXT_COLUMN", "TOKEN_COLUMNS", "RunConfig",
           "RunSummary", "run_dataset", "DatasetError", "DatasetUsageError", "RowFailedError",
           "ParquetNotInstalledError"]

_LAZY = {"RunConfig": "run", "RunSummary": "run", "run_dataset": "run", "DatasetError": "run",
         "DatasetUsageError": "run", "RowFailedError": "run", "ParquetNotInstalledError": "io"}


def __getattr__(name: str):  # the engine (multiprocessing, concurrent.futures) on first use
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value
