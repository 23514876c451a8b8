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
            _modules("operators.commit", "operators.create", "operators.layout", "operators.maintenance",
                     "operators.row_changes", "operators.spark", "operators.write")
        ],
        "sensors": [_modules("sensors.delta")],
        "triggers": [_modules("triggers.delta")],
        "connection-types": [
            {
                "hook-class-name": "airflow_provider_delta.hooks.delta.DeltaHook",
                "hook-name": "Delta Lake",
                "connection-type": "delta",
                # The form, declared (Airflow 3.2+ reads this without importing the hook).
                "ui-field-behaviour": {
                    "hidden-fields": ["schema", "port"],
                    "relabeling": {
                        "login": "Access key / account name",
                        "password": "Secret / account key / token",
                        "host": "S3 endpoint URL (optional)",
                    },
                    "placeholders": {
                        "login": "S3 access key id, or Azure storage account name",
                        "password": "S3 secret key, Azure account key, or GCS token",
                        "host": "http://127.0.0.1:9000",
                        "extra": '{"storage_options": {"client_kwargs": {"region_name": "us-east-1"}}}',
                        "region_name": "us-east-1",
                        "tables": "s3://bucket/events, s3://bucket/clicks",
                    },
                },
                "conn-fields": {
                    "region_name": {
                        "label": "Region (S3)",
                        "schema": {"type": ["string", "null"]},
                    },
                    "tables": {
                        "label": "Tables",
                        "schema": {"type": ["string", "null"]},
                        "description": "Delta table URIs reached with this connection, comma-separated: "
                        "listed in the Delta view of the UI and read by the Test button.",
                    },
                },
            }
        ],
        "plugins": [{"name": "delta", "plugin-class": "airflow_provider_delta.ui.plugin.DeltaPlugin"}],
        "extra-links": ["airflow_provider_delta.ui.links.DeltaTableLink"],
    }
