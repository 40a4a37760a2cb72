"""Checkpoint layout and content (PROTOCOL.md "Checkpoints", "Checkpoint Specs", "Checkpoint Schema").

Pure: which columns hold which actions, how checkpoint files are named, which kind a table gets,
which rows a checkpoint of version N holds (retention cutoffs) and the schema of `stats_parsed` and
`partitionValues_parsed`. The writer that turns this into Parquet is `maintenance.checkpoint`.

Kinds (`plan_checkpoint`):

* ``classic``: a V1 `N.checkpoint.parquet`, written when the table lacks `v2Checkpoint`.
* ``v2``: a V2-spec checkpoint (one `checkpointMetadata` row, all non-file actions inline) when the
  table has `v2Checkpoint`: UUID-named `N.checkpoint.<uuid>.parquet`, its file actions inline, or
  in `_delta_log/_sidecars/` parquet files of at most `ACTIONS_PER_SIDECAR` rows when there are more.
  With ``classic_name`` the same content goes under the classic name (no sidecars): the compatibility
  checkpoint old clients can find (PROTOCOL.md "Handling Backward compatibility while moving to
  UUID-named v2 Checkpoints"); log cleanup asks for one before deleting commits (PROTOCOL.md "Metadata Cleanup").
  The local writer never writes a multi-part checkpoint (deprecated; forbidden with `v2Checkpoint`);
  the Spark writer (`engines.spark.checkpoint`) writes one part per partition on classic tables, so
  that no single process holds a huge file list.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from ..errors import InvalidArgumentError
from .actions import Action, DomainMetadata, Metadata, Protocol, SetTransaction
from .filenames import SIDECAR_DIR_NAME, VERSION_DIGITS, checkpoint_name
from .schema import PHYSICAL_NAME_KEY, parse_partition_value
from .table_properties import column_mapping_mode, deleted_file_retention_ms, set_transaction_retention_ms

#: Checkpoint columns holding actions other than `add` and `remove`.
NON_FILE_COLUMNS = ("protocol", "metaData", "txn", "domainMetadata", "checkpointMetadata", "sidecar")

WRITE_STATS_AS_JSON = "delta.checkpoint.writeStatsAsJson"
WRITE_STATS_AS_STRUCT = "delta.checkpoint.writeStatsAsStruct"
NUM_INDEXED_COLS = "delta.dataSkippingNumIndexedCols"
STATS_COLUMNS = "delta.dataSkippingStatsColumns"
DEFAULT_NUM_INDEXED_COLS = 32
#: File actions per V2 sidecar (Spark's part size for V2 checkpoints); fewer are written inline.
ACTIONS_PER_SIDECAR = 50_000

CheckpointKind = Literal["classic", "v2"]

#: Delta types whose min/max `stats_parsed` carries (booleans, binary, arrays, maps, variants only
#: get a null count: kernel-rs `is_skipping_eligible_datatype`, Spark `StatisticsCollection`).
_MIN_MAX_TYPES = frozenset({"byte", "short", "integer", "long", "float", "double", "date", "timestamp"})
_MIN_MAX_TYPES |= {"timestamp_ntz", "string"}


def sidecar_path(join: Callable[..., str], log_dir: str, path: str) -> str:
    """Where a V2 checkpoint's `sidecar.path` lives: absolute as given, else under `_delta_log/_sidecars`."""
    if "://" in path or path.startswith("/"):
        return path
    return join(log_dir, SIDECAR_DIR_NAME, path)


def v2_checkpoint_name(version: int, uuid: str, extension: str = "parquet") -> str:
    """`N.checkpoint.<uuid>.parquet|json`: a UUID-named V2 checkpoint."""
    return f"{version:0{VERSION_DIGITS}d}.checkpoint.{uuid}.{extension}"


def sidecar_name(version: int, part: int, num_parts: int, uuid: str) -> str:
    """A sidecar's file name under `_delta_log/_sidecars`, as Spark names them (unique by the UUID)."""
    return f"{version:0{VERSION_DIGITS}d}.checkpoint.{part:010d}.{num_parts:010d}.{uuid}.parquet"


