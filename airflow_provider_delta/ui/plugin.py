"""The Airflow plugin of the Delta view: the FastAPI app at ``/delta``, an entry under Browse in the UI's
navigation (the page shown inside Airflow's UI), and the "Delta table" operator link.

Registered both ways in-tree providers do: the ``airflow.plugins`` entry point (loaded by default) and
``plugins`` in the provider info (loaded when ``[core] lazy_discover_providers`` is off; Airflow skips the
second registration of the same name).
"""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from airflow_provider_delta.ui.app import app
from airflow_provider_delta.ui.links import URL_PREFIX, DeltaTableLink


class DeltaPlugin(AirflowPlugin):
    name = "delta"
    fastapi_apps = [{"app": app, "url_prefix": URL_PREFIX, "name": "Delta Lake tables"}]
    external_views = [
        {
            "name": "Delta tables",
            "href": URL_PREFIX.lstrip("/") + "/",
            "destination": "nav",
            "category": "browse",
            "url_route": "delta",
        }
    ]
    operator_extra_links = [DeltaTableLink()]
