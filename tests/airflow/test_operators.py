"""The create and maintenance operators on real tables, checked against the table and against deltalake.

Most tests call ``execute`` directly (the operators use nothing from the context); one DAG runs every
operator through ``dag.test()`` with Jinja in each templated field.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import time
from pathlib import Path

import deltalake
import pyarrow as pa
import pytest

from airflow_provider_delta.log import DeltaTable
from airflow_provider_delta.log.maintenance.vacuum import RetentionTooShortError
from airflow_provider_delta.operators.create import DeltaCreateTableOperator, delta_schema
from airflow_provider_delta.operators.maintenance import (
    DeltaCheckpointOperator,
    DeltaLogCleanupOperator,
    DeltaVacuumOperator,
    _progress_logger,
)

SCHEMA = [("id", "long", False), ("name", "string"), ("amount", "decimal(10,2)"), ("day", "date")]
_DAY_S = 86_400


def _create(path: Path, **kwargs) -> int:
    args = {"task_id": "create", "table_uri": str(path), "schema": SCHEMA, "partition_by": ["day"]}
    return DeltaCreateTableOperator(**{**args, **kwargs}).execute({})


def _rows(start: int, n: int) -> pa.Table:
    return pa.table(
        {"id": pa.array(range(start, start + n), pa.int64()), "part": [f"p{i % 2}" for i in range(n)]}
    )


# -- DeltaCreateTableOperator ----------------------------------------------------------------------------
def test_create_table_deltalake_reads_it(tmp_path: Path):
    config = {"delta.logRetentionDuration": "interval 3 days"}
    assert _create(tmp_path / "t", configuration=config) == 0
    theirs = deltalake.DeltaTable(str(tmp_path / "t"))
    assert theirs.version() == 0
    assert theirs.metadata().partition_columns == ["day"]
    assert theirs.metadata().configuration == config
    fields = json.loads(theirs.schema().to_json())["fields"]
    assert [(f["name"], f["type"], f["nullable"]) for f in fields] == [
        ("id", "long", False),
        ("name", "string", True),
        ("amount", "decimal(10,2)", True),
        ("day", "date", True),
    ]


@pytest.mark.parametrize(
    "form",
    [
        pa.schema([pa.field("id", pa.int64(), False), ("name", pa.string())]),
        {"type": "struct", "fields": [{"name": "id", "type": "long", "nullable": False, "metadata": {}},
                                      {"name": "name", "type": "string", "nullable": True, "metadata": {}}]},
        '{"type": "struct", "fields": [{"name": "id", "type": "long", "nullable": false, "metadata": {}},'
        ' {"name": "name", "type": "string", "nullable": true, "metadata": {}}]}',
        [("id", "long", False), ("name", "string")],
    ],
    ids=["pyarrow", "dict", "json", "tuples"],
)  # fmt: skip
def test_schema_forms_agree(form):
    schema = delta_schema(form)
    assert [(f["name"], f["type"], f["nullable"]) for f in schema["fields"]] == [
        ("id", "long", False),
        ("name", "string", True),
    ]


def test_existing_table_of_the_same_shape_is_accepted(tmp_path: Path):
    data = pa.table({"id": pa.array([1, 2], pa.int64()), "day": ["a", "b"]})
    deltalake.write_deltalake(str(tmp_path), data, partition_by=["day"])
    deltalake.write_deltalake(str(tmp_path), data, partition_by=["day"], mode="append")
    version = _create(tmp_path, schema=[("id", "long"), ("day", "string")])
    assert version == 1  # the latest version; nothing committed
    assert deltalake.DeltaTable(str(tmp_path)).version() == 1


@pytest.mark.parametrize(
    ("schema", "partition_by", "message"),
    [
        ([("id", "string"), ("day", "string")], ["day"], "column 'id' is long in the table, string asked"),
        (
            [("id", "long", False), ("day", "string")],
            ["day"],
            "column 'id' is long in the table, long NOT NULL",
        ),
        ([("id", "long"), ("day", "string"), ("x", "long")], ["day"], "column(s) ['x'] are not in the table"),
        ([("id", "long")], [], "the table has column(s) ['day']"),
        ([("id", "long"), ("day", "string")], [], "partitioned by ['day'], not []"),
    ],
    ids=["type", "nullability", "missing", "extra", "partitioning"],
)
def test_existing_table_that_differs_is_named(tmp_path: Path, schema, partition_by, message):
    data = pa.table({"id": pa.array([1, 2], pa.int64()), "day": ["a", "b"]})
    deltalake.write_deltalake(str(tmp_path), data, partition_by=["day"])
    with pytest.raises(ValueError, match="exists but differs") as err:
        _create(tmp_path, schema=schema, partition_by=partition_by)
    assert message in str(err.value)
    assert deltalake.DeltaTable(str(tmp_path)).version() == 0


def test_exist_ok_false_refuses_an_existing_table(tmp_path: Path):
    _create(tmp_path)
    with pytest.raises(FileExistsError):
        _create(tmp_path, exist_ok=False)


def test_a_create_that_loses_the_race_checks_the_winner(tmp_path: Path, monkeypatch):
    _create(tmp_path)  # the winner
    looks = iter([None])  # the loser's first look saw no table, so it commits version 0 and is refused
    original = DeltaCreateTableOperator._existing
    monkeypatch.setattr(
        DeltaCreateTableOperator, "_existing", staticmethod(lambda t: next(looks, original(t)))
    )
    assert _create(tmp_path) == 0
    # One version 0, the winner's (with its checksum): the loser wrote nothing.
    assert sorted(os.listdir(tmp_path / "_delta_log")) == [f"{0:020d}.crc", f"{0:020d}.json"]
    looks = iter([None])
    with pytest.raises(ValueError, match="partitioned by"):
        _create(tmp_path, partition_by=[])


def test_create_fails_cleanly_on_a_bad_partition_column(tmp_path: Path):
    with pytest.raises(Exception, match="partition column 'nope'"):
        _create(tmp_path, partition_by=["nope"])
    assert not (tmp_path / "_delta_log").exists() or not os.listdir(tmp_path / "_delta_log")


# -- DeltaCheckpointOperator -------------------------------------------------------------------------------
def test_checkpoint_matches_the_table_and_deltalake_reads_it(tmp_path: Path):
    for i in range(4):
        deltalake.write_deltalake(str(tmp_path), _rows(10 * i, 4), partition_by=["part"], mode="append")
    result = DeltaCheckpointOperator(task_id="cp", table_uri=str(tmp_path)).execute({})
    snap = DeltaTable(str(tmp_path)).snapshot()
    assert result["version"] == 3 and result["num_of_add_files"] == snap.num_files == 8
    assert result["parts"] is None
    pointer = json.loads((tmp_path / "_delta_log" / "_last_checkpoint").read_text())
    assert {pointer[k] for k in ("version", "size", "sizeInBytes")} == {
        result["version"], result["size"], result["size_in_bytes"]
    }  # fmt: skip
    assert (tmp_path / "_delta_log" / "00000000000000000003.checkpoint.parquet").exists()
    # deltalake starts from our checkpoint once the commits before it are gone
    for v in range(3):
        (tmp_path / "_delta_log" / f"{v:020d}.json").unlink()
    assert deltalake.DeltaTable(str(tmp_path)).to_pyarrow_table().num_rows == 16


def test_checkpoint_of_a_version_in_parts(tmp_path: Path):
    for i in range(3):
        deltalake.write_deltalake(str(tmp_path), _rows(10 * i, 4), partition_by=["part"], mode="append")
    result = DeltaCheckpointOperator(task_id="cp", table_uri=str(tmp_path), version=1, parts=2).execute({})
    assert result["version"] == 1 and result["parts"] == 2 and result["num_of_add_files"] == 4
    names = sorted(n for n in os.listdir(tmp_path / "_delta_log") if ".checkpoint." in n)
    assert names == [
        "00000000000000000001.checkpoint.0000000001.0000000002.parquet",
        "00000000000000000001.checkpoint.0000000002.0000000002.parquet",
    ]
    assert deltalake.DeltaTable(str(tmp_path), version=1).to_pyarrow_table().num_rows == 8


# -- DeltaVacuumOperator -----------------------------------------------------------------------------------
def _overwritten(root: Path) -> list[str]:
    """A table whose first two versions were overwritten; returns the removed files (relative)."""
    deltalake.write_deltalake(str(root), _rows(0, 6), partition_by=["part"])
    deltalake.write_deltalake(str(root), _rows(10, 6), partition_by=["part"], mode="append")
    before = set(DeltaTable(str(root)).snapshot().file_paths())
    deltalake.write_deltalake(str(root), _rows(100, 4), partition_by=["part"], mode="overwrite")
    return sorted(before)


def test_vacuum_deletes_what_the_table_no_longer_needs(tmp_path: Path):
    removed = _overwritten(tmp_path)
    orphan = tmp_path / "part=p0" / "never-committed.parquet"
    orphan.write_bytes(b"x" * 10)
    expected = sorted([*removed, "part=p0/never-committed.parquet"])
    size = sum((tmp_path / p).stat().st_size for p in expected)
    args = {"task_id": "vacuum", "table_uri": str(tmp_path), "retention_hours": 0}

    dry = DeltaVacuumOperator(**args, dry_run=True, enforce_retention_duration=False).execute({})
    assert dry["dry_run"] and dry["files"] == expected and dry["num_files"] == 5 and dry["bytes"] == size
    assert all((tmp_path / p).exists() for p in expected)

    done = DeltaVacuumOperator(**args, enforce_retention_duration=False).execute({})
    assert not done["dry_run"] and done["files"] == expected and done["bytes"] == size
    assert done["retention_hours"] == 0 and done["seconds"] >= 0
    assert not any((tmp_path / p).exists() for p in expected)
    theirs = deltalake.DeltaTable(str(tmp_path))
    assert theirs.to_pyarrow_table().num_rows == 4  # every live file is still there
    assert all(os.path.exists(uri) for uri in theirs.file_uris())


def test_vacuum_enforces_the_table_retention(tmp_path: Path):
    _overwritten(tmp_path)
    op = DeltaVacuumOperator(task_id="vacuum", table_uri=str(tmp_path), retention_hours=1)
    with pytest.raises(RetentionTooShortError):
        op.execute({})
    # the default retention (7 days) keeps the removed files: they were removed just now
    result = DeltaVacuumOperator(task_id="vacuum", table_uri=str(tmp_path)).execute({})
    assert result["num_files"] == 0 and result["retention_hours"] == 168


def test_vacuum_progress_logs_about_every_tenth():
    lines: list[tuple] = []

    class Log:
        def info(self, *args):
            lines.append(args)

    progress = _progress_logger(Log(), "t")
    for done in range(1, 1001):
        progress(done, 1000)
    assert [line[-1] for line in lines] == [0, 10, 20, 30, 40, 50, 60, 70, 80, 90, 100]


# -- DeltaLogCleanupOperator -------------------------------------------------------------------------------
def test_log_cleanup_deletes_expired_commits_before_an_old_checkpoint(tmp_path: Path):
    for i in range(8):
        deltalake.write_deltalake(str(tmp_path), _rows(10 * i, 2), mode="append")
    DeltaCheckpointOperator(task_id="cp", table_uri=str(tmp_path), version=4).execute({})
    old = time.time() - 40 * _DAY_S  # past the default 30-day delta.logRetentionDuration
    log_dir = tmp_path / "_delta_log"
    for name in os.listdir(log_dir):
        if name[:20].isdigit() and int(name[:20]) <= 4:
            os.utime(log_dir / name, (old, old))

    deleted = DeltaLogCleanupOperator(task_id="cleanup", table_uri=str(tmp_path)).execute({})
    assert deleted == [f"{v:020d}.json" for v in range(4)]
    assert not any((log_dir / n).exists() for n in deleted)
    theirs = deltalake.DeltaTable(str(tmp_path))
    assert theirs.version() == 7 and theirs.to_pyarrow_table().num_rows == 16
    assert DeltaTable(str(tmp_path)).snapshot().num_files == 8
    assert DeltaLogCleanupOperator(task_id="again", table_uri=str(tmp_path)).execute({}) == []


# -- templating through dag.test() ---------------------------------------------------------------------------
def test_templated_fields_render_in_a_dag_run(tmp_path: Path, dag_file):
    out = tmp_path / "results.json"
    module = dag_file(
        "operators_templated",
        f"""
        import datetime as dt, json
        from airflow.sdk import DAG, task
        from airflow_provider_delta.operators.create import DeltaCreateTableOperator
        from airflow_provider_delta.operators.maintenance import (
            DeltaCheckpointOperator, DeltaLogCleanupOperator, DeltaVacuumOperator)

        with DAG("operators_templated", schedule=None, start_date=dt.datetime(2024, 1, 1),
                 params={{"root": {str(tmp_path)!r}, "part": "day", "hours": 200}}) as dag:
            uri = "{{{{ params.root }}}}/t_{{{{ ds_nodash }}}}"
            create = DeltaCreateTableOperator(
                task_id="create", table_uri=uri,
                schema=[("id", "long"), ("{{{{ params.part }}}}", "date")],
                partition_by=["{{{{ params.part }}}}"],
                configuration={{"delta.logRetentionDuration": "interval {{{{ params.hours }}}} hours"}})
            checkpoint = DeltaCheckpointOperator(
                task_id="checkpoint", table_uri=uri, version="{{{{ ti.xcom_pull(task_ids='create') }}}}")
            hours = "{{{{ params.hours }}}}"
            vacuum = DeltaVacuumOperator(task_id="vacuum", table_uri=uri, retention_hours=hours)
            cleanup = DeltaLogCleanupOperator(task_id="cleanup", table_uri=uri)

            @task
            def record(*results):
                with open({str(out)!r}, "w") as f:
                    json.dump(results, f)

            create >> checkpoint >> vacuum >> cleanup
            record(create.output, checkpoint.output, vacuum.output, cleanup.output)
        """,
    )
    run = module.dag.test(logical_date=dt.datetime(2024, 3, 5, tzinfo=dt.UTC))
    assert run.state == "success"
    table = tmp_path / "t_20240305"
    created, checkpoint, vacuum, cleanup = json.loads(out.read_text())
    snap = DeltaTable(str(table)).snapshot()
    assert created == 0 and snap.partition_columns == ["day"]
    assert snap.configuration["delta.logRetentionDuration"] == "interval 200 hours"
    assert checkpoint["version"] == 0 and (table / "_delta_log" / f"{0:020d}.checkpoint.parquet").exists()
    assert vacuum == {**vacuum, "retention_hours": 200, "num_files": 0, "files": [], "dry_run": False}
    assert cleanup == []
    assert deltalake.DeltaTable(str(table)).metadata().partition_columns == ["day"]
