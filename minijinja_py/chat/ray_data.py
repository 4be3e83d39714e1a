"""Ray Data: render or encode a dataset of conversations on a Ray cluster.

:class:`ChatTemplateBatches` is a callable class for ``Dataset.map_batches``: Ray builds one
per worker (an actor), so each worker compiles the template (and loads the tokenizer) once and
keeps it for every batch it gets. Each call converts Ray's batch (a ``pyarrow.Table``, a dict
of numpy arrays or a pandas ``DataFrame``) into Python lists for
:class:`~minijinja_py.chat.dataset.ChatBatchProcessor`, which does the rendering, and returns
a ``pyarrow.Table``: every input column as it came, plus ``text`` (or ``input_ids``,
``attention_mask`` and, with ``mask=True``, ``assistant_masks``) and ``error``.

A row that cannot be rendered keeps its place: its output columns are null and ``error`` holds
the message (``None`` on rows that rendered). Nothing is dropped; count or split with
``ds.filter(expr=col("error").is_not_null())`` (``from ray.data.expressions import col``).

The output columns always have the same Arrow types, also in a batch where every row failed
(``text``/``error``: string, ``input_ids``: list<int32>, masks: list<int8>), so blocks
concatenate and ``write_parquet`` writes one schema.

:func:`render_dataset` is the one-call form. Ray itself is an optional extra
(``pip install ".[ray]"`` from a checkout), imported only by :func:`render_dataset`;
``ChatTemplateBatches`` needs only ``pyarrow`` (which Ray Data installs).
"""

from __future__ import annotations

import collections.abc
from typing import Any, Dict, List, Mapping, Optional, Tuple, Union

from .extras import install_hint

__all__ = ["ChatTemplateBatches", "render_dataset", "plain_python", "RayNotInstalledError",
           "RAY_INSTALL_HINT", "DEFAULT_BATCH_SIZE", "DEFAULT_ROWS_PER_BLOCK", "OUTPUT_TYPES"]

RAY_INSTALL_HINT = install_hint("ray")

#: Rows per batch that :func:`render_dataset` asks for. Large enough that the per-batch cost
#: (Arrow conversions, one tokenizer call) is small next to rendering, small enough that a
#: batch of long conversations stays well inside an actor's memory.
DEFAULT_BATCH_SIZE = 256

#: Rows per block :func:`render_dataset` splits the dataset into before rendering. Ray gives
#: an actor one block per task, and a reader makes one block of a whole Parquet file (up to
#: 128 MiB): without the split, one file keeps one actor busy and the others idle.
DEFAULT_ROWS_PER_BLOCK = 2048

#: Arrow type of each output column, by name (spelled out: pyarrow is imported only when a
#: batch arrives). Fixed so that a batch in which every row failed (all nulls) has the same
#: schema as any other; the types of ``minijinja-py dataset``'s Parquet output (ids fit in 32
#: bits, masks are 0/1).
OUTPUT_TYPES: Dict[str, str] = {
    "text": "string",
    "error": "string",
    "input_ids": "list<int32>",
    "attention_mask": "list<int8>",
    "assistant_masks": "list<int8>",
}

_ERROR_COLUMN = "error"


class RayNotInstalledError(ImportError):
    """Ray Data was asked for, but the optional ``ray`` extra is not installed."""


def _import_ray() -> Any:
    try:
        import ray
        import ray.data
    except ImportError as exc:
        raise RayNotInstalledError(
            f"running on Ray needs the optional 'ray' package; install it with: "
            f"{RAY_INSTALL_HINT}") from exc
    return ray


def _import_pyarrow() -> Any:
    try:
        import pyarrow
    except ImportError as exc:
        raise RayNotInstalledError(
            f"Ray Data batches need 'pyarrow'; install it with: {RAY_INSTALL_HINT}") from exc
    return pyarrow


def _arrow_type(pa: Any, spelling: str) -> Any:
    kinds = {"string": pa.string(), "int32": pa.int32(), "int8": pa.int8()}
    if spelling.startswith("list<"):
        return pa.list_(kinds[spelling[5:-1]])
    return kinds[spelling]


# ---- batch -> Python --------------------------------------------------------------------------
def _is_numpy(value: Any) -> bool:
    module = type(value).__module__ or ""
    return module.split(".")[0] == "numpy"