def sidecar_ranges(num_file_actions: int, parts: int) -> list[tuple[int, int]]:
    """[start, stop) rows of (adds, then tombstones) per sidecar: `parts` ranges of near-equal size."""
    step = -(-num_file_actions // parts)
    return [(i, min(i + step, num_file_actions)) for i in range(0, num_file_actions, step)]


def uses_v2_checkpoints(protocol: Protocol) -> bool:
    """Whether the table has the `v2Checkpoint` feature (reader 3 / writer 7 with the feature named)."""
    return "v2Checkpoint" in (protocol.writer_features or ())


@dataclass(frozen=True, slots=True)
class StatsField:
    """One field of `stats_parsed` value structs: a leaf (a Delta type name) or a struct of fields.

    `name` is the physical name (stats are keyed by physical names under column mapping)."""

    name: str
    type_name: str
    children: tuple[StatsField, ...] = ()

    @property
    def min_max(self) -> bool:
        """Whether min/max values exist for this leaf (or, for a struct, for any leaf under it)."""
        if self.children:
            return any(c.min_max for c in self.children)
        return self.type_name in _MIN_MAX_TYPES or self.type_name.startswith("decimal")


@dataclass(frozen=True, slots=True)
class CheckpointPlan:
    """What a checkpoint of `version` holds and how it is laid out, decided from protocol and metadata."""

    version: int
    kind: CheckpointKind
    classic_name: bool
    stats_as_json: bool
    stats_as_struct: bool
    #: (physical name, Delta type) of each partition column, for `partitionValues_parsed`.
    partition_fields: tuple[tuple[str, str], ...]
    #: data columns `stats_parsed` covers (partition columns excluded).
    stats_fields: tuple[StatsField, ...]
    #: `stats_parsed.tightBounds` exists (Spark adds it when the table supports deletion vectors).
    tight_bounds: bool
    #: tombstones deleted at or before this time (ms) are expired and left out.
    min_file_retention_timestamp: int
    #: txns last updated at or before this time are expired; None: txns never expire.
    min_txn_retention_timestamp: int | None
    actions_per_sidecar: int = ACTIONS_PER_SIDECAR

    @property
    def name(self) -> str | None:
        """The classic file name, or None for a UUID-named V2 checkpoint (the writer draws the UUID)."""
        return checkpoint_name(self.version) if self.kind == "classic" or self.classic_name else None

    def num_sidecars(self, num_file_actions: int) -> int:
        """Sidecar files for this many add/remove rows: 0 (inline) unless UUID-named V2 above the threshold."""
        if self.kind != "v2" or self.classic_name or num_file_actions <= self.actions_per_sidecar:
            return 0
        return -(-num_file_actions // self.actions_per_sidecar)

    def keeps_tombstone(self, deletion_timestamp: int | None) -> bool:
        return (deletion_timestamp or 0) > self.min_file_retention_timestamp

    def keeps_txn(self, last_updated: int | None) -> bool:
        cutoff = self.min_txn_retention_timestamp
        return cutoff is None or (last_updated is not None and last_updated > cutoff)


def _flag(configuration: Mapping[str, str | None], key: str, default: bool) -> bool:
    value = configuration.get(key)
    return default if value is None else str(value).strip().lower() == "true"


def plan_checkpoint(
    protocol: Protocol,
    metadata: Metadata,
    *,
    version: int,
    now_ms: int,
    classic_name: bool = False,
    actions_per_sidecar: int = ACTIONS_PER_SIDECAR,
) -> CheckpointPlan:
    """The checkpoint of `version` for this protocol and metadata, with retention cut at `now_ms`.

    `delta.checkpoint.writeStatsAsJson` defaults to true and `writeStatsAsStruct` to false, as
    PROTOCOL.md states (Spark's newest releases default the struct to true; both are always valid).
    """
    conf = metadata.configuration
    txn_ms = set_transaction_retention_ms(conf)
    partition_fields, stats_fields = _parsed_fields(metadata)
    return CheckpointPlan(
        version=version,
        kind="v2" if uses_v2_checkpoints(protocol) else "classic",
        classic_name=classic_name,
        stats_as_json=_flag(conf, WRITE_STATS_AS_JSON, True),
        stats_as_struct=_flag(conf, WRITE_STATS_AS_STRUCT, False),
        partition_fields=partition_fields,
        stats_fields=stats_fields,
        tight_bounds="deletionVectors" in (protocol.writer_features or ()),
        min_file_retention_timestamp=now_ms - deleted_file_retention_ms(conf),
        min_txn_retention_timestamp=None if txn_ms is None else now_ms - txn_ms,
        actions_per_sidecar=max(1, actions_per_sidecar),
    )


def _parsed_fields(metadata: Metadata) -> tuple[tuple[tuple[str, str], ...], tuple[StatsField, ...]]:
    """(partition fields, stats fields) of the table schema; both empty when the log has no schema."""
    schema = metadata.schema_json or {}
    mapped = column_mapping_mode(metadata.configuration) != "none"
    parts = {c.lower() for c in metadata.partition_columns}
    fields = [f for f in schema.get("fields") or () if isinstance(f, Mapping)]
    by_name = {str(f.get("name")).lower(): f for f in fields}
    partition_fields = tuple(
        (_physical(by_name[c.lower()], mapped), _type_name(by_name[c.lower()].get("type")))
        for c in metadata.partition_columns
        if c.lower() in by_name
    )
    data = [f for f in fields if str(f.get("name")).lower() not in parts]
    conf = metadata.configuration
    if conf.get(STATS_COLUMNS):
        chosen = _stats_columns(data, _column_paths(str(conf[STATS_COLUMNS])), mapped)
    else:
        limit = int(conf.get(NUM_INDEXED_COLS) or DEFAULT_NUM_INDEXED_COLS)
        chosen, _ = _first_leaves(data, limit if limit >= 0 else -1, mapped)
    return partition_fields, tuple(chosen)


def _physical(field: Mapping[str, Any], mapped: bool) -> str:
    md = field.get("metadata") or {}
    return str(md.get(PHYSICAL_NAME_KEY) or field["name"]) if mapped else str(field["name"])


def _type_name(type_: Any) -> str:
    return type_ if isinstance(type_, str) else str((type_ or {}).get("type"))


def _to_stats(field: Mapping[str, Any], mapped: bool, children: Sequence[StatsField] = ()) -> StatsField:
    return StatsField(_physical(field, mapped), _type_name(field.get("type")), tuple(children))


def _struct_fields(field: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    type_ = field.get("type")
    if isinstance(type_, Mapping) and type_.get("type") == "struct":
        return [f for f in type_.get("fields") or () if isinstance(f, Mapping)]
    return []


def _first_leaves(fields: list[Mapping[str, Any]], limit: int, mapped: bool) -> tuple[list[StatsField], int]:
    """The first `limit` leaf columns (-1: all) in schema order, structs kept around them
    (`delta.dataSkippingNumIndexedCols`: arrays, maps and variants count as one leaf)."""
    out: list[StatsField] = []
    for field in fields:
        if limit == 0:
            break
        nested = _struct_fields(field)
        if nested:
            children, limit = _first_leaves(nested, limit, mapped)
            if children:
                out.append(_to_stats(field, mapped, children))
        elif _type_name(field.get("type")) != "struct":
            out.append(_to_stats(field, mapped))
            limit -= 1 if limit > 0 else 0
    return out, limit


def _column_paths(text: str) -> list[tuple[str, ...]]:
    """`delta.dataSkippingStatsColumns`: comma-separated column names, dotted for nested fields,
    backticks quoting names that hold dots or commas."""
    paths: list[tuple[str, ...]] = []
    for item in re.findall(r"(?:`[^`]*`|[^,])+", text):
        parts = re.findall(r"`([^`]*)`|([^.`]+)", item.strip())
        path = tuple((quoted or bare).strip().lower() for quoted, bare in parts)
        if path:
            paths.append(path)
    return paths


def _stats_columns(fields: list[Mapping[str, Any]], paths: list[tuple[str, ...]], mapped: bool) -> list[StatsField]:
    """The fields named by `paths` (a struct named whole brings all its leaves), in schema order."""
    out: list[StatsField] = []
    for field in fields:
        name = str(field.get("name")).lower()
        if any(p == (name,) for p in paths):
            out.extend(_first_leaves([field], -1, mapped)[0])
            continue
        deeper = [p[1:] for p in paths if len(p) > 1 and p[0] == name]
        nested = _struct_fields(field)
        if deeper and nested:
            children = _stats_columns(nested, deeper, mapped)
            if children:
                out.append(_to_stats(field, mapped, children))
    return out


def partition_value_text(raw: str | None, delta_type: str) -> str | None:
    """A partition value rewritten for a typed cast (ISO timestamps with their offset, lower-case
    booleans), or None when it is null or does not parse as `delta_type` (Spark's non-ANSI cast)."""
    try:
        value = parse_partition_value(raw, delta_type)
    except InvalidArgumentError:
        return None
    if value is None or isinstance(value, bytes | str):
        return None if value is None else raw
    if isinstance(value, bool):
        return "true" if value else "false"
    return value.isoformat() if hasattr(value, "isoformat") else str(value)


def non_file_state(actions: Sequence[Action]) -> dict[str, Any]:
    """Protocol, metadata, txns by app id and live domains by name among checkpoint actions."""
    state: dict[str, Any] = {"protocol": None, "metadata": None, "txns": {}, "domains": {}}
    for a in actions:
        if isinstance(a, Protocol):
            state["protocol"] = a
        elif isinstance(a, Metadata):
            state["metadata"] = a
        elif isinstance(a, SetTransaction):
            state["txns"][a.app_id] = a
        elif isinstance(a, DomainMetadata) and not a.removed:
            state["domains"][a.domain] = a
    return state
