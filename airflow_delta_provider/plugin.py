"""The "Delta report" pages, served by Airflow's API server on the UI's own origin (a provider plugin: a
FastAPI app mounted at `/delta`), so the task's extra link opens in the browser whatever the report's store.

`GET /delta/reports/{dag_id}/{run_id}/{task_id}?map_index=-1&kind=html|md|json` answers only a user Airflow
lets read that DAG's task instances (the API server's own authentication: the UI's token cookie or a bearer
token; 401 without one, 403 for a user who may not see the DAG). What it serves is named by the task
itself: the report URI in its XCom summary (`reports[kind]`, or `result_uri` for `json`), which must lie
under the task's rendered `result_uri` and end with the kind's extension; it is read through the task's
`storage_conn_id` as the task wrote it. Reports are self-contained (inline SVG, no script), and are served
with a content security policy that keeps it so.

`GET /delta/health?kind=html|md|json` is the lake report (`commands.lake_report`) of the maintenance history
the lake autopilot writes: `[delta] history_uri`, else the `DELTA_LAKE_HISTORY_URI` the example autopilot DAG
reads, read through `[delta] history_storage_conn_id` (also used for the tables); `GET /delta/health/table?uri=`
is one table's page, for a table the history names only. Both answer a user Airflow lets read the runs of the
DAG that writes that history (`[delta] history_dag_id`, default `delta_lake_autopilot`), and the health page is
an external view in the UI's Browse menu (`EXTERNAL_VIEW`), one click from any page.

Loaded once whatever `[core] lazy_discover_providers` says: declared in the provider info (`plugins`, which
Airflow loads only when provider discovery is eager) and as an `airflow.plugins` entry point
(`ENTRY_POINT`, the plugin when discovery is lazy, else None, which Airflow skips). The API server's modules
are imported only when the API server builds the app, not in workers that load plugins.
"""

# No `from __future__ import annotations`: FastAPI reads the route's annotations, which name modules
# imported inside `build_app`.
import os
from functools import cached_property
from typing import Any

from airflow import settings
from airflow.plugins_manager import AirflowPlugin

from .delta.storage import is_local, local_path
from .operators.delta import REPORT_PAGES
from .version_watch import storage_options

URL_PREFIX = REPORT_PAGES.rpartition("/")[0]  # the app is mounted here; its route adds /reports
MEDIA_TYPES = {
    "html": "text/html; charset=utf-8",
    "md": "text/markdown; charset=utf-8",
    "json": "application/json",
}
#: Reports are inline HTML and SVG: no script, no fetch, nothing from elsewhere.
HEADERS = {
    "Content-Security-Policy": "default-src 'none'; img-src data:; style-src 'unsafe-inline'",
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "private, no-store",
}


#: The lake health page in the UI's Browse menu: the UI shows `href` in a frame at `/plugin/<url_route>`.
EXTERNAL_VIEW = {
    "name": "Delta lake health",
    "href": f"{URL_PREFIX}/health",
    "destination": "nav",
    "category": "browse",
    "url_route": "delta-lake-health",
}
HISTORY_ENV = "DELTA_LAKE_HISTORY_URI"
DEFAULT_HISTORY_DAG = "delta_lake_autopilot"


def health_settings() -> tuple[str | None, str | None, str]:
    """(history URI, its storage connection id, the DAG that writes it) from `[delta]` or the environment."""
    from airflow.configuration import conf

    uri = conf.get("delta", "history_uri", fallback=None) or os.environ.get(HISTORY_ENV) or None
    conn_id = conf.get("delta", "history_storage_conn_id", fallback=None) or None
    dag_id = conf.get("delta", "history_dag_id", fallback=None) or DEFAULT_HISTORY_DAG
    return uri, conn_id, dag_id


def _read(uri: str, storage_conn_id: str | None) -> bytes:
    if is_local(uri):
        with open(local_path(uri), "rb") as fh:
            return fh.read()
    import fsspec

    fs, path = fsspec.core.url_to_fs(uri, **storage_options(uri, storage_conn_id))
    return fs.cat_file(path)


def report_uri(summary: Any, rendered: dict[str, Any], kind: str) -> tuple[str, str]:
    """(uri, kind) of the report to serve, from the task's XCom summary and rendered fields; raises
    `LookupError` (404) when the task kept none, `PermissionError` (403) for a URI outside its result_uri."""
    if not isinstance(summary, dict):
        raise LookupError("this task instance kept no Delta result")
    reports = summary.get("reports") if isinstance(summary.get("reports"), dict) else {}
    uri = summary.get("result_uri") if kind == "json" else reports.get(kind)
    if not uri and kind == "html":  # no HTML report for this action: its full result
        uri, kind = summary.get("result_uri"), "json"
    if not isinstance(uri, str) or not uri:
        raise LookupError(f"this task instance kept no {kind} report")
    root = rendered.get("result_uri")
    inside = isinstance(root, str) and root and uri.startswith(root.rstrip("/")) and ".." not in uri.split("/")
    if not inside or not uri.endswith(f".{kind}"):
        raise PermissionError("the report is not under the task's result_uri")
    return uri, kind


