"""What an engine does for the library: where work runs, never what it decides.

An engine turns a `LogSegment` into a `TableState` and hands out one executor per kind of heavy
work an operation does (as delta-kernel-rs's `Engine` trait hands out handlers): the operation
(`maintenance/<op>.py`) decides, plans and commits; the executor it gets from `snapshot.engine`
moves the bytes. The protocol decisions (which files, in which order, how actions reconcile) live in
`protocol`; `engines.local` runs the work in this process with pyarrow, `engines.spark` on a cluster.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple
from typing import Protocol as TypingProtocol

if TYPE_CHECKING:  # pragma: no cover
    from ..delta_log import DeltaLog
    from ..protocol.actions import Action, AddFile
    from ..protocol.checkpoints import CheckpointPlan
    from ..protocol.log_segment import LogSegment
    from ..protocol.optimize import Bin
    from ..protocol.vacuum import PlannedFile, VacuumPlan
    from ..read.table_state import TableState
    from ..snapshot import Snapshot
    from ..storage import LogStore
    from ..write.checkpoint_file import CheckpointResult
    from ..write.data_files import TableLayout


class CheckpointWriter(TypingProtocol):
    """Publishes and verifies a planned checkpoint (`maintenance.checkpoint` checked and planned it;
    `actions` are its non-file rows). Leaves `_last_checkpoint` to the caller."""

    def write(self, snapshot: Snapshot, plan: CheckpointPlan, actions: list[Action]) -> CheckpointResult: ...


class BinRewriter(TypingProtocol):
    """Rewrites OPTIMIZE's bins (`write.data_files.compact_bin` each) and returns each bin's new `add`
    (None: no row left), in order."""

    def __call__(
        self, layout: TableLayout, bins: Sequence[Bin], *, store: LogStore, clock: Callable[[], int]
    ) -> list[AddFile | None]: ...


class Revalidation(NamedTuple):
    """A plan re-validated against the latest snapshot and storage: `plan` keeps what may still be deleted,
    `dropped` lists what was dropped (at most the executor's collect bound of them; `num_dropped` counts
    all) and `reasons` why (aligned with `dropped`), `missing` the entries whose file was gone (bounded the
    same way; `num_missing` counts all), `handle` is the executor's own (Spark: the kept rows), `release`
    frees what it holds."""

    plan: VacuumPlan
    dropped: list[PlannedFile]
    num_dropped: int
    handle: Any = None
    release: Callable[[], None] | None = None
    reasons: Sequence[str] = ()
    missing: Sequence[PlannedFile] = ()
    num_missing: int = 0


class Deleted(NamedTuple):
    files: int
    bytes: int
    directories: int


class VacuumExecutor(TypingProtocol):
    """Where a FULL plan's listing, a plan's re-validation and its deletes run: this process
    (`engines.local_vacuum`) or Spark executors (`engines.spark.vacuum`). The rules are
    `protocol.vacuum`'s either way; the audit commits stay with the operation.

    `in_process`: True when the work runs in this process. `can_quarantine`: True when `move` is there
    (VACUUM's `quarantine=True`, `maintenance.quarantine`); an executor without it (Spark's) is refused
    `quarantine=True` before anything is planned."""

    in_process: bool
    can_quarantine: bool

    def plan_full(
        self,
        dlog: DeltaLog,
        snapshot: Snapshot,
        *,
        cutoff_ms: int,
        retention_ms: int,
        partition_columns: list[str],
        now_ms: int,
        untracked_grace_ms: int,
    ) -> VacuumPlan:
        """The FULL plan at `cutoff_ms` (the table listed, the snapshot's files protected, untracked files
        younger than the grace period at `now_ms` left out and counted)."""
        ...

    def revalidate(
        self,
        dlog: DeltaLog,
        snapshot: Snapshot,
        plan: VacuumPlan,
        *,
        cutoff_ms: int,
        partition_columns: list[str],
        now_ms: int,
        untracked_grace_ms: int,
    ) -> Revalidation:
        """`plan` against `snapshot` and storage now (`protocol.vacuum.revalidate`'s rules)."""
        ...

    def delete(self, dlog: DeltaLog, checked: Revalidation, *, batch_size: int) -> Deleted:
        """Delete what `checked` keeps, in batches of `batch_size`; empty directories left on local stores too."""
        ...

    def move(self, dlog: DeltaLog, checked: Revalidation, *, destination: str) -> Deleted:
        """Move what `checked` keeps to `destination/<its path>` (`destination` relative to the table root),
        one `store.move` each (a file gone meanwhile is not counted); files, bytes moved and the empty
        directories removed (local stores). Only with `can_quarantine`."""
        ...


class Engine(TypingProtocol):
    """Builds table states from log segments and hands out the executors operations run their heavy work on."""

    name: str
    #: True when state and executors run in this process (its memory is the table's; the GC may be paused)
    in_process: bool

    def load_state(self, table: str, log_dir: str, store: LogStore, segment: LogSegment) -> TableState:
        """Replay `segment` (its checkpoint, then its commits) into a `TableState`."""
        ...

    def extend_state(
        self, table: str, log_dir: str, store: LogStore, state: TableState, segment: LogSegment
    ) -> TableState:
        """`state` (at some version) advanced by the commits of `segment` above that version."""
        ...

    def for_checkpoint(self) -> Engine:
        """The engine to load a snapshot that will be checkpointed with (every file field read)."""
        ...

    def checkpoint_writer(self) -> CheckpointWriter:
        """Where a checkpoint of a snapshot this engine loaded is written."""
        ...

    def bin_rewriter(self, *, max_workers: int | None = None) -> BinRewriter:
        """Where OPTIMIZE's bins are rewritten (`max_workers`: threads, on the local engine)."""
        ...

    def vacuum_executor(self, *, plan_dir: str | None = None) -> VacuumExecutor:
        """Where VACUUM's listing, re-validation and deletes run (`plan_dir`: where a distributed plan's
        file list is kept)."""
        ...
