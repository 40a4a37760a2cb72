"""RESTORE rules, pure: the files to add back and remove, the merged protocol, the plan and its checks.

Files are told apart by path plus deletion vector (PROTOCOL.md "Action Reconciliation"); the protocol is
never downgraded (Spark `Protocol.merge`). `maintenance.restore` reads the versions, HEADs and commits.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import DeltaError, InvalidArgumentError
from .actions import AddFile, Metadata, Protocol
from .table_features import table_features

RESTORE_OPERATION = "RESTORE"
#: How many missing files the refusal names (Spark: "Missed files (top 100 files)").
MAX_NAMED_MISSING = 100
#: The one legacy feature that readers must support too (reader version 2).
_LEGACY_READER_WRITER_FEATURES = frozenset({"columnMapping"})


class RestoreMissingFilesError(DeltaError):
    """Files the version to restore needs are gone from storage; `missing_files` names up to 100 of them,
    `num_missing` counts them, `version` is the version to restore. Nothing was committed."""

    error_class = "DELTA_RESTORE_MISSING_FILES"
    extra_fields = ("missing_files", "num_missing")

    def __init__(
        self,
        message: str,
        *,
        missing_files: Sequence[str] = (),
        num_missing: int | None = None,
        table: str | None = None,
        version: int | None = None,
    ) -> None:
        self.missing_files = list(missing_files)
        self.num_missing = len(self.missing_files) if num_missing is None else num_missing
        super().__init__(message, table=table, version=version)


class RestorePlanRefusedError(InvalidArgumentError):
    """An earlier dry run's RESTORE plan that the table as it is now would not give. Nothing was committed."""

    error_class = "DELTA_RESTORE_PLAN_REFUSED"


def restore_diff(target: Iterable[AddFile], latest: Iterable[AddFile]) -> tuple[list[AddFile], list[AddFile]]:
    """(files to add back with `dataChange=true`, files to remove), each sorted by path (Spark's two
    left-anti joins on path and deletion vector id)."""
    target_files = {f.key: f for f in target}
    latest_files = {f.key: f for f in latest}
    to_add = [f.with_data_change(True) for k, f in target_files.items() if k not in latest_files]
    to_remove = [f for k, f in latest_files.items() if k not in target_files]
    return sorted(to_add, key=_order), sorted(to_remove, key=_order)


def _order(f: AddFile) -> tuple[str, str]:
    return (f.path, f.key)


def _implicit_features(protocol: Protocol) -> frozenset[str]:
    """The legacy features a protocol without feature lists supports by its versions (Spark
    `implicitlySupportedFeatures`); none when it lists its features."""
    if protocol.min_writer_version >= 7 or protocol.min_reader_version >= 3:
        return frozenset()
    return table_features(protocol)


def merge_protocols(restored: Protocol, latest: Protocol) -> Protocol:
    """The protocol a RESTORE commits (Spark `Protocol.merge`): the higher versions and every feature
    either protocol supports, explicitly or by its legacy versions. Never a downgrade of `latest`."""
    reader = max(restored.min_reader_version, latest.min_reader_version)
    writer = max(restored.min_writer_version, latest.min_writer_version)
    if reader < 3 and writer < 7:
        return Protocol(reader, writer)
    implicit = _implicit_features(restored) | _implicit_features(latest)
    readers: list[str] = []
    writers: list[str] = []
    for p in (latest, restored):
        readers += [f for f in p.reader_features or () if f not in readers]
        writers += [f for f in p.writer_features or () if f not in writers]
    if reader >= 3:
        readers += sorted(f for f in implicit & _LEGACY_READER_WRITER_FEATURES if f not in readers)
    writers += sorted(f for f in implicit if f not in writers)
    return Protocol(
        reader,
        writer,
        reader_features=tuple(readers) if reader >= 3 else None,
        writer_features=tuple(writers) if writer >= 7 else None,
    )


def _entry(f: AddFile) -> dict[str, Any]:
    dv = f.deletion_vector
    return {"path": f.path, "size": f.size, "deletion_vector": None if dv is None else dv.unique_id}


def _identities(entries: Iterable[Mapping[str, Any]]) -> set[tuple[str, str | None]]:
    return {(str(e["path"]), None if e.get("deletion_vector") is None else str(e["deletion_vector"])) for e in entries}


