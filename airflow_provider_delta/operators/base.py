"""What the table-level operators (maintenance, layout) share: ``DeltaBaseOperator``, a templated
``table_uri``, the cached ``hook`` (``hooks.delta.DeltaHookMixin``, which every operator, the sensor and
the triggers use) and the ``delta_commit`` record behind the "Delta table" link.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator

from airflow_provider_delta.hooks.delta import DeltaHookMixin
from airflow_provider_delta.ui.links import DeltaTableLink, record_commit

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_provider_delta.log import DeltaTable


def int_or_none(value: int | str | None) -> int | None:
    """An optional integer argument as a rendered template gives it (``""`` or ``"None"`` for none)."""
    return None if value in (None, "", "None") else int(value)


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
