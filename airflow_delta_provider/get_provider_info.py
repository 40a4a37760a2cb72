"""Provider metadata for Airflow's `apache_airflow_provider` entry point (a literal: no imports, cheap)."""

from __future__ import annotations

from typing import Any


def get_provider_info() -> dict[str, Any]:
    return {
        "package-name": "airflow-delta-provider",
        "name": "Delta Lake",
        "description": "Watch Delta Lake tables and keep them healthy: a version sensor and trigger, snapshot "
        "replay with checks, and tombstone (VACUUM) reports, replayed on a SparkSubmit connection.",
        "integrations": [
            {
                "integration-name": "Delta Lake",
                "external-doc-url": "https://delta.io",
                "tags": ["software"],
            }
        ],
        "operators": [{"integration-name": "Delta Lake", "python-modules": ["airflow_delta_provider.operators.delta"]}],
        "sensors": [{"integration-name": "Delta Lake", "python-modules": ["airflow_delta_provider.sensors.delta"]}],
        "triggers": [{"integration-name": "Delta Lake", "python-modules": ["airflow_delta_provider.triggers.delta"]}],
        "hooks": [{"integration-name": "Delta Lake", "python-modules": ["airflow_delta_provider.hooks.delta"]}],
    }
