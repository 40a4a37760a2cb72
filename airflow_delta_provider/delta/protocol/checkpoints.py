"""Checkpoint layout and content (PROTOCOL.md "Checkpoints", "Checkpoint Specs", "Checkpoint Schema"), pure.

A table without `v2Checkpoint` gets a classic `N.checkpoint.parquet`; with it, a UUID-named V2 checkpoint
whose file actions go to sidecars above `ACTIONS_PER_SIDECAR`, or with `classic_name` the same content under
the classic name (PROTOCOL.md "Handling Backward compatibility while moving to UUID-named v2 Checkpoints").
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from itertools import groupby
from typing import Any, Literal

from ..errors import InvalidArgumentError
from .actions import Action, DomainMetadata, Metadata, Protocol, SetTransaction
from .filenames import SIDECAR_DIR_NAME, VERSION_DIGITS, checkpoint_name
from .schema import StructType, parse_partition_value
from .stats import StatsColumn, stats_columns
from .table_properties import column_mapping_mode, deleted_file_retention_ms, set_transaction_retention_ms

#: Checkpoint columns holding actions other than `add` and `remove`.
NON_FILE_COLUMNS = ("protocol", "metaData", "txn", "domainMetadata", "checkpointMetadata", "sidecar")

WRITE_STATS_AS_JSON = "delta.checkpoint.writeStatsAsJson"
WRITE_STATS_AS_STRUCT = "delta.checkpoint.writeStatsAsStruct"
#: File actions per V2 sidecar (Spark's part size for V2 checkpoints); fewer are written inline.
ACTIONS_PER_SIDECAR = 50_000

CheckpointKind = Literal["classic", "v2"]


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


@dataclass(frozen=True, slots=True)
class StatsField:
    """One field of `stats_parsed` value structs, by physical name: a leaf (a Delta type) or a struct."""

    name: str
    type_name: str
    children: tuple[StatsField, ...] = ()

    @property
    def min_max(self) -> bool:
        """Whether min/max values exist for this leaf (data files' rule), or for any leaf under a struct."""
        if self.children:
            return any(c.min_max for c in self.children)
        return StatsColumn((self.name,), (self.name,), self.type_name).min_max


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
    """The checkpoint of `version`, retention cut at `now_ms`; `writeStatsAsJson` defaults to true and
    `writeStatsAsStruct` to false, as PROTOCOL.md states (Spark's newest releases default the struct to true)."""
    conf = metadata.configuration
    txn_ms = set_transaction_retention_ms(conf)
    partition_fields, stats_fields = _parsed_fields(metadata)
    return CheckpointPlan(
        version=version,
        kind="v2" if "v2Checkpoint" in (protocol.writer_features or ()) else "classic",
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
    """(partition fields, stats fields) of the table schema, the stats columns as data files' stats have them."""
    schema = StructType.from_json(metadata.schema_json)
    mapped = column_mapping_mode(metadata.configuration) != "none"
    by_name = {f.name.lower(): f for f in schema.fields}
    fields = [by_name[c.lower()] for c in metadata.partition_columns if c.lower() in by_name]
    partition_fields = tuple((f.physical_name if mapped else f.name, f.type_name) for f in fields)
    return partition_fields, _tree(stats_columns(schema, metadata.configuration, metadata.partition_columns))


def _tree(columns: Sequence[StatsColumn], depth: int = 0) -> tuple[StatsField, ...]:
    """Leaf columns (schema order) as nested `StatsField`s."""
    out: list[StatsField] = []
    for name, group in groupby(columns, key=lambda c: c.physical_path[depth]):
        members = list(group)
        if len(members[0].physical_path) == depth + 1:
            out.append(StatsField(name, members[0].type_name))
        else:
            out.append(StatsField(name, "struct", _tree(members, depth + 1)))
    return tuple(out)


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
