"""Table maintenance from Airflow: checkpoints, VACUUM, log cleanup and UniForm's Iceberg catch-up (see
docs/maintenance.md and docs/howto/uniform.md).

Each operator is one core call on the hook's table handle; the rules (what a checkpoint holds, which files
VACUUM may delete, which log files a cleanup may drop) live in the core's ``checkpoint``, ``vacuum`` and
``cleanup`` modules. Run them one after the other per table (checkpoint, vacuum, cleanup): log cleanup
only deletes log files that a checkpoint older than ``delta.logRetentionDuration`` makes unnecessary.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from airflow_provider_delta.hooks.secrets import redact_errors
from airflow_provider_delta.operators.base import DeltaBaseOperator, int_or_none
from airflow_provider_delta.ui.links import record_commit

if TYPE_CHECKING:
    from airflow.sdk import Context


# A VACUUM can delete millions of files: XCom gets the first of them, ``num_files`` counts them all.
XCOM_FILE_LIMIT = 1000


class DeltaCheckpointOperator(DeltaBaseOperator):
    """Write a checkpoint of a table and point ``_last_checkpoint`` at it.

    Classic single-file by default, multi-part with ``parts`` (or when the table's
    ``delta.checkpoint.partSize`` asks for it), V2 when ``delta.checkpointPolicy`` is ``v2``. Returns the
    ``_last_checkpoint`` fields as a dict: ``version``, ``size`` (actions), ``parts``, ``size_in_bytes``,
    ``num_of_add_files``.

    :param table_uri: the table root. Templated.
    :param version: the version to checkpoint (default: the latest). Templated.
    :param parts: number of parts of a multi-part checkpoint. Templated.
    :param delta_conn_id: connection for the table's storage (``None``: no credentials).
    """

    template_fields: Sequence[str] = ("table_uri", "version", "parts")

    def __init__(
        self,
        *,
        table_uri: str,
        version: int | str | None = None,
        parts: int | str | None = None,
        delta_conn_id: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(table_uri=table_uri, delta_conn_id=delta_conn_id, **kwargs)
        self.version = version
        self.parts = parts

    @redact_errors
    def execute(self, context: Context) -> dict[str, Any]:
        table = self.delta_table()
        pointer = table.checkpoint(int_or_none(self.version), int_or_none(self.parts))
        record_commit(context, self.table_uri, pointer.version, delta_conn_id=self.delta_conn_id,
                      operation="CHECKPOINT")  # fmt: skip
        self.log.info(
            "checkpoint of %s at version %d: %s part(s), %s actions, %s add files, %s bytes",
            self.table_uri, pointer.version, pointer.parts or 1, pointer.size, pointer.num_of_add_files,
            pointer.size_in_bytes,
        )  # fmt: skip
        return {
            "version": pointer.version,
            "size": pointer.size,
            "parts": pointer.parts,
            "size_in_bytes": pointer.size_in_bytes,
            "num_of_add_files": pointer.num_of_add_files,
        }


def _progress_logger(log: Any, uri: str, step: int = 10) -> Callable[[int, int], None]:
    """A ``progress(done, total)`` callback that logs about every ``step`` percent."""
    logged = -1

    def progress(done: int, total: int) -> None:
        nonlocal logged
        percent = 100 if total == 0 else done * 100 // total
        if percent // step > logged:
            logged = percent // step
            log.info("VACUUM of %s: deleted %d of %d files (%d%%)", uri, done, total, percent)

    return progress


class DeltaVacuumOperator(DeltaBaseOperator):
    """Delete data files that no version within the retention needs (Delta's VACUUM).

    Returns a dict: ``num_files`` and ``bytes`` deleted (or, with ``dry_run``, that would be), ``files``
    (their paths, relative to the root; at most the first 1,000), ``seconds``, ``dry_run`` and
    ``retention_hours``. Logs progress about every 10% of the deletion.

    :param table_uri: the table root. Templated.
    :param retention_hours: keep files that versions of the last this-many hours need; default: the
        table's ``delta.deletedFileRetentionDuration`` (7 days). Templated.
    :param dry_run: only list what would be deleted.
    :param enforce_retention_duration: refuse a retention shorter than the table's property
        (``RetentionTooShortError``); ``False`` only when no reader or writer can need older files.
    :param delta_conn_id: connection for the table's storage (``None``: no credentials).
    """

    template_fields: Sequence[str] = ("table_uri", "retention_hours")

    def __init__(
        self,
        *,
        table_uri: str,
        retention_hours: float | str | None = None,
        dry_run: bool = False,
        enforce_retention_duration: bool = True,
        delta_conn_id: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(table_uri=table_uri, delta_conn_id=delta_conn_id, **kwargs)
        self.retention_hours = retention_hours
        self.dry_run = dry_run
        self.enforce_retention_duration = enforce_retention_duration

    @redact_errors
    def execute(self, context: Context) -> dict[str, Any]:
        hours = None if self.retention_hours in (None, "", "None") else float(self.retention_hours)
        table = self.delta_table()
        report = table.vacuum(
            retention_hours=hours,
            dry_run=self.dry_run,
            enforce_retention_duration=self.enforce_retention_duration,
            progress=_progress_logger(self.log, self.table_uri),
        )
        verb = "would delete" if report.dry_run else "deleted"
        self.log.info(
            "VACUUM%s of %s (retention %g hours): %s %d files, %d bytes, in %.1f s",
            " DRY RUN" if report.dry_run else "", self.table_uri, report.retention_hours, verb,
            len(report.files), report.bytes, report.seconds,
        )  # fmt: skip
        if report.dry_run:
            for path in report.files[:100]:
                self.log.info("  %s", path)
        self.record_version(context, table, "VACUUM DRY RUN" if report.dry_run else "VACUUM END")
        return {
            "num_files": len(report.files),
            "bytes": report.bytes,
            "files": list(report.files[:XCOM_FILE_LIMIT]),
            "seconds": report.seconds,
            "dry_run": report.dry_run,
            "retention_hours": report.retention_hours,
        }


class DeltaLogCleanupOperator(DeltaBaseOperator):
    """Delete ``_delta_log`` files older than ``delta.logRetentionDuration`` (default 30 days) that no
    retained version needs: only those before the newest checkpoint old enough to be past the retention.

    Returns the deleted file names (relative to ``_delta_log``), sorted. A table with
    ``delta.enableExpiredLogCleanup=false`` is left alone.

    :param table_uri: the table root. Templated.
    :param delta_conn_id: connection for the table's storage (``None``: no credentials).
    """

    @redact_errors
    def execute(self, context: Context) -> list[str]:
        table = self.delta_table()
        deleted = table.cleanup_expired_logs()
        self.record_version(context, table, "LOG CLEANUP")
        self.log.info("log cleanup of %s: deleted %d expired log files", self.table_uri, len(deleted))
        return deleted


class DeltaIcebergConvertOperator(DeltaBaseOperator):
    """Catch a UniForm table's Iceberg metadata up with its latest version (``convert_to_iceberg()``).

    Every commit to a table whose ``delta.universalFormat.enabledFormats`` names iceberg writes its Iceberg
    metadata itself; a conversion that failed never failed its commit, and this task converts every version
    since the last one converted (nothing when none is behind). Returns the status as a dict: ``uri``,
    ``enabled``, ``table_version``, ``converted_version``, ``metadata_file``, ``lag`` (0 after success) and
    ``last_error``. Fails (``UniformError``, whose ``rule`` says why) when the table does not enable UniForm
    iceberg, or when the conversion cannot be written.

    :param table_uri: the table root. Templated.
    :param delta_conn_id: connection for the table's storage (``None``: no credentials).
    """

    @redact_errors
    def execute(self, context: Context) -> dict[str, Any]:
        table = self.delta_table()
        status = table.convert_to_iceberg()
        record_commit(context, self.table_uri, status.table_version, delta_conn_id=self.delta_conn_id,
                      operation="UNIFORM ICEBERG")  # fmt: skip
        self.log.info(
            "UniForm of %s: Iceberg metadata holds version %s of %d (%s), lag %s",
            self.table_uri, status.converted_version, status.table_version, status.metadata_file, status.lag,
        )  # fmt: skip
        return {
            "uri": status.uri,
            "enabled": status.enabled,
            "table_version": status.table_version,
            "converted_version": status.converted_version,
            "metadata_file": status.metadata_file,
            "lag": status.lag,
            "last_error": status.last_error,
        }
