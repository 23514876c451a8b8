"""Struct statistics: ``add.stats_parsed`` of Parquet checkpoints, for files whose JSON ``stats`` are absent.

Spec: "Checkpoint Format" (``stats_parsed``, written when ``delta.checkpoint.writeStatsAsStruct`` is on;
with ``delta.checkpoint.writeStatsAsJson=false`` it is the only copy of a checkpointed file's statistics).
Replay keeps the file list's ``stats`` JSON only, so file skipping reads the typed struct from the
checkpoint itself, two leaf columns (``add.path`` and ``add.stats_parsed``), and lines it up with the
snapshot's files by path, only when some live file has no JSON statistics. V2 checkpoints' sidecars are
not read here: their files are simply not skipped by statistics.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..base.arrow_utils import decode_uri_paths

if TYPE_CHECKING:
    from ..snapshot.snapshot import Snapshot


def checkpoint_stats(snapshot: Snapshot, files: pa.Table) -> pa.StructArray | None:
    """The checkpoint's ``stats_parsed`` for each row of ``files`` (null where it has none), or ``None``
    when every file has JSON statistics or the checkpoint holds no struct statistics."""
    checkpoint = snapshot.segment.checkpoint
    if checkpoint is None or files.num_rows == 0 or files.column("stats").null_count == 0:
        return None
    paths, stats = [], []
    for meta in checkpoint.files:
        if not meta.name.endswith(".parquet"):
            continue
        store = snapshot.store
        with store.open_input_file(store.log_file(meta.name)) as fh:
            pf = pq.ParquetFile(fh)
            add = pf.schema_arrow.field("add").type if "add" in pf.schema_arrow.names else None
            if add is None or add.get_field_index("stats_parsed") < 0:
                continue
            column = pf.read(columns=["add.path", "add.stats_parsed"]).column("add").combine_chunks()
        present = column.is_valid()
        paths.append(decode_uri_paths(pc.filter(column.field("path"), present)))
        stats.append(pc.filter(column.field("stats_parsed"), present))
    if not stats or len({s.type for s in stats}) != 1:
        return None
    where = pc.index_in(files.column("path").combine_chunks(), value_set=pa.concat_arrays(paths))
    return pa.concat_arrays(stats).take(where)
