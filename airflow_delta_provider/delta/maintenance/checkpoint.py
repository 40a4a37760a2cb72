"""Write a checkpoint: the replayed state of version N as Delta Spark writes it (PROTOCOL.md "Checkpoints").

Refused before anything is written: writer features (`check_can_write`) and stores that cannot write.
The engine's `checkpoint_writer()` publishes with `put_if_absent` (a classic checkpoint that exists is never
overwritten: it may be a cleaned log's only anchor) and verifies against the state, deleting what it created
on a difference (`CheckpointMismatchError`). `_last_checkpoint` is then never moved backwards.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from ..delta_log import DeltaLog
from ..errors import InvalidArgumentError, UnsupportedStoreError
from ..progress import report_progress
from ..protocol.actions import Action
from ..protocol.checkpoints import ACTIONS_PER_SIDECAR, CheckpointPlan, plan_checkpoint
from ..protocol.table_features import check_can_write
from ..snapshot import Snapshot
from ..storage import LogStore
from ..write.checkpoint_file import CheckpointResult, update_last_checkpoint

if TYPE_CHECKING:  # pragma: no cover
    from ..engines import CheckpointWriter

#: Progress phases (`delta.progress`): the checkpoint's files (its parts once written), then the pointer.
WRITING = "CHECKPOINT: writing the checkpoint"
POINTING = "CHECKPOINT: updating _last_checkpoint"


def write_checkpoint(
    snapshot_or_log: Snapshot | DeltaLog,
    *,
    version: int | None = None,
    clock: Callable[[], int] | None = None,
    classic_name: bool = False,
    actions_per_sidecar: int = ACTIONS_PER_SIDECAR,
    executor: CheckpointWriter | None = None,
) -> CheckpointResult:
    """Write the checkpoint of a snapshot (or of `version` / the latest version of a `DeltaLog`).

    :param clock: "now" in ms for tombstone and txn retention; default: the snapshot's clock.
    :param classic_name: on a `v2Checkpoint` table, the V2 content under the classic name.
    :param actions_per_sidecar: most add/remove rows per V2 sidecar (on Spark, per multi-part part too).
    :param executor: writes the files; default: the snapshot's engine's `checkpoint_writer()`.
    :raises UnsupportedStoreError: the store cannot write (before anything is written).
    :raises CheckpointMismatchError: the checkpoint read back differs from the replay.
    """
    snapshot = _snapshot(snapshot_or_log, version)
    store = snapshot.store
    table, log_dir = snapshot.table, snapshot.log_dir
    check_can_write(snapshot.protocol, snapshot.metadata, ["checkpoint"], table=table, version=snapshot.version)
    _check_store(store, table, snapshot.version)
    now = clock() if clock is not None else snapshot.now_ms()
    plan = plan_checkpoint(
        snapshot.protocol,
        snapshot.metadata,
        version=snapshot.version,
        now_ms=now,
        classic_name=classic_name,
        actions_per_sidecar=actions_per_sidecar,
    )
    actions = _non_file_actions(snapshot, plan)
    writer = executor if executor is not None else snapshot.engine.checkpoint_writer()
    report_progress(WRITING, 0)
    result = writer.write(snapshot, plan, actions)
    written = len(result.parts) or 1  # the parts (sidecars/multi-part files) the writer produced, or the file
    report_progress(WRITING, written, written)
    if not result.written:  # a classic checkpoint of this version was already there: nothing to point at
        return result
    report_progress(POINTING, 0, 1)
    updated = update_last_checkpoint(
        store,
        log_dir,
        result.path,
        plan,
        num_actions=result.num_actions,
        size=result.size_in_bytes,
        num_add_files=result.num_add_files,
        parts=len(result.parts) if result.parts else None,
    )
    report_progress(POINTING, 1, 1)
    return replace(result, last_checkpoint_updated=updated)


def _snapshot(snapshot_or_log: Snapshot | DeltaLog, version: int | None) -> Snapshot:
    """The snapshot to write; a `DeltaLog` is loaded afresh by its engine's `for_checkpoint()`."""
    if isinstance(snapshot_or_log, DeltaLog):
        log = snapshot_or_log
        engine = log.engine.for_checkpoint()
        if engine is not log.engine:
            log = DeltaLog(log.table_uri, store=log.store, clock=log.clock, engine=engine)
        return log.update() if version is None else log.snapshot_at(version=version)
    if not isinstance(snapshot_or_log, Snapshot):
        raise InvalidArgumentError(
            f"expected a Snapshot or a DeltaLog, got {type(snapshot_or_log).__name__}", argument="snapshot_or_log"
        )
    if version is not None and version != snapshot_or_log.version:
        raise InvalidArgumentError(
            f"version={version} but the snapshot is at {snapshot_or_log.version}: pass the DeltaLog instead",
            argument="version",
            table=snapshot_or_log.table,
        )
    return snapshot_or_log


def _check_store(store: LogStore, table: str, version: int) -> None:
    """Refuse a store that cannot write files (a read-only store, or one without the write verbs)."""
    verbs = ("put_if_absent", "put", "delete_many")
    if getattr(store, "read_only", False) or not all(callable(getattr(store, v, None)) for v in verbs):
        raise UnsupportedStoreError(
            f"Cannot write a checkpoint: the store {type(store).__name__} is read-only", table=table, version=version
        )


def _non_file_actions(snapshot: Snapshot, plan: CheckpointPlan) -> list[Action]:
    """Protocol, metadata, live domains and unexpired txns, in that order."""
    actions: list[Action] = [snapshot.protocol, snapshot.metadata, *snapshot.domain_metadata.values()]
    return actions + [t for t in snapshot.state.transactions.values() if plan.keeps_txn(t.last_updated)]
