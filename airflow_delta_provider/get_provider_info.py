"""Provider metadata for Airflow's `apache_airflow_provider` entry point (a literal: no imports, cheap)."""

from __future__ import annotations

from typing import Any

#: Where the provider's documentation lives. Airflow 3.3 reads the installed distribution's
#: `Project-URL: Documentation` (pyproject `[project.urls]`) for the providers page and overrides
#: `documentation-url` below with it; keep the two the same.
DOCUMENTATION_URL = "https://pypi.org/project/airflow-delta-provider/"


def get_provider_info() -> dict[str, Any]:
    return {
        "package-name": "airflow-delta-provider",
        "name": "Delta Lake",
        "description": "Watch Delta Lake tables and keep them healthy: a version sensor and trigger, snapshot "
        "replay with checks, tombstone (VACUUM) reports, checkpoints and log cleanup, in the worker or on a "
        "SparkSubmit connection.",
        "documentation-url": DOCUMENTATION_URL,
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
        "extra-links": ["airflow_delta_provider.operators.delta.DeltaResultLink"],
        # The report pages the extra link opens, served by the API server (a FastAPI app).
        "plugins": [{"name": "delta_reports", "plugin-class": "airflow_delta_provider.plugin.DeltaReportsPlugin"}],
    }
