"""The Delta view's catalog on a server that lacks the Fernet key a connection's password was stored with:
that connection's tables are left out with a warning, the others are listed (Airflow's own loading of such
a connection raises, which took the whole catalog down). Real Airflow: a metadata DB of its own, as
``airflow db migrate`` left it, in a process of its own per key setting."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from cryptography.fernet import Fernet

ADD = r"""
import json, sys
from airflow.models.connection import Connection
from airflow.utils.session import create_session
with create_session() as s:
    s.add(Connection(conn_id=sys.argv[1], conn_type="delta", password="a-long-password",
                     extra=json.dumps({"tables": [f"/tmp/{sys.argv[1]}_table"]})))
"""
LIST = r"""
import json
from airflow.utils.session import create_session
from airflow_provider_delta.ui.catalog import _connection_tables
with create_session() as s:
    print(json.dumps(_connection_tables(s)))
"""


def _run(code: str, env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True, text=True,
                          timeout=300)  # fmt: skip


def test_a_connection_stored_with_another_key_is_left_out(tmp_path: Path, fresh_airflow_db: str):
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env.update(AIRFLOW_HOME=str(tmp_path), AIRFLOW__CORE__LOAD_EXAMPLES="False",
               AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=fresh_airflow_db)  # fmt: skip
    key = Fernet.generate_key().decode()
    for conn_id, fernet_key in (("keyed", key), ("plain", "")):  # stored encrypted, and stored as is
        added = _run(ADD, {**env, "AIRFLOW__CORE__FERNET_KEY": fernet_key}, conn_id)
        assert added.returncode == 0, added.stderr[-2000:]
    both = [["keyed", "/tmp/keyed_table"], ["plain", "/tmp/plain_table"]]
    assert json.loads(_run(LIST, {**env, "AIRFLOW__CORE__FERNET_KEY": key}).stdout.splitlines()[-1]) == both
    listed = _run(LIST, {**env, "AIRFLOW__CORE__FERNET_KEY": ""})  # the key is gone (or rotated away)
    assert listed.returncode == 0, listed.stderr[-2000:]
    assert json.loads(listed.stdout.splitlines()[-1]) == [["plain", "/tmp/plain_table"]]
    assert "cannot be read" in listed.stdout + listed.stderr