def build_app() -> Any:
    """The FastAPI app (imports the API server's modules: call it in the API server only)."""
    from typing import Annotated

    from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity
    from airflow.api_fastapi.common.db.common import SessionDep
    from airflow.api_fastapi.core_api.security import requires_access_dag
    from airflow.models.renderedtifields import RenderedTaskInstanceFields as Rendered
    from airflow.models.xcom import XComModel
    from fastapi import Depends, FastAPI, HTTPException, Query
    from fastapi.responses import Response
    from sqlalchemy import select

    from .delta.errors import DeltaError

    app = FastAPI(title="Delta reports", docs_url=None, redoc_url=None, openapi_url=None)
    access = requires_access_dag(method="GET", access_entity=DagAccessEntity.TASK_INSTANCE)

    @app.get(REPORT_PAGES[len(URL_PREFIX) :] + "/{dag_id}/{run_id}/{task_id}", dependencies=[Depends(access)])
    def report(
        dag_id: str,
        run_id: str,
        task_id: str,
        session: SessionDep,
        map_index: Annotated[int, Query()] = -1,
        kind: Annotated[str, Query(pattern="^(html|md|json)$")] = "html",
    ) -> Response:
        """The task's report of `kind` (the HTML one by default; `json`: the full result)."""

        def of_task(model: Any) -> tuple[Any, ...]:  # the rows of this task instance
            return (
                model.dag_id == dag_id,
                model.run_id == run_id,
                model.task_id == task_id,
                model.map_index == map_index,
            )

        value = session.scalar(select(XComModel.value).where(*of_task(XComModel), XComModel.key == "return_value"))
        summary = None if value is None else XComModel.deserialize_value(type("Row", (), {"value": value}))
        rendered = session.scalar(select(Rendered.rendered_fields).where(*of_task(Rendered)))
        rendered = rendered if isinstance(rendered, dict) else {}
        try:
            uri, kind = report_uri(summary, rendered, kind)
            data = _read(uri, rendered.get("storage_conn_id") or None)
        except PermissionError as err:
            raise HTTPException(403, str(err)) from None
        except FileNotFoundError:
            raise HTTPException(404, "the report is gone from where the task wrote it") from None
        except LookupError as err:
            raise HTTPException(404, str(err)) from None
        return Response(data, media_type=MEDIA_TYPES[kind], headers=HEADERS)

    _, _, history_dag = health_settings()
    runs_access = requires_access_dag(method="GET", access_entity=DagAccessEntity.RUN, param_dag_id=history_dag)

    def health_page(table: str | None, kind: str) -> Response:
        from .commands.lake_report import LAKE_RENDERERS, lake_report, render_lake_html

        uri, conn_id, _ = health_settings()
        if not uri:
            raise HTTPException(404, f"no maintenance history configured: set [delta] history_uri or {HISTORY_ENV}")
        try:
            report = lake_report(uri, table=table, storage_options=storage_options(uri, conn_id))
        except DeltaError as err:
            raise HTTPException(502, f"the maintenance history cannot be read: {type(err).__name__}") from None
        if table is not None and not report["tables"]:
            raise HTTPException(404, "the maintenance history names no such table")
        if kind == "html":
            text = render_lake_html(report, table_link=None if table else "health/table?uri=")
        else:
            text = LAKE_RENDERERS[kind](report)
        return Response(text, media_type=MEDIA_TYPES[kind], headers=HEADERS)

    @app.get("/health", dependencies=[Depends(runs_access)])
    def lake_health(kind: Annotated[str, Query(pattern="^(html|md|json)$")] = "html") -> Response:
        """The lake report of the maintenance history: every table's health across runs, spent and saved."""
        return health_page(None, kind)

    @app.get("/health/table", dependencies=[Depends(runs_access)])
    def table_health(
        uri: Annotated[str, Query(min_length=1, max_length=4096)],
        kind: Annotated[str, Query(pattern="^(html|md|json)$")] = "html",
    ) -> Response:
        """One table's health across runs, for a table the maintenance history names."""
        return health_page(uri, kind)

    return app


class DeltaReportsPlugin(AirflowPlugin):
    """Mounts the report and health pages in the API server; the health page in the UI's menu."""

    name = "delta_reports"
    external_views = [EXTERNAL_VIEW]  # noqa: RUF012 - AirflowPlugin's own class attribute

    @cached_property
    def fastapi_apps(self) -> list[dict[str, Any]]:  # type: ignore[override]
        return [{"app": build_app(), "url_prefix": URL_PREFIX, "name": "Delta reports"}]


#: The `airflow.plugins` entry point: the plugin unless the provider info already loads it.
ENTRY_POINT = DeltaReportsPlugin if getattr(settings, "LAZY_LOAD_PROVIDERS", True) else None
