"""``deltalog``, the core's command line, against real tables: deltalake is the oracle for what it reports.

Each command runs both as the installed script (or ``python -m``) in a subprocess, as on call, and through
``main([...])`` in this process. Errors must be one line on stderr with the right exit code, and a storage
option's value must never reach any output.
"""

from __future__ import annotations

import importlib.util
import io
import json
import os
import shutil
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import deltalake
import pyarrow as pa
import pytest
from deltalake import CommitProperties, Transaction, write_deltalake

from airflow_provider_delta.log import DeltaTable
from airflow_provider_delta.log.cli import main as cli_main
from airflow_provider_delta.log.cli.main import ProgressBar, main, parse_storage_options

GOLDEN = Path(os.environ["DELTA_SHARED_DIR"]) / "golden/dat/multi_partitioned/delta"
SCRIPT = Path(sys.executable).parent / "deltalog"
# Commit file mtimes, one hour apart: version v was committed at T0 + v hours.
T0_MS = int(datetime(2024, 1, 1, tzinfo=UTC).timestamp() * 1000)
HOUR_MS = 3_600_000
HAS_VACUUM = importlib.util.find_spec("airflow_provider_delta.log.maintenance.vacuum") is not None
HAS_CLEANUP = importlib.util.find_spec("airflow_provider_delta.log.maintenance.cleanup") is not None


def _batch(ids: list[int], parts: list[str]) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()), "p": pa.array(parts)})


@pytest.fixture
def table(tmp_path: Path) -> Path:
    """Versions 0-3 of a table partitioned by p: create, append with txn ingest=7, append, overwrite p=a."""
    root = tmp_path / "t"
    write_deltalake(
        root,
        _batch([1, 2], ["a", "b"]),
        partition_by=["p"],
        configuration={"delta.logRetentionDuration": "interval 30 days"},
    )
    props = CommitProperties(app_transactions=[Transaction("ingest", 7)])
    write_deltalake(root, _batch([3], ["a"]), mode="append", commit_properties=props)
    write_deltalake(root, _batch([4], ["c"]), mode="append")
    write_deltalake(root, _batch([5], ["a"]), mode="overwrite", predicate="p = 'a'")
    for version in range(4):
        ms = T0_MS + version * HOUR_MS
        os.utime(root / "_delta_log" / f"{version:020d}.json", ns=(ms * 1_000_000, ms * 1_000_000))
    return root


@pytest.fixture
def golden(tmp_path: Path) -> Path:
    dst = tmp_path / "golden"
    shutil.copytree(GOLDEN, dst)
    return dst


def run(*args: str, module: bool = False) -> subprocess.CompletedProcess[str]:
    """The real command in a fresh interpreter: the installed script, or ``python -m ...cli``."""
    command = [sys.executable, "-m", "airflow_provider_delta.log.cli.main"] if module else [str(SCRIPT)]
    return subprocess.run([*command, *args], capture_output=True, text=True, timeout=120)


def run_main(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def delta_rs_files(root: Path, version: int | None = None) -> dict[str, int]:
    dt = deltalake.DeltaTable(str(root), version=version)
    adds = pa.table(dt.get_add_actions(flatten=False))
    paths = [unquote(p) for p in adds.column("path").to_pylist()]
    return dict(zip(paths, adds.column("size_bytes").to_pylist(), strict=True))


def assert_one_line_error(err: str, *needles: str) -> None:
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("deltalog: "), err
    assert "Traceback" not in err
    for needle in needles:
        assert needle in lines[0], err


# -- snapshot -------------------------------------------------------------------------------------------
def test_installed_script_and_module_both_run(table: Path):
    assert SCRIPT.exists(), f"{SCRIPT} missing: install the package (uv pip install -e .)"
    for module in (False, True):
        result = run("snapshot", str(table), "--json", module=module)
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout)["version"] == 3
        assert result.stderr == ""


