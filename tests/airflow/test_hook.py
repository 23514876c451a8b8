"""DeltaHook: connections to storage options, end to end against the moto S3 server, and no leaked secrets.

Connections come from ``AIRFLOW_CONN_<ID>`` environment variables, which the Task SDK reads both in tasks
and outside them.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from task_logs import metadata_db_text, task_sdk_logging

from airflow_provider_delta.hooks.delta import DeltaHook
from airflow_provider_delta.hooks.storage_options import StorageOptionError
from airflow_provider_delta.log import DeltaTable

PASSWORD = "SUPERSECRET123-do-not-log"
SESSION_TOKEN = "SESSIONTOKEN456-do-not-log"


def set_connection(mp: pytest.MonkeyPatch, conn_id: str, **conn: Any) -> None:
    mp.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(conn))


def s3_connection(mp: pytest.MonkeyPatch, s3_server, conn_id: str = "delta_s3", **extra: Any) -> None:
    set_connection(
        mp,
        conn_id,
        conn_type="delta",
        login="testing",
        password="testing",
        host=s3_server.endpoint_url,
        extra={"storage_options": {"client_kwargs": {"region_name": "us-east-1"}}, **extra},
    )


@pytest.mark.s3
def test_delta_connection_reads_a_table_deltalake_wrote_to_s3(s3_server, s3_bucket, monkeypatch):
    import deltalake

    uri = f"s3://{s3_bucket}/events"
    data = pa.table({"id": [1, 2, 3], "name": ["a", "b", "c"]})
    deltalake.write_deltalake(uri, data, storage_options=s3_server.delta_storage_options)
    deltalake.write_deltalake(
        uri, data.slice(0, 1), mode="append", storage_options=s3_server.delta_storage_options
    )
    s3_connection(monkeypatch, s3_server)

    table = DeltaHook("delta_s3").get_table(uri)
    snap = table.snapshot()
    assert snap.version == 1 and snap.num_files == 2
    assert snap.schema.names == ["id", "name"]
    rows = pa.concat_tables(
        pq.read_table(table.store.table_file(p), filesystem=table.store.fs) for p in snap.file_paths()
    )
    assert sorted(rows.column("id").to_pylist()) == [1, 1, 2, 3]


def test_unknown_storage_option_is_rejected_by_name(monkeypatch):
    set_connection(
        monkeypatch,
        "delta_bad",
        conn_type="delta",
        extra={"storage_options": {"region_name": "us-east-1", "evil_option": 1, "also_not_allowed": 2}},
    )
    with pytest.raises(StorageOptionError, match="'also_not_allowed' is not an option s3fs takes") as err:
        DeltaHook("delta_bad").storage_options("s3://bucket/t")
    assert "delta_bad" in str(err.value) and "'evil_option' is not an option s3fs takes" in str(err.value)
    assert "region_name" not in str(err.value).split("Accepted:")[0]  # an Airflow key s3fs gets mapped
    with pytest.raises(StorageOptionError, match="evil_option"):
        DeltaHook("delta_bad").get_table("s3://bucket/t")


@pytest.mark.s3
def test_only_storage_options_of_the_extra_are_used(s3_server, s3_bucket, monkeypatch):
    # Keys outside "storage_options" that s3fs would honour if the extra were passed through whole.
    s3_connection(monkeypatch, s3_server, endpoint_url="http://127.0.0.1:9", anon=True, key="wrong")
    uri = f"s3://{s3_bucket}/t"
    assert DeltaHook("delta_s3").storage_options(uri) == {
        "key": "testing",
        "secret": "testing",
        "client_kwargs": {"region_name": "us-east-1", "endpoint_url": s3_server.endpoint_url},
    }
    DeltaTable.create(uri, pa.schema([("id", pa.int64())]), storage_options=s3_server.storage_options)
    assert DeltaHook("delta_s3").get_table(uri).snapshot().version == 0


def test_other_connection_types_go_through_airflow_object_storage(tmp_path: Path, monkeypatch):
    import airflow.sdk.io.fs as airflow_fs

    DeltaTable.create(str(tmp_path / "t"), pa.schema([("id", pa.int64())]))
    set_connection(monkeypatch, "local_files", conn_type="fs", extra={"path": "/"})
    calls = []
    real = airflow_fs.get_fs

    def spy(scheme: str, conn_id: str | None = None, storage_options: Any = None) -> Any:
        calls.append((scheme, conn_id))
        return real(scheme, conn_id, storage_options)

    monkeypatch.setattr(airflow_fs, "get_fs", spy)
    for uri in (str(tmp_path / "t"), f"file://{tmp_path / 't'}"):
        table = DeltaHook("local_files").get_table(uri)
        assert table.snapshot().version == 0
    assert calls == [("file", "local_files"), ("file", "local_files")]


def test_no_connection_means_no_credentials(tmp_path: Path, monkeypatch):
    for name in list(os.environ):
        if name.startswith("AIRFLOW_CONN_"):
            monkeypatch.delenv(name)
    hook = DeltaHook(None)
    assert hook.storage_options("s3://bucket/t") == {}
    DeltaTable.create(str(tmp_path / "t"), pa.schema([("id", pa.int64())]))
    assert hook.get_table(str(tmp_path / "t")).snapshot().version == 0


@pytest.mark.s3
def test_secrets_never_reach_task_logs(s3_server, s3_bucket, dag_file, monkeypatch, capfd, caplog):
    """A DAG that commits and senses on S3 with a delta connection whose password and session token are
    secrets, with a careless task that logs the storage options and a task that fails with them in its
    error: neither secret may appear in the task log file, in captured output, in log records or in the
    metadata DB. (Airflow masks a connection's password and extra values itself; the hook registers the
    secret options it builds too.)"""
    uri = f"s3://{s3_bucket}/t"
    DeltaTable.create(uri, pa.schema([("id", pa.int64())]), storage_options=s3_server.storage_options)
    set_connection(
        monkeypatch,
        "delta_secret",
        conn_type="delta",
        login="testing",
        password=PASSWORD,  # moto accepts any secret key
        host=s3_server.endpoint_url,
        extra={"storage_options": {"token": SESSION_TOKEN, "client_kwargs": {"region_name": "us-east-1"}}},
    )
    module = dag_file(
        "delta_secrets",
        f"""
        import datetime as dt, logging, uuid
        import pyarrow as pa, pyarrow.parquet as pq
        from airflow.sdk import DAG, task
        from airflow_provider_delta.hooks.delta import DeltaHook
        from airflow_provider_delta.operators.commit import DeltaCommitOperator
        from airflow_provider_delta.sensors.delta import DeltaVersionSensor

        URI = {uri!r}
        START = dt.datetime(2024, 1, 1)
        with DAG("delta_secrets", schedule="@daily", start_date=START, catchup=False) as dag:
            @task
            def write():
                hook = DeltaHook("delta_secret")
                logging.getLogger("careless").warning("careless log: %s", hook.storage_options(URI))
                table = hook.get_table(URI)
                rel = f"part-{{uuid.uuid4()}}.parquet"
                with table.store.fs.open(table.store.table_file(rel), "wb") as f:
                    pq.write_table(pa.table({{"id": [1, 2, 3]}}), f)
                return [rel]

            @task
            def careless_failure():
                raise RuntimeError(f"careless error: {{DeltaHook('delta_secret').storage_options(URI)}}")

            commit = DeltaCommitOperator(
                task_id="commit", table_uri=URI, files=write(), delta_conn_id="delta_secret"
            )
            wait = DeltaVersionSensor(
                task_id="wait", table_uri=URI, delta_conn_id="delta_secret", min_version=1, poke_interval=0.1,
                deferrable=True,
            )
            commit >> wait >> careless_failure()
        """,
    )
    logs = Path(os.environ["AIRFLOW_HOME"], "logs")
    with task_sdk_logging(logs / "delta_secrets" / "dag_test.log"):
        run = module.dag.test(logical_date=dt.datetime(2024, 1, 2, tzinfo=dt.UTC))
    states = {ti.task_id: ti.state for ti in run.get_task_instances()}
    assert states == {
        "write": "success",
        "commit": "success",
        "wait": "success",
        "careless_failure": "failed",
    }
    assert DeltaTable(uri, storage_options=s3_server.storage_options).snapshot().num_files == 1

    out, err = capfd.readouterr()
    texts = {"stdout": out, "stderr": err, "caplog": caplog.text}
    texts.update({str(p): p.read_text(errors="replace") for p in logs.rglob("*") if p.is_file()})
    everything = "\n".join(texts.values())
    # The careless lines were captured (so the search below searched them), masked.
    assert "careless log:" in everything and "careless error:" in everything
    assert "'secret': '***'" in everything and "'token': '***'" in everything
    # Nor in the metadata DB (XComs, rendered fields, trigger kwargs, asset events).
    texts["metadata DB"] = metadata_db_text()
    leaked = [where for where, text in texts.items() if PASSWORD in text or SESSION_TOKEN in text]
    assert leaked == []
