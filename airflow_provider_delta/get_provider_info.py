"""Provider metadata read by Airflow's ProvidersManager (entry point ``apache_airflow_provider``)."""

from __future__ import annotations

from typing import Any


def _modules(*modules: str) -> dict[str, Any]:
    return {
        "integration-name": "Delta Lake",
        "python-modules": [f"airflow_provider_delta.{m}" for m in modules],
    }


def get_provider_info() -> dict[str, Any]:
    from airflow_provider_delta.log import __version__

    return {
        "package-name": "airflow-provider-delta",
        "name": "Delta Lake",
        "description": "Delta Lake tables from Airflow: exactly-once commits, version sensors, maintenance.",
        "versions": [__version__],
        "integrations": [
            {
                "integration-name": "Delta Lake",
                "external-doc-url": "https://delta.io/",
                "tags": ["software"],
            }
        ],
        "hooks": [_modules("hooks.delta")],
        "operators": [
            _modules("operators.commit", "operators.create", "operators.maintenance", "operators.spark")
        ],
        "sensors": [_modules("sensors.delta")],
        "triggers": [_modules("triggers.delta")],
        "connection-types": [
            {"hook-class-name": "airflow_provider_delta.hooks.delta.DeltaHook", "connection-type": "delta"}
        ],
    }