def test_snapshot_json_matches_deltalake(table: Path):
    result = run("snapshot", str(table), "--json", "--files")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    dt = deltalake.DeltaTable(str(table))
    assert doc["version"] == dt.version() == 3
    assert doc["timestamp"] == T0_MS + 3 * HOUR_MS
    assert doc["timestamp_iso"] == "2024-01-01T03:00:00.000Z"
    files = {f["path"]: f["size"] for f in doc["files"]}
    assert files == delta_rs_files(table)
    assert doc["num_files"] == len(files) == 3
    assert doc["size_in_bytes"] == sum(files.values())
    assert {tuple(f["partition_values"].items()) for f in doc["files"]} == {(("p", v),) for v in "abc"}
    p = dt.protocol()
    assert doc["protocol"] == {
        "min_reader_version": p.min_reader_version,
        "min_writer_version": p.min_writer_version,
        "reader_features": p.reader_features,
        "writer_features": p.writer_features,
    }
    md = dt.metadata()
    assert doc["metadata"]["id"] == md.id
    assert doc["metadata"]["partition_columns"] == md.partition_columns == ["p"]
    assert doc["metadata"]["configuration"] == md.configuration
    assert doc["app_transactions"] == {"ingest": dt.transaction_version("ingest")} == {"ingest": 7}


def test_snapshot_json_has_the_same_keys_with_and_without_files(table: Path, capsys):
    code, out, _ = run_main(capsys, "snapshot", str(table), "--json")
    assert code == 0
    doc = json.loads(out)
    assert doc["files"] is None
    code, out, _ = run_main(capsys, "snapshot", str(table), "--json", "--files")
    assert json.loads(out).keys() == doc.keys()


def test_snapshot_human_listing(table: Path, capsys):
    code, out, err = run_main(capsys, "snapshot", str(table), "--files")
    assert (code, err) == (0, "")
    lines = out.splitlines()
    fields = {line.split("  ")[0]: line.split("  ", 1)[1].strip() for line in lines[:7]}
    assert fields == {
        "table": str(table),
        "version": "3",
        "timestamp": "2024-01-01T03:00:00.000Z",
        "protocol": "reader 1, writer 2",
        "partition columns": "p",
        "files": "3",
        "size": f"{sum(delta_rs_files(table).values()):,} bytes (1.4 KiB)",
    }
    assert "app transactions:" in lines and "  ingest  7" in lines
    assert any(line.split() == ["delta.logRetentionDuration", "interval", "30", "days"] for line in lines)
    header = next(i for i, line in enumerate(lines) if line.startswith("PATH"))
    listed = {line.split()[0] for line in lines[header + 1 :]}
    assert listed == set(delta_rs_files(table))
    # Columns are aligned: every row's SIZE starts where the header's does.
    column = lines[header].index("SIZE")
    assert all(line[column - 2 : column] == "  " for line in lines[header + 1 :])


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_snapshot_version_time_travels(table: Path, capsys, version: int):
    code, out, _ = run_main(capsys, "snapshot", str(table), "--version", str(version), "--json", "--files")
    assert code == 0
    doc = json.loads(out)
    assert doc["version"] == version
    assert {f["path"]: f["size"] for f in doc["files"]} == delta_rs_files(table, version)
    assert doc["app_transactions"] == ({} if version == 0 else {"ingest": 7})


@pytest.mark.parametrize(
    ("timestamp", "expected"),
    [
        ("2024-01-01T01:30:00Z", 1),
        ("2024-01-01T02:00:00+00:00", 2),  # exactly a commit's time: that commit
        ("2024-01-01 03:59:59", 3),  # no offset: UTC
        ("2024-01-01T04:30:00+02:00", 2),  # 02:30 UTC
        (str(T0_MS + HOUR_MS - 1), 0),  # ms since the epoch
    ],
)
def test_snapshot_timestamp_picks_latest_version_at_or_before(table: Path, capsys, timestamp, expected):
    code, out, err = run_main(capsys, "snapshot", str(table), "--timestamp", timestamp, "--json")
    assert code == 0, err
    assert json.loads(out)["version"] == expected


def test_golden_table_copy(golden: Path, capsys):
    code, out, _ = run_main(capsys, "snapshot", str(golden), "--json", "--files")
    assert code == 0
    doc = json.loads(out)
    assert doc["version"] == deltalake.DeltaTable(str(golden)).version() == 2
    assert {f["path"]: f["size"] for f in doc["files"]} == delta_rs_files(golden)
    assert doc["metadata"]["partition_columns"] == ["letter", "date", "data"]
    code, out, _ = run_main(capsys, "history", str(golden), "--json")
    assert [c["version"] for c in json.loads(out)["history"]] == [2, 1, 0]
    code, out, _ = run_main(capsys, "snapshot", str(golden), "--files")
    assert code == 0 and "letter=/%20%f, date=1970-01-01, data=hello" in out