@dataclass
class RestorePlan:
    """What a RESTORE of `table` from `read_version` to `target_version` commits."""

    table: str
    table_id: str
    read_version: int
    target_version: int
    #: the timestamp asked for (the version it resolved to is `target_version`), None when a version was
    timestamp: str | None
    #: files added back (dataChange=true), those gone from storage left out
    to_add: list[AddFile] = field(default_factory=list)
    to_remove: list[AddFile] = field(default_factory=list)
    #: files to add back that storage no longer holds (left out only with `allow_partial`)
    missing: list[AddFile] = field(default_factory=list)
    #: the target version's file count and bytes (before anything is left out)
    target_num_files: int = 0
    target_size_bytes: int = 0
    metadata: Metadata | None = None
    protocol: Protocol | None = None
    metadata_changed: bool = False
    protocol_changed: bool = False
    #: committed before the deleted-file retention: its removed files may have been vacuumed
    beyond_file_retention: bool = False

    def metrics(self) -> dict[str, int]:
        """commitInfo.operationMetrics of a RESTORE (Spark `RestoreTableCommand.computeMetrics`)."""
        return {
            "tableSizeAfterRestore": self.target_size_bytes - sum(f.size for f in self.missing),
            "numOfFilesAfterRestore": self.target_num_files - len(self.missing),
            "numRemovedFiles": len(self.to_remove),
            "numRestoredFiles": len(self.to_add),
            "removedFilesSize": sum(f.size for f in self.to_remove),
            "restoredFilesSize": sum(f.size for f in self.to_add),
        }

    def parameters(self) -> dict[str, Any]:
        """commitInfo.operationParameters (Spark `DeltaOperations.Restore`): the version as text, or the timestamp."""
        return {
            "version": None if self.timestamp is not None else str(self.target_version),
            "timestamp": self.timestamp,
        }

    def to_dict(self) -> dict[str, Any]:
        """The plan as JSON: what `check_plan` compares a fresh plan with."""
        return {
            "table": self.table,
            "table_id": self.table_id,
            "read_version": self.read_version,
            "target_version": self.target_version,
            "timestamp": self.timestamp,
            "files_to_add": [_entry(f) for f in self.to_add],
            "files_to_remove": [_entry(f) for f in self.to_remove],
            "missing_files": [_entry(f) for f in self.missing],
            "metadata_changed": self.metadata_changed,
            "protocol_changed": self.protocol_changed,
            "protocol": None if self.protocol is None else self.protocol.to_json(),
            "beyond_file_retention": self.beyond_file_retention,
        }


def check_missing(plan: RestorePlan, allow_partial: bool) -> None:
    """Refuse (`RestoreMissingFilesError`) a plan with files gone from storage unless `allow_partial`."""
    if not plan.missing or allow_partial:
        return
    named = [f.path for f in plan.missing[:MAX_NAMED_MISSING]]
    raise RestoreMissingFilesError(
        f"Not all files of version {plan.target_version} are in storage: {len(plan.missing)} missing "
        f"(vacuumed or deleted), first {len(named)}: {', '.join(named)}. Restore a more recent version, or "
        "allow a partial restore that leaves them out; nothing was committed",
        missing_files=named,
        num_missing=len(plan.missing),
        table=plan.table,
        version=plan.target_version,
    )


def check_plan(planned: Mapping[str, Any], fresh: RestorePlan) -> None:
    """Refuse (`RestorePlanRefusedError`) applying `planned` (a dry run's `RestorePlan.to_dict()`) unless
    `fresh`, planned now, commits the same thing."""

    def refuse(why: str) -> RestorePlanRefusedError:
        return RestorePlanRefusedError(
            f"{why}: nothing was committed; plan the restore again", argument="plan", table=fresh.table
        )

    if not isinstance(planned, Mapping) or "target_version" not in planned:
        raise refuse("The plan is not a RESTORE plan (no target_version)")
    if planned.get("table") != fresh.table:
        raise refuse(f"The plan is for table {planned.get('table')}, not {fresh.table}")
    if planned.get("table_id") not in (None, fresh.table_id):
        raise refuse(f"The plan is for table id {planned.get('table_id')}, the table's id is {fresh.table_id}")
    read_version = planned.get("read_version")
    if isinstance(read_version, int) and read_version > fresh.read_version:
        raise refuse(
            f"The plan was made at version {read_version}, newer than the table's latest ({fresh.read_version})"
        )
    if planned["target_version"] != fresh.target_version:
        raise refuse(f"The plan restores version {planned['target_version']}, not {fresh.target_version}")
    for key, files, what in (
        ("files_to_add", fresh.to_add, "add back"),
        ("files_to_remove", fresh.to_remove, "remove"),
        ("missing_files", fresh.missing, "leave out as missing"),
    ):
        then, now = _identities(planned.get(key) or ()), _identities(_entry(f) for f in files)
        if then != now:
            changed = sorted(p for p, _ in then ^ now)
            raise refuse(
                f"The table moved since the plan at version {read_version}: the files to {what} at version "
                f"{fresh.read_version} differ ({len(then ^ now)}, e.g. {changed[0]})"
            )
