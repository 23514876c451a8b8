"""Optional dependencies: which extra of ``airflow-provider-delta`` brings which module.

The base install is what the core and the Airflow layer import (Airflow, pyarrow, numpy, fsspec, pendulum).
Spark and the cloud filesystems are extras, so that a worker that only commits files, waits on a version or
runs maintenance carries neither PySpark nor three cloud SDKs. A missing one raises
:class:`MissingExtraError`, which names the ``pip install`` line that fixes it.
"""

from __future__ import annotations

import importlib

# module -> (extra, what needs it)
EXTRAS: dict[str, tuple[str, str]] = {
    "pyspark": ("spark", "the Spark layer (airflow_provider_delta.spark, DeltaSparkWriteOperator)"),
    "s3fs": ("s3", "s3:// tables"),
    "gcsfs": ("gcs", "gs:// tables"),
    "adlfs": ("azure", "abfs:// and az:// tables"),
    "pyiceberg": ("iceberg", "UniForm's Iceberg metadata (delta.universalFormat.enabledFormats=iceberg)"),
}
# Table URI scheme -> the fsspec implementation it needs (local and memory need none).
SCHEME_MODULES = {
    "s3": "s3fs", "s3a": "s3fs", "gs": "gcsfs", "gcs": "gcsfs",
    "abfs": "adlfs", "abfss": "adlfs", "az": "adlfs",
}  # fmt: skip


class MissingExtraError(ImportError):
    """A feature needs an optional dependency that is not installed; the message names the extra."""

    def __init__(self, module: str, extra: str, feature: str) -> None:
        super().__init__(
            f"{feature} needs {module}, which is not installed: "
            f"pip install 'airflow-provider-delta[{extra}]'",
            name=module,
        )
        self.module = module
        self.extra = extra


def require(module: str) -> None:
    """Import ``module`` or raise :class:`MissingExtraError` naming the extra that installs it."""
    extra, feature = EXTRAS[module]
    try:
        importlib.import_module(module)
    except ImportError as exc:
        if exc.name is not None and exc.name.split(".")[0] != module:
            raise  # the module is there but one of its own dependencies is broken: show that error
        raise MissingExtraError(module, extra, feature) from None


def require_for_uri(uri: str) -> None:
    """Check that the filesystem a table URI needs is installed (``s3://`` needs the ``s3`` extra ...)."""
    scheme = str(uri).partition("://")[0].lower() if "://" in str(uri) else ""
    if module := SCHEME_MODULES.get(scheme):
        require(module)