# -- history --------------------------------------------------------------------------------------------
def test_history_json_matches_deltalake(table: Path):
    result = run("history", str(table), "--json")
    assert result.returncode == 0, result.stderr
    commits = json.loads(result.stdout)["history"]
    expected = deltalake.DeltaTable(str(table)).history()
    assert [(c["version"], c["operation"]) for c in commits] == [
        (h["version"], h["operation"]) for h in expected
    ]
    assert [c["timestamp"] for c in commits] == [T0_MS + v * HOUR_MS for v in (3, 2, 1, 0)]
    assert commits[0]["operation_parameters"] == expected[0]["operationParameters"]
    assert commits[0]["operation_parameters"]["predicate"] == "p = 'a'"
    assert commits[0]["commit_info"]["operation"] == "WRITE"


def test_history_limit_and_listing(table: Path, capsys):
    code, out, _ = run_main(capsys, "history", str(table), "--limit", "2", "--json")
    assert [c["version"] for c in json.loads(out)["history"]] == [3, 2]
    code, out, _ = run_main(capsys, "history", str(table))
    lines = out.splitlines()
    assert lines[0].split() == ["VERSION", "TIMESTAMP", "OPERATION", "PARAMETERS"]
    assert [line.split()[:3] for line in lines[1:]] == [
        [str(v), f"2024-01-01T0{v}:00:00.000Z", "WRITE"] for v in (3, 2, 1, 0)
    ]
    assert "mode=Overwrite" in lines[1] and "predicate=p = 'a'" in lines[1]
    assert "mode=ErrorIfExists" in lines[4]


# -- checkpoint -----------------------------------------------------------------------------------------
def test_checkpoint_writes_file_and_pointer(table: Path):
    result = run("checkpoint", str(table), "--json")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["version"] == 3 and doc["parts"] == 1 and doc["num_of_add_files"] == 3
    log = table / "_delta_log"
    assert (log / f"{3:020d}.checkpoint.parquet").stat().st_size == doc["size_in_bytes"]
    assert json.loads((log / "_last_checkpoint").read_text())["version"] == 3
    assert DeltaTable(str(table)).snapshot().segment.checkpoint_version == 3
    assert delta_rs_files(table) == {f: s for f, s in delta_rs_files(table).items()}
    assert deltalake.DeltaTable(str(table)).version() == 3
    assert len(delta_rs_files(table)) == 3


def test_checkpoint_of_an_older_version_in_parts(table: Path, capsys):
    code, out, err = run_main(capsys, "checkpoint", str(table), "--version", "2", "--parts", "2")
    assert (code, err) == (0, "")
    assert out.splitlines()[0] == f"wrote a checkpoint of version 2 of {table}"
    assert "parts" in out and "add files" in out
    log = table / "_delta_log"
    assert sorted(p.name for p in log.glob("*.checkpoint.*")) == [
        f"{2:020d}.checkpoint.{i:010d}.{2:010d}.parquet" for i in (1, 2)
    ]
    assert json.loads((log / "_last_checkpoint").read_text())["parts"] == 2
    assert delta_rs_files(table) == delta_rs_files(table, 3)
    assert deltalake.DeltaTable(str(table)).version() == 3


