"""What the Delta operators, the sensor and the triggers share: one ``DeltaHook`` per instance, built one way.

Airflow's own provider operators do the same (``AwsBaseOperator``, ``GoogleCloudBaseOperator``): a cached
``hook`` property built from the operator's connection id, so credentials and storage options are resolved
in one place, once per task, however many times the task reaches the table. ``DeltaBaseOperator`` adds the
rest of what the table-level operators (maintenance, layout) share: a templated ``table_uri`` and the
``delta_commit`` record behind the "Delta table" link.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cached_property
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator

from airflow_provider_delta.hooks.delta import DeltaHook
from airflow_provider_delta.ui.links import DeltaTableLink, record_commit

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_provider_delta.log import DeltaTable


def int_or_none(value: int | str | None) -> int | None:
    """An optional integer argument as a rendered template gives it (``""`` or ``"None"`` for none)."""
    return None if value in (None, "", "None") else int(value)


class DeltaHookMixin:
    """The ``hook`` of anything that names a table (``table_uri``) and its connection (``delta_conn_id``).

    The hook is cached: it depends only on ``delta_conn_id``, which is not templated, so building it before
    or after rendering gives the same hook. The table handle is not cached: ``table_uri`` is templated, and a
    handle is cheap next to the connection look-up the hook does.
    """

    delta_conn_id: str | None
    table_uri: str

    @cached_property
    def hook(self) -> DeltaHook:
        """The one ``DeltaHook`` of this instance (``delta_conn_id``; ``None``: no credentials)."""
        return DeltaHook(self.delta_conn_id)

    def delta_table(self) -> DeltaTable:
        """The table at ``table_uri`` (as rendered) with the hook's credentials."""
        return self.hook.get_table(self.table_uri)

    def table_storage_options(self) -> dict[str, Any]:
        """The fsspec storage options of ``table_uri`` (``{}`` without a connection): what Spark is given."""
        return self.hook.storage_options(self.table_uri)


class DeltaBaseOperator(BaseOperator, DeltaHookMixin):
    """The Airflow glue the table-level operators share (maintenance, layout): a templated table URI, the
    hook, and the ``delta_commit`` record (the table's version after the task) behind the "Delta table"
    link."""

    template_fields: Sequence[str] = ("table_uri",)
    operator_extra_links = (DeltaTableLink(),)
    ui_color = "#00add4"

    def __init__(self, *, table_uri: str, delta_conn_id: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.table_uri = table_uri
        self.delta_conn_id = delta_conn_id

    def record_version(self, context: Context, table: DeltaTable, operation: str) -> None:
        """Push the ``delta_commit`` record of the table's current version (for the "Delta table" link)."""
        record_commit(context, self.table_uri, table.version(), delta_conn_id=self.delta_conn_id,
                      operation=operation)  # fmt: skip
