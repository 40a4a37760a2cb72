"""OpenLineage for the operators: the table as an input dataset, and what the task did to it as a run facet.

The table is an input of every operator, never an output: a checkpoint or a log cleanup creates no table
version and changes no row, so an output would claim a write that did not happen. Imported only when the
OpenLineage provider asks (after the task): nothing here runs when lineage is off.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

from attrs import define, field
from openlineage.client.facet_v2 import (
    RunFacet,
    data_quality_assertions_dataset,
    data_quality_metrics_input_dataset,
    dataset_type_dataset,
    dataset_version_dataset,
    datasource_dataset,
    documentation_dataset,
    schema_dataset,
    storage_dataset,
)

from .delta.storage import is_local, local_path
from .get_provider_info import DOCUMENTATION_URL

if TYPE_CHECKING:  # pragma: no cover
    from airflow.providers.openlineage.extractors import OperatorLineage

    from .delta.delta_log import DeltaLog

log = logging.getLogger(__name__)

#: Each command-layer action: its operation as the `delta_operation` run facet names it, and the result's keys
#: the facet's `details` copy.
OPERATIONS: dict[str, tuple[str, tuple[str, ...]]] = {
    "snapshot": (
        "SNAPSHOT_REPLAY",
        ("num_files", "size_bytes", "num_tombstones", "checkpoint_version", "checked_versions"),
    ),
    "tombstones": (
        "TOMBSTONE_REPORT",
        ("num_tombstones", "retained", "expired", "reclaimable_bytes", "retained_bytes"),
    ),
    "checkpoint": (
        "CHECKPOINT",
        ("kind", "written", "num_actions", "num_add_files", "size_in_bytes", "last_checkpoint_updated"),
    ),
    "cleanup_log": ("LOG_CLEANUP", ("cutoff", "num_files", "bytes", "deleted", "earliest_readable_version", "reason")),
    "vacuum": ("VACUUM", ("mode", "cutoff", "num_files", "bytes", "deleted", "deleted_bytes", "directories")),
    "optimize": ("OPTIMIZE", ("read_version", "num_files_removed", "num_files_added", "bytes_removed", "bytes_added")),
    "restore": ("RESTORE", ("read_version", "target_version", "metrics")),
    "repair": ("FSCK", ("read_version", "metrics")),
}

#: OpenLineage's namespace scheme per URI scheme (object stores; Azure's carry the account host).
_SCHEMES = {"s3": "s3", "s3a": "s3", "s3n": "s3", "gs": "gs", "gcs": "gs", "abfs": "abfss", "abfss": "abfss"}
_SCHEMES.update(az="abfss", wasb="wasbs", wasbs="wasbs")


@define
class DeltaOperationRunFacet(RunFacet):
    """What a Delta task did to its table (custom run facet `delta_operation`): the operation (`OPERATIONS`),
    the version read, whether it was a dry run, the engine and the operation's counts (`details`)."""

    operation: str
    tableVersion: int | None = field(default=None)  # OpenLineage facets are camelCase
    dryRun: bool | None = field(default=None)
    engine: str | None = field(default=None)
    details: dict[str, Any] = field(factory=dict)

    @staticmethod
    def _get_schema() -> str:
        return f"{DOCUMENTATION_URL}#lineage"


def table_dataset_name(table_uri: str, account_name: str | None = None) -> tuple[str, str]:
    """(namespace, name) of a table per OpenLineage's dataset naming spec; `account_name` names the Azure
    storage account of an `abfs://container/path` (or `az://`) URI, which carries none itself."""
    if is_local(table_uri):
        return "file", local_path(table_uri).rstrip("/") or "/"
    parts = urlsplit(table_uri)
    scheme, netloc, path = parts.scheme.lower(), parts.netloc, unquote(parts.path).strip("/")
    kind = _SCHEMES.get(scheme)
    if kind in ("abfss", "wasbs"):
        container, _, host = netloc.partition("@")
        account = host.split(".", 1)[0] if host else account_name
        return (f"{kind}://{container}@{account}.dfs.core.windows.net" if account else f"{kind}://{container}"), path
    if kind is not None:
        return f"{kind}://{netloc}", path
    if scheme == "hdfs":
        return f"hdfs://{netloc}", "/" + path
    return (f"{scheme}://{netloc}" if netloc else scheme), path


def _type_string(dtype: Any) -> str:
    """A Delta type as Spark's simple string (`long`, `array<string>`, `map<string,struct<a:int>>`)."""
    if isinstance(dtype, str):
        return dtype
    kind = dtype.get("type")
    if kind == "array":
        return f"array<{_type_string(dtype['elementType'])}>"
    if kind == "map":
        return f"map<{_type_string(dtype['keyType'])},{_type_string(dtype['valueType'])}>"
    if kind == "struct":
        return "struct<" + ",".join(f"{f['name']}:{_type_string(f['type'])}" for f in dtype.get("fields", [])) + ">"
    return str(kind)


def schema_fields(schema: Mapping[str, Any]) -> list[schema_dataset.SchemaDatasetFacetFields]:
    """The fields of a Delta schema (its parsed `schemaString`) as OpenLineage schema fields: nested
    structs as nested `fields`, arrays and maps as their type string, column comments as descriptions."""
    out = []
    for position, f in enumerate(schema.get("fields", []), 1):
        dtype = f["type"]
        nested = isinstance(dtype, Mapping) and dtype.get("type") == "struct"
        comment = (f.get("metadata") or {}).get("comment")
        out.append(
            schema_dataset.SchemaDatasetFacetFields(
                name=f["name"],
                type="struct" if nested else _type_string(dtype),
                description=comment if isinstance(comment, str) else None,
                ordinal_position=position,
                fields=schema_fields(dtype) if nested else [],
            )
        )
    return out