# -- vacuum and cleanup ---------------------------------------------------------------------------------
def test_vacuum_against_the_core(table: Path):
    if not HAS_VACUUM:
        result = run("vacuum", str(table), "--dry-run")
        assert result.returncode == 1 and result.stdout == ""
        assert_one_line_error(result.stderr, "vacuum", "airflow_provider_delta.log.maintenance.vacuum")
        return
    # deltalake lists the tombstones (the two files of p=a the overwrite removed) without deleting anything.
    expected = deltalake.DeltaTable(str(table)).vacuum(0, dry_run=True, enforce_retention_duration=False)
    assert len(expected) == 2
    too_short = run("vacuum", str(table), "--retention-hours", "0")
    assert too_short.returncode == 1 and too_short.stdout == ""
    assert_one_line_error(too_short.stderr, "shorter than the table's")
    args = ["vacuum", str(table), "--retention-hours", "0", "--no-enforce-retention", "--json"]
    dry = run(*args, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    doc = json.loads(dry.stdout)
    assert doc["dry_run"] is True and sorted(doc["files"]) == sorted(expected)
    assert all((table / f).exists() for f in doc["files"])
    real = run(*args, "--progress")
    assert real.returncode == 0, real.stderr
    doc = json.loads(real.stdout)
    assert doc["dry_run"] is False and sorted(doc["files"]) == sorted(expected)
    assert doc["bytes"] == json.loads(dry.stdout)["bytes"] > 0
    assert real.stderr.startswith(
        f"deleting 2 files, {doc['bytes']:,} bytes, from {table} (retention 0 hours)\n"
    )
    assert real.stderr.endswith("100% 2/2\n")
    assert not any((table / f).exists() for f in doc["files"])
    assert deltalake.DeltaTable(str(table)).to_pyarrow_table().num_rows == 3
    assert delta_rs_files(table) == {p: s for p, s in delta_rs_files(table).items() if (table / p).exists()}


def test_cleanup_against_the_core(table: Path):
    if not HAS_CLEANUP:
        result = run("cleanup", str(table), "--json")
        assert result.returncode == 1 and result.stdout == ""
        assert_one_line_error(result.stderr, "cleanup", "airflow_provider_delta.log.maintenance.cleanup")
        return
    # Nothing expires before there is a checkpoint to keep the retained versions readable.
    nothing = run("cleanup", str(table), "--json")
    assert nothing.returncode == 0, nothing.stderr
    assert json.loads(nothing.stdout) == {"uri": str(table), "num_files": 0, "deleted": []}
    assert run("checkpoint", str(table)).returncode == 0
    # The commits are from 2024, far past the 30-day delta.logRetentionDuration: all before checkpoint 3 go.
    result = run("cleanup", str(table), "--json")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["deleted"] == [f"{v:020d}.json" for v in (0, 1, 2)] and doc["num_files"] == 3
    assert not any((table / "_delta_log" / name).exists() for name in doc["deleted"])
    assert deltalake.DeltaTable(str(table)).version() == 3
    assert len(delta_rs_files(table)) == 3


class FakeVacuum:
    """Stands in for ``DeltaTable.vacuum`` to pin the command's plumbing, whichever core it runs on."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def __call__(self, table: DeltaTable, **kwargs: Any) -> Any:
        from types import SimpleNamespace

        self.calls.append(kwargs)
        progress = kwargs.get("progress")
        if progress is not None:
            for done in range(3):
                progress(done + 1, 3)
        files = ["p=a/one.parquet", "p=a/two.parquet", "p=b/three.parquet"]
        return SimpleNamespace(
            files=files,
            bytes=3 * 1000,
            seconds=0.25,
            dry_run=kwargs["dry_run"],
            retention_hours=kwargs["retention_hours"] if kwargs["retention_hours"] is not None else 168.0,
        )


@pytest.fixture
def fake_vacuum(monkeypatch: pytest.MonkeyPatch) -> FakeVacuum:
    fake = FakeVacuum()
    monkeypatch.setattr(DeltaTable, "vacuum", lambda self, **kw: fake(self, **kw))
    return fake


def test_vacuum_dry_run_only_lists(table: Path, capsys, fake_vacuum: FakeVacuum):
    code, out, err = run_main(capsys, "vacuum", str(table), "--dry-run")
    assert (code, err) == (0, "")
    assert fake_vacuum.calls == [
        {"retention_hours": None, "enforce_retention_duration": True, "dry_run": True}
    ]
    assert out.splitlines()[0] == (
        f"dry run: would delete 3 files, 3,000 bytes (2.9 KiB), from {table} (retention 168 hours)"
    )
    assert out.splitlines()[1:] == ["  p=a/one.parquet", "  p=a/two.parquet", "  p=b/three.parquet"]


def test_vacuum_announces_then_deletes_with_progress(table: Path, capsys, fake_vacuum: FakeVacuum):
    code, out, err = run_main(
        capsys, "vacuum", str(table), "--retention-hours", "0", "--no-enforce-retention", "--progress"
    )
    assert code == 0
    assert [c["dry_run"] for c in fake_vacuum.calls] == [True, False]
    assert all(c["retention_hours"] == 0 and not c["enforce_retention_duration"] for c in fake_vacuum.calls)
    assert callable(fake_vacuum.calls[1]["progress"])
    lines = out.splitlines()
    assert lines == [
        f"deleting 3 files, 3,000 bytes (2.9 KiB), from {table} (retention 0 hours)",
        "deleted 3 files, 3,000 bytes (2.9 KiB), in 0.2 s",
    ]
    assert err.startswith("\rvacuum [") and err.endswith("100% 3/3\n")


def test_vacuum_json_keeps_stdout_one_document(table: Path, capsys, fake_vacuum: FakeVacuum):
    code, out, err = run_main(capsys, "vacuum", str(table), "--json")
    assert code == 0
    doc = json.loads(out)
    assert doc == {
        "uri": str(table),
        "dry_run": False,
        "retention_hours": 168.0,
        "num_files": 3,
        "bytes": 3000,
        "seconds": 0.25,
        "files": ["p=a/one.parquet", "p=a/two.parquet", "p=b/three.parquet"],
    }
    assert err.startswith("deleting 3 files")  # the notice goes to stderr; no bar: not a TTY
    assert "progress" not in fake_vacuum.calls[1]


def test_vacuum_draws_the_bar_by_itself_only_on_a_terminal(
    table: Path, capsys, fake_vacuum: FakeVacuum, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    code, _, err = run_main(capsys, "vacuum", str(table))
    assert code == 0 and err.endswith("100% 3/3\n")
    code, _, err = run_main(capsys, "vacuum", str(table), "--dry-run")
    assert code == 0 and err == ""
    monkeypatch.setattr(sys.stderr, "isatty", lambda: False)
    code, _, err = run_main(capsys, "vacuum", str(table))
    assert code == 0 and err == ""


def test_cleanup_lists_what_it_deleted(table: Path, capsys, monkeypatch: pytest.MonkeyPatch):
    names = [f"{v:020d}.json" for v in (0, 1)]
    monkeypatch.setattr(DeltaTable, "cleanup_expired_logs", lambda self: names)
    code, out, _ = run_main(capsys, "cleanup", str(table), "--json")
    assert json.loads(out) == {"uri": str(table), "num_files": 2, "deleted": names}
    code, out, _ = run_main(capsys, "cleanup", str(table))
    assert out.splitlines() == [f"deleted 2 expired log files from {table}"] + [f"  {n}" for n in names]


def test_vacuum_error_from_the_core_is_one_line(table: Path, capsys, monkeypatch: pytest.MonkeyPatch):
    from airflow_provider_delta.log import DeltaError

    def refuse(self, **kwargs):
        raise DeltaError("retention 0 hours is shorter than the table's 168 hours")

    monkeypatch.setattr(DeltaTable, "vacuum", refuse)
    code, out, err = run_main(capsys, "vacuum", str(table), "--retention-hours", "0")
    assert (code, out) == (1, "")
    assert_one_line_error(err, "retention 0 hours is shorter")


def test_progress_bar_redraws_only_visible_steps():
    stream = io.StringIO()
    bar = ProgressBar("vacuum", stream)
    for done in range(1, 100_001):
        bar(done, 100_000)
    bar.close()
    text = stream.getvalue()
    assert text.count("\r") == 101  # 0% to 100%
    assert text.endswith(f"\rvacuum [{'#' * 30}] 100% 100,000/100,000\n")
    silent = io.StringIO()
    ProgressBar("x", silent).close()
    assert silent.getvalue() == ""


# -- restore --------------------------------------------------------------------------------------------
def test_restore_to_a_version_and_a_timestamp(table: Path, capsys):
    # The fixture's commits are dated 2024: older than the 7-day retention, so the default refuses.
    code, _, err = run_main(capsys, "restore", str(table), "--version", "1")
    assert code == 1
    assert_one_line_error(err, "deletedFileRetentionDuration", "version 1")
    assert DeltaTable(str(table)).version() == 3
    result = run("restore", str(table), "--version", "1", "--no-enforce-retention", "--json")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert (doc["version"], doc["restored_version"]) == (4, 1)
    assert delta_rs_files(table) == delta_rs_files(table, 1)
    assert doc["metrics"]["numOfFilesAfterRestore"] == len(delta_rs_files(table, 1))
    # 02:30 is after version 2 (02:00) and before version 3: version 2 it is.
    code, out, _ = run_main(capsys, "restore", str(table), "--timestamp", "2024-01-01T02:30:00Z",
                            "--no-enforce-retention")  # fmt: skip
    assert code == 0 and "to version 2 as version 5" in out and "files restored" in out
    assert delta_rs_files(table) == delta_rs_files(table, 2)


def test_restore_refusals_are_one_line(table: Path, capsys):
    code, _, err = run_main(capsys, "restore", str(table), "--version", "3")
    assert code == 1
    assert_one_line_error(err, "must be an earlier version")
    code, _, err = run_main(capsys, "restore", str(table), "--version", "0", "--no-enforce-retention")
    assert code == 0
    gone = next(iter(set(delta_rs_files(table, 0)) - set(delta_rs_files(table, 3))))  # overwritten at v3
    (table / gone).unlink()
    code, _, err = run_main(capsys, "restore", str(table), "--version", "3", "--no-enforce-retention")
    assert code == 0
    code, _, err = run_main(capsys, "restore", str(table), "--version", "0", "--no-enforce-retention")
    assert code == 1
    assert_one_line_error(err, "gone from storage", gone)
    code, _, err = run_main(capsys, "restore", str(table))
    assert code == 2 and "--version" in err


# -- errors ---------------------------------------------------------------------------------------------
def test_not_a_table_is_exit_1_naming_the_path(tmp_path: Path, capsys):
    empty = tmp_path / "not-a-table"
    empty.mkdir()
    result = run("snapshot", str(empty))
    assert result.returncode == 1 and result.stdout == ""
    assert_one_line_error(result.stderr, str(empty), "no Delta table")
    for command in ("history", "checkpoint"):
        code, out, err = run_main(capsys, command, str(tmp_path / "missing"))
        assert (code, out) == (1, "")
        assert_one_line_error(err, str(tmp_path / "missing"))


def test_bad_version_names_available_versions(table: Path, capsys):
    result = run("snapshot", str(table), "--version", "9")
    assert result.returncode == 1
    assert_one_line_error(result.stderr, "version 9", "available versions are 0..3")
    code, _, err = run_main(capsys, "checkpoint", str(table), "--version", "9")
    assert code == 1
    assert_one_line_error(err, "available versions are 0..3")
    code, _, err = run_main(capsys, "snapshot", str(table), "--timestamp", "2023-12-31T00:00:00Z")
    assert code == 1
    assert_one_line_error(err, "before the earliest", "available versions are 0..3")


@pytest.mark.parametrize(
    "args",
    [
        [],
        ["frobnicate", "x"],
        ["snapshot"],
        ["snapshot", "t", "--version", "abc"],
        ["snapshot", "t", "--version", "-1"],
        ["snapshot", "t", "--version", "1", "--timestamp", "2024-01-01"],
        ["snapshot", "t", "--timestamp", "yesterday"],
        ["history", "t", "--limit", "0"],
        ["checkpoint", "t", "--parts", "x"],
        ["vacuum", "t", "--retention-hours", "-3"],
        ["snapshot", "t", "--storage-option", "novalue"],
        ["snapshot", "t", "--storage-option", "client_kwargs={not json"],
    ],
)
def test_bad_usage_is_exit_2_in_one_line(capsys, args: list[str]):
    code, out, err = run_main(capsys, *args)
    assert (code, out) == (2, "")
    assert_one_line_error(err, "--help")


def test_bad_usage_from_the_script(tmp_path: Path):
    result = run("snapshot", str(tmp_path), "--version", "x")
    assert result.returncode == 2 and result.stdout == ""
    assert_one_line_error(result.stderr, "--version", "'x'")


def test_help_exits_0(capsys):
    code, out, _ = run_main(capsys, "--help")
    assert code == 0 and "snapshot" in out and "vacuum" in out
    code, out, _ = run_main(capsys, "vacuum", "--help")
    assert code == 0 and "--dry-run" in out and "--no-enforce-retention" in out


def test_debug_adds_the_traceback(tmp_path: Path):
    result = run("--debug", "snapshot", str(tmp_path))
    assert result.returncode == 1
    assert "Traceback" in result.stderr
    assert result.stderr.splitlines()[-1].startswith("deltalog: no Delta table")
    after = run("snapshot", str(tmp_path), "--debug")
    assert "Traceback" in after.stderr


# -- storage options ------------------------------------------------------------------------------------
def test_storage_option_values_are_converted():
    assert parse_storage_options(
        ["anon=true", "use_ssl=False", "max_retries=5", "region=eu-1", 'client_kwargs={"endpoint_url": "x"}']
    ) == {
        "anon": True,
        "use_ssl": False,
        "max_retries": 5,
        "region": "eu-1",
        "client_kwargs": {"endpoint_url": "x"},
    }
    assert parse_storage_options(["token=a=b=="]) == {"token": "a=b=="}


def test_storage_options_reach_the_table_before_and_after_the_command(
    table: Path, capsys, monkeypatch: pytest.MonkeyPatch
):
    seen = []

    class Recording(DeltaTable):
        def __init__(self, uri: str, storage_options: dict[str, Any] | None = None) -> None:
            seen.append(storage_options)
            super().__init__(uri, storage_options)

    monkeypatch.setattr(cli_main, "DeltaTable", Recording)
    code, _, err = run_main(capsys, "-o", "a=1", "snapshot", str(table), "--storage-option", "b=true")
    assert code == 0, err
    assert seen == [{"a": 1, "b": True}]
    run_main(capsys, "snapshot", str(table))
    assert seen[-1] is None


def test_storage_option_value_never_printed(table: Path, tmp_path: Path, capsys):
    secret = "XYZ"
    cases = [
        ["--storage-option", f"secret={secret}", "snapshot", str(table), "--files"],
        ["--storage-option", f"secret={secret}", "snapshot", str(table), "--json", "--files"],
        ["--storage-option", f"secret={secret}", "history", str(table), "--json"],
        # The path holds the value: the error names the path, with the value hidden.
        ["snapshot", str(tmp_path / f"no{secret}here"), f"--storage-option=secret={secret}"],
        ["snapshot", str(table), "--version", "9", "-o", f"secret={secret}", "--debug"],
        # A mistyped flag: argparse would echo the pair back.
        ["--storage-optoin", f"secret={secret}", "snapshot", str(table)],
        ["snapshot", str(table), "-o", "client_kwargs={" + secret],
    ]
    codes = []
    for args in cases:
        code, out, err = run_main(capsys, *args)
        codes.append(code)
        assert secret not in out and secret not in err, (args, out, err)
    assert codes == [0, 0, 0, 1, 1, 2, 2]
    result = run("-o", f"secret={secret}", "snapshot", str(tmp_path / secret))
    assert result.returncode == 1
    assert secret not in result.stdout + result.stderr
    assert_one_line_error(result.stderr, "no Delta table", "***")


def test_a_missing_version_names_the_versions_that_can_be_read(tmp_path: Path, capsys):
    """The range in "available versions are A..B" is exactly what a reader reconstructs, also when the
    listing started at the last checkpoint (commit 0 still there) and after log cleanup (it is not)."""
    from airflow_provider_delta.log import write
    from airflow_provider_delta.log.base.errors import VersionNotFoundError

    uri = str(tmp_path / "t")
    for i in range(5):
        write(uri, pa.table({"id": [i]}))
        if i == 2:
            DeltaTable(uri).checkpoint()
    for expected in (0, 2):
        if expected == 2:  # cleanup: the commits the checkpoint covers are gone
            for v in (0, 1):
                (tmp_path / "t" / "_delta_log" / f"{v:020d}.json").unlink()
        assert main(["snapshot", uri, "--version", "99"]) == 1
        assert f"available versions are {expected}..4" in capsys.readouterr().err
        assert DeltaTable(uri).snapshot(version=expected).version == expected
        if expected:
            with pytest.raises(VersionNotFoundError):
                DeltaTable(uri).snapshot(version=expected - 1)


# -- log compaction and checksum validation ---------------------------------------------------------------
def test_compact_log_and_validate(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    root = tmp_path / "t"
    t = DeltaTable.create(str(root), pa.schema([("a", pa.int64())]))
    for i in range(4):
        t.write(pa.table({"a": [i]}))
    code, out, err = run_main(capsys, "compact-log", str(root), "--json")
    assert code == 0, err
    name = f"{0:020d}.{4:020d}.compacted.json"
    assert json.loads(out) == {"uri": str(root), "written": name} and (root / "_delta_log" / name).exists()
    code, out, _ = run_main(capsys, "compact-log", str(root))
    assert code == 0 and out.startswith("nothing to compact")
    code, out, err = run_main(capsys, "validate", str(root), "--json")
    assert code == 0, err
    assert json.loads(out) == {"uri": str(root), "version": 4, "num_files": 4,
                               "table_size_bytes": t.snapshot().table_size_bytes}  # fmt: skip
    crc = root / "_delta_log" / f"{4:020d}.crc"
    body = json.loads(crc.read_text())
    crc.write_text(json.dumps({**body, "numFiles": 9}))
    result = run("validate", str(root))
    assert result.returncode == 1 and result.stdout == ""
    assert_one_line_error(result.stderr, "disagrees with the log on numFiles", str(crc))
