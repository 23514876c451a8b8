"""Task logs as a worker's supervisor writes them, for the tests that search them for secrets."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def task_sdk_logging(log_file: Path) -> Iterator[None]:
    """Log as a task's supervisor does, to ``log_file``, for the duration of the block.

    dag.test() runs tasks in this process, so their logs take this process's logging set-up, which pytest
    and Airflow's core configured without the secrets masker. A worker's supervisor writes task logs with
    the Task SDK's set-up (``airflow.sdk.log.configure_logging``, which adds Airflow's masking processor);
    this uses that, writing to a file under AIRFLOW_HOME/logs, and restores the previous set-up after.
    """
    import structlog
    from airflow.sdk.log import configure_logging, reset_logging

    saved = structlog.get_config()
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with log_file.open("wb") as out:
        configure_logging.cache_clear()
        # JSON lines, as the task log files a supervisor writes (tracebacks as data, masked like the rest).
        configure_logging(json_output=True, output=out, cache_logger_on_first_use=False)
        try:
            yield
        finally:
            configure_logging.cache_clear()
            reset_logging()
            structlog.configure(**saved)
            root.handlers[:] = handlers
            root.setLevel(level)


def metadata_db_text() -> str:
    """Every row of the metadata DB (SQLite) but the connections' own (where a connection's secrets are
    kept), as SQL text, read by another process.

    Not by opening the file here: closing any descriptor of an SQLite file drops every POSIX lock this
    process holds on it, and the process's own connection then writes where no other process looks
    (SQLite's documented "POSIX advisory locks" pitfall). And not the file's bytes: recent rows are still in
    the write-ahead log beside it.
    """
    import subprocess
    import sys

    from airflow import settings

    script = (
        "import sqlite3, sys; con = sqlite3.connect(sys.argv[1]); "
        "sys.stdout.write('\\n'.join(line for line in con.iterdump() "
        "if not line.startswith('INSERT INTO \"connection\"')))"
    )
    done = subprocess.run([sys.executable, "-c", script, settings.engine.url.database], capture_output=True,
                          text=True, check=True)  # fmt: skip
    return done.stdout