def table_metadata(dlog: DeltaLog, version: int | None = None) -> tuple[int, dict[str, Any]]:
    """(version, metaData action as JSON) at `version` (latest if None), without replaying the files:
    the newest commit of the log segment holding a `metaData`, else the checkpoint's `metaData` column."""
    from .delta.protocol.actions import Metadata
    from .delta.read.checkpoint import non_file_actions, read_parquet
    from .delta.read.commits import read_commit

    segment = dlog.log_segment(version)
    for part in [*reversed(segment.commits), *(segment.checkpoint.files if segment.checkpoint else ())]:
        if part.extension == "json":  # a commit, or a JSON checkpoint
            actions = read_commit(dlog.store, dlog.table_uri, part)
        else:
            actions = non_file_actions(read_parquet(dlog.store, part.file.path, ["metaData"]))
        found = next((a for a in actions if isinstance(a, Metadata)), None)
        if found is not None:
            return segment.version, found.to_json()
    raise LookupError(f"no metaData in the log segment of version {segment.version}")


def _dataset_facets(namespace: str, version: int | None, metadata: Mapping[str, Any] | None) -> dict[str, Any]:
    facets: dict[str, Any] = {
        "storage": storage_dataset.StorageDatasetFacet(storageLayer="delta", fileFormat="parquet"),
        "datasetType": dataset_type_dataset.DatasetTypeDatasetFacet(datasetType="TABLE"),
        "dataSource": datasource_dataset.DatasourceDatasetFacet(name=namespace, uri=namespace),
    }
    if version is not None:
        facets["version"] = dataset_version_dataset.DatasetVersionDatasetFacet(datasetVersion=str(version))
    if metadata:
        schema = metadata.get("schemaString") or metadata.get("schema")  # log JSON, or a result's parsed one
        if isinstance(schema, str):
            schema = json.loads(schema)
        if isinstance(schema, Mapping):
            facets["schema"] = schema_dataset.SchemaDatasetFacet(fields=schema_fields(schema))
        if metadata.get("description"):
            facets["documentation"] = documentation_dataset.DocumentationDatasetFacet(
                description=str(metadata["description"])
            )
    return facets


def _assertions(result: Mapping[str, Any]) -> list[data_quality_assertions_dataset.Assertion]:
    """One assertion per check at the replayed version, one per failing (version, check) in the range."""
    out = [
        data_quality_assertions_dataset.Assertion(
            assertion=c["name"],
            success=bool(c["passed"]),
            description=c.get("message"),
            expected=None if c.get("expected") is None else json.dumps(c["expected"], default=str),
            actual=None if c.get("actual") is None else json.dumps(c["actual"], default=str),
        )
        for c in result.get("checks") or []
    ]
    for failure in result.get("failures") or []:
        out.append(
            data_quality_assertions_dataset.Assertion(
                assertion=str(failure.get("check")),
                success=False,
                name=f"{failure.get('check')}@{failure.get('version')}",
                description=failure.get("message"),
            )
        )
    return out


def operator_lineage(
    action: str,
    result: Mapping[str, Any],
    *,
    storage_options: Mapping[str, Any] | None = None,
) -> OperatorLineage:
    """The `OperatorLineage` of one finished (or failed) job from its full result (`status`, `table`,
    `version`, ... as the command layer writes it). The schema comes from the result when it carries the
    table's metadata (a replay), else from the log (one commit or the checkpoint's `metaData` column)."""
    from airflow.providers.openlineage.extractors import OperatorLineage
    from openlineage.client.event_v2 import InputDataset

    table = str(result.get("table"))
    version = result.get("version")
    metadata = result.get("metadata") if isinstance(result.get("metadata"), Mapping) else None
    if metadata is None and result.get("status") == "success":
        try:
            from .delta import DeltaLog

            read_version, metadata = table_metadata(DeltaLog.for_table(table, storage_options), version)
            version = read_version if version is None else version
        except Exception as exc:  # lineage is best effort: a dataset without its schema facet
            log.debug("no schema for the lineage of %s: %s", table, exc)
    account = (storage_options or {}).get("account_name")
    namespace, name = table_dataset_name(table, account if isinstance(account, str) else None)
    input_facets: dict[str, Any] = {}
    if action == "snapshot" and result.get("status") == "success":
        input_facets["dataQualityMetrics"] = data_quality_metrics_input_dataset.DataQualityMetricsInputDatasetFacet(
            columnMetrics={}, fileCount=result.get("num_files"), bytes=result.get("size_bytes")
        )
    assertions = _assertions(result)
    if assertions:
        input_facets["dataQualityAssertions"] = data_quality_assertions_dataset.DataQualityAssertionsDatasetFacet(
            assertions=assertions
        )
    dataset = InputDataset(
        namespace=namespace,
        name=name,
        facets=_dataset_facets(namespace, version, metadata),
        inputFacets=input_facets,
    )
    name, keys = OPERATIONS.get(action, (action.upper(), ()))
    operation = DeltaOperationRunFacet(
        operation=name,
        tableVersion=version,
        dryRun=result.get("dry_run") if action in ("cleanup_log", "vacuum", "optimize") else None,
        engine=result.get("engine"),
        details={k: result[k] for k in keys if result.get(k) is not None} if result.get("status") == "success" else {},
    )
    return OperatorLineage(inputs=[dataset], run_facets={"delta_operation": operation})