def plain_python(value: Any) -> Any:
    """``value`` with every numpy array and numpy scalar inside it (at any depth, inside dicts
    and lists) replaced by Python lists and values, tuples by lists: what Ray's numpy and
    pandas batches hold for list and struct columns (a list<struct> cell is an object array of
    dicts whose list fields are arrays again)."""
    if value is None or type(value) in (str, int, float, bool):
        return value
    if isinstance(value, Mapping):
        return {key: plain_python(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain_python(item) for item in value]
    if _is_numpy(value) and hasattr(value, "tolist"):
        return plain_python(value.tolist())
    return value


def _arrow_column_to_python(column: Any) -> List[Any]:
    try:  # Arrow maps (map<string, ...>) become dicts, not lists of (key, value) pairs
        return column.to_pylist(maps_as_pydicts="lossy")
    except TypeError:  # pyarrow < 13
        return column.to_pylist()


def _batch_kind(batch: Any, pa: Any) -> str:
    if isinstance(batch, pa.Table):
        return "arrow"
    if (type(batch).__module__ or "").startswith("pandas") and hasattr(batch, "columns"):
        return "pandas"
    if isinstance(batch, collections.abc.Mapping):
        return "numpy"
    raise TypeError("ChatTemplateBatches takes Ray batches: a pyarrow.Table, a dict of numpy "
                    f"arrays or a pandas DataFrame, not {type(batch).__name__}")


def _column_names(batch: Any, kind: str) -> List[str]:
    if kind == "arrow":
        return list(batch.column_names)
    if kind == "pandas":
        return [str(name) for name in batch.columns]
    return list(batch.keys())


def _num_rows(batch: Any, kind: str) -> int:
    if kind == "arrow":
        return batch.num_rows
    if kind == "pandas":
        return len(batch)
    return len(next(iter(batch.values()))) if len(batch) else 0


def _python_column(batch: Any, kind: str, name: str) -> List[Any]:
    if kind == "arrow":
        return _arrow_column_to_python(batch.column(name))
    if kind == "pandas":
        return [plain_python(item) for item in batch[name].tolist()]
    return [plain_python(item) for item in batch[name]]


def _passthrough_table(batch: Any, kind: str, pa: Any) -> Any:
    """The input columns as an Arrow table, converted the way Ray converts a returned batch."""
    if kind == "arrow":
        return batch
    try:
        from ray.data.block import BlockAccessor
    except ImportError:  # no Ray in this process: plain pyarrow conversions
        BlockAccessor = None
    if kind == "pandas":
        if BlockAccessor is not None:  # Ray's own (knows its tensor extension types)
            return BlockAccessor.for_block(batch).to_arrow()
        return pa.Table.from_pandas(batch, preserve_index=False)
    if BlockAccessor is not None:
        table = BlockAccessor.batch_to_block(dict(batch))
        if isinstance(table, pa.Table):
            return table
        return BlockAccessor.for_block(table).to_arrow()  # Ray fell back to pandas
    return pa.table({name: pa.array([plain_python(v) for v in values])
                     for name, values in batch.items()})


# ---- the callable class -----------------------------------------------------------------------
class ChatTemplateBatches:
    """``ds.map_batches(ChatTemplateBatches, fn_constructor_kwargs={...}, ...)``.

    ``fn_constructor_kwargs`` are :class:`~minijinja_py.chat.dataset.ChatBatchProcessor`'s
    arguments: ``template`` (a template source, a ``.jinja`` file, a model folder or
    ``tokenizer_config.json``: a path must be readable on every node), and the keyword options
    (``tokenizer``, ``tokens``, ``mask``, ``add_generation_prompt``, ``messages_column``,
    ``tools_column``, ``documents_column``, ``variables_column``, ``variables``, ``sanitize``,
    ``max_length``, ``now``, ``name``). Ray runs the constructor once per actor: it compiles the
    template and loads the tokenizer there (a template that does not compile or a missing
    folder fails the actor, not every row), and every batch the actor gets reuses them.

    Any ``batch_format`` works; ``"pyarrow"`` is the one to use: cells arrive exactly as
    stored (``"numpy"``, Ray's default, turns a null in an integer column into ``NaN`` before
    this class sees it). Only the conversation columns (messages, tools, documents, variables)
    are converted to Python; the result is always a ``pyarrow.Table``: the input columns, then
    the output columns with the fixed types of :data:`OUTPUT_TYPES`.
    """

    def __init__(self, template: Any, **options: Any) -> None:
        from .dataset import ChatBatchProcessor
        if options.get("errors", "column") != "column":
            raise ValueError("ChatTemplateBatches keeps failed rows (errors='column'); with "
                             "errors='raise' one bad row would fail the whole Ray job")
        self._processor = ChatBatchProcessor(template, **options).load()
        self._input_columns = list(self._processor.conversation_columns)
        self._output_columns = list(self._processor.output_columns) + [_ERROR_COLUMN]

    def __call__(self, batch: Any) -> Any:
        pa = _import_pyarrow()
        kind = _batch_kind(batch, pa)
        names = _column_names(batch, kind)
        clashes = [name for name in self._output_columns if name in names]
        if clashes:
            raise ValueError(f"the dataset already has column(s) {', '.join(map(repr, clashes))}, "
                             "which rendering writes: rename or drop them first")
        rows = _num_rows(batch, kind)
        present = [name for name in self._input_columns if name in names]
        columns = {name: _python_column(batch, kind, name) for name in present}
        if rows:
            produced = self._processor(columns)
            outputs = {name: produced[name] for name in self._output_columns}
        else:  # nothing to render; the output columns are still there, typed
            outputs = {name: [] for name in self._output_columns}
        table = _passthrough_table(batch, kind, pa)
        for name, values in outputs.items():
            if len(values) != rows:
                raise RuntimeError(f"the batch processor returned {len(values)} values for "
                                   f"column {name!r} from a batch of {rows} rows")
            spelling = OUTPUT_TYPES.get(name)
            array = pa.array(values, type=_arrow_type(pa, spelling) if spelling else None)
            table = table.append_column(name, array)
        return table


def render_dataset(ds: Any, template: Any, *,
                   concurrency: Union[None, int, Tuple[int, int]] = None,
                   batch_size: Optional[int] = DEFAULT_BATCH_SIZE,
                   rows_per_block: Optional[int] = DEFAULT_ROWS_PER_BLOCK,
                   num_cpus: Optional[float] = None,
                   map_batches_kwargs: Optional[Mapping[str, Any]] = None,
                   **options: Any) -> Any:
    """``ds`` with every row rendered (or encoded): a lazy ``ray.data.Dataset``.

    ``options`` are :class:`~minijinja_py.chat.dataset.ChatBatchProcessor`'s
    (``tokenizer=``, ``tokens=``, ``mask=``, ``variables_column=``...). ``concurrency`` is the
    number of actors (each compiles the template once): an int for a fixed pool, a
    ``(min, max)`` pair for an autoscaling one, ``None`` for Ray's default (from one actor up
    to what the cluster has free).

    ``rows_per_block``: the dataset is first cut into blocks of this many rows
    (``Dataset.repartition(target_num_rows_per_block=...)``, streaming, no shuffle), so that
    every actor gets work however the input is laid out (a reader makes one block of a whole
    Parquet file); ``None`` keeps the blocks as they come.

    ``num_cpus`` is what each actor reserves. By default 1, except that a pool that would
    reserve every CPU of the running cluster gets a share of all CPUs but one: Ray Data's read
    tasks need a CPU too, and with none left the job waits forever (``concurrency=2`` on a
    two-CPU machine: each actor reserves 0.5; the actors still use a whole core each).

    ``map_batches_kwargs`` go to ``Dataset.map_batches`` as they are (``runtime_env``,
    ``memory``, ``resources``...). The options are checked here, before anything runs; the
    template and tokenizer are read by the actors, so paths must exist on the worker nodes.
    """
    ray = _import_ray()
    from .dataset import ChatBatchProcessor
    if options.get("errors", "column") != "column":
        raise ValueError("render_dataset keeps failed rows (errors='column'); with "
                         "errors='raise' one bad row would fail the whole Ray job")
    ChatBatchProcessor(template, **options)  # a bad option fails here, not in every actor
    strategy = ray.data.ActorPoolStrategy
    if concurrency is None:
        compute, largest = strategy(), None
    elif isinstance(concurrency, int):
        compute, largest = strategy(size=concurrency), concurrency
    else:
        low, high = concurrency
        compute, largest = strategy(min_size=low, max_size=high), high
    kwargs: Dict[str, Any] = {"batch_size": batch_size, "batch_format": "pyarrow",
                              "compute": compute, "num_cpus": _actor_cpus(ray, num_cpus, largest),
                              "fn_constructor_args": (template,),
                              "fn_constructor_kwargs": dict(options)}
    kwargs.update(map_batches_kwargs or {})
    if rows_per_block is not None:
        ds = ds.repartition(target_num_rows_per_block=rows_per_block)
    return ds.map_batches(ChatTemplateBatches, **kwargs)


def _actor_cpus(ray: Any, num_cpus: Optional[float], actors: Optional[int]) -> float:
    if num_cpus is not None:
        return num_cpus
    if actors is None or not ray.is_initialized():
        return 1
    total = ray.cluster_resources().get("CPU", 0)
    if actors <= total - 1:
        return 1
    return max(total - 1, 0) / actors
