"""What an engine does for the library: where work runs, never what it decides (as delta-kernel-rs's
`Engine` hands out handlers). Operations decide, plan and commit; the executors move the bytes."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar
from typing import Protocol as TypingProtocol

if TYPE_CHECKING:  # pragma: no cover
    from ..delta_log import DeltaLog
    from ..protocol.actions import Action, AddFile
    from ..protocol.checkpoints import CheckpointPlan
    from ..protocol.log_segment import LogSegment
    from ..protocol.optimize import Bin
    from ..protocol.vacuum import PlannedFile, VacuumPlan
    from ..protocol.zorder import ZOrderColumn
    from ..read.table_state import TableState
    from ..snapshot import Snapshot
    from ..storage import LogStore
    from ..write.checkpoint_file import CheckpointResult
    from ..write.data_files import TableLayout


class CheckpointWriter(TypingProtocol):
    """Publishes and verifies a planned checkpoint (`actions`: its non-file rows); not `_last_checkpoint`."""

    def write(self, snapshot: Snapshot, plan: CheckpointPlan, actions: list[Action]) -> CheckpointResult: ...


class BinRewriter(TypingProtocol):
    """Rewrites OPTIMIZE's bins and returns each bin's new `add` (None: no row left), in order."""

    def __call__(
        self, layout: TableLayout, bins: Sequence[Bin], *, store: LogStore, clock: Callable[[], int]
    ) -> list[AddFile | None]: ...


class StatsRecomputer(TypingProtocol):
    """Recomputes the `add.stats` JSON of each file from its rows (the statistics backfill), in order."""

    def __call__(self, layout: TableLayout, files: Sequence[AddFile], *, store: LogStore) -> list[str]: ...


class ZOrderRewriter(TypingProtocol):
    """Rewrites each ZORDER bin (every file of one partition) sorted by the z-order key of `columns`
    (`protocol.zorder.zorder_key`), cut into files of about `target_size`; returns each bin's new adds, in
    order. A bin it cannot sort within its memory is refused (`ResourceLimitError`) before any is read."""

    def __call__(
        self,
        layout: TableLayout,
        bins: Sequence[Bin],
        columns: Sequence[ZOrderColumn],
        *,
        target_size: int,
        store: LogStore,
        clock: Callable[[], int],
    ) -> list[list[AddFile]]: ...


class FileChecker(TypingProtocol):
    """Repair's HEAD checks (rules: `engines.missing_files`; a storage failure other than "not found" raises
    `StorageError`)."""

    def missing(
        self,
        store: LogStore,
        table_root: str,
        files: Sequence[AddFile],
        *,
        deletion_vectors: bool = False,
        table: str | None = None,
    ) -> list[AddFile]:
        """The files among `files` whose data file (with `deletion_vectors`, or stored DV) storage no longer
        holds, in order."""

    def missing_active(self, snapshot: Snapshot) -> tuple[int, list[AddFile]]:
        """How many active files of `snapshot` were checked, and those whose data file storage no longer
        holds, by path (a distributed state's files are checked where they are, never collected)."""


class Revalidation(NamedTuple):
    """A plan re-validated against the latest snapshot and storage: `plan` keeps what may still be deleted;
    `dropped` (with `reasons`) and `missing` are bounded samples, `num_*` count all; `handle` is the
    executor's own, `release` frees it."""

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
    """Where a FULL plan's listing, a plan's re-validation and its deletes run (rules: `protocol.vacuum`).
    `can_quarantine`: `move` is there (an executor without it is refused `quarantine=True` up front)."""

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
        """The FULL plan at `cutoff_ms` (untracked files younger than the grace period left out, counted)."""

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

    def delete(self, dlog: DeltaLog, checked: Revalidation, *, batch_size: int) -> Deleted:
        """Delete what `checked` keeps, in batches of `batch_size`; empty directories left on local stores too."""

    def move(self, dlog: DeltaLog, checked: Revalidation, *, destination: str) -> Deleted:
        """Move what `checked` keeps to `destination/<its path>` (relative to the table root); only with
        `can_quarantine`."""


class Engine(TypingProtocol):
    """Builds table states from log segments and hands out the executors operations run their heavy work on."""

    name: str
    #: True when state and executors run in this process (its memory is the table's; the GC may be paused)
    in_process: bool

    def load_state(self, table: str, log_dir: str, store: LogStore, segment: LogSegment) -> TableState:
        """Replay `segment` (its checkpoint, then its commits) into a `TableState`."""

    def extend_state(
        self, table: str, log_dir: str, store: LogStore, state: TableState, segment: LogSegment
    ) -> TableState:
        """`state` (at some version) advanced by the commits of `segment` above that version."""

    def for_checkpoint(self) -> Engine:
        """The engine to load a snapshot that will be checkpointed with (every file field read)."""

    def checkpoint_writer(self) -> CheckpointWriter:
        """Where a checkpoint of a snapshot this engine loaded is written."""

    def bin_rewriter(self, *, max_workers: int | None = None) -> BinRewriter:
        """Where OPTIMIZE's bins are rewritten (`max_workers`: threads, on the local engine)."""

    def zorder_rewriter(self, *, max_workers: int | None = None) -> ZOrderRewriter:
        """Where OPTIMIZE ZORDER BY rewrites its partitions."""

    def vacuum_executor(self, *, plan_dir: str | None = None) -> VacuumExecutor:
        """Where VACUUM runs (`plan_dir`: where a distributed plan's file list is kept)."""

    def stats_recomputer(self, *, max_workers: int | None = None) -> StatsRecomputer:
        """Where the statistics backfill reads files and recomputes their stats (`max_workers`: threads, locally)."""

    def file_checker(self, *, max_workers: int | None = None) -> FileChecker:
        """Where repair's HEAD requests run (`max_workers`: requests in flight at once, per process)."""


T = TypeVar("T")
R = TypeVar("R")


def pool_workers(max_workers: int | None, n: int) -> int:
    """Threads for `n` tasks: `max_workers`, else one a core, never more than the tasks nor fewer than one."""
    return min(n, max_workers or os.cpu_count() or 1) or 1


def map_in_order(pool: Executor | None, task: Callable[[T], R], items: Iterable[T]) -> list[R]:
    """`task` of each item on `pool` (None: in this thread), in order; after a task fails no other starts,
    and its error is raised once the running ones are done."""
    if pool is None:
        return [task(x) for x in items]
    futures = [pool.submit(task, x) for x in items]
    try:
        return [f.result() for f in futures]
    finally:
        for f in futures:
            f.cancel()


def run_pooled(task: Callable[[T], R], items: Sequence[T], workers: int, name: str) -> list[R]:
    """`map_in_order` on a pool of `workers` threads named `name` (in this thread for one)."""
    if workers <= 1 or len(items) <= 1:
        return map_in_order(None, task, items)
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix=name) as pool:
        return map_in_order(pool, task, items)


#: HEAD requests in flight at once (delta-rs and Spark run these sequentially or per executor task).
DEFAULT_HEAD_WORKERS = 8


def missing_files(
    store: LogStore,
    table_root: str,
    files: Sequence[AddFile],
    *,
    deletion_vectors: bool = False,
    max_workers: int = DEFAULT_HEAD_WORKERS,
    table: str | None = None,
) -> list[AddFile]:
    """The files among `files` whose data file (with `deletion_vectors`, or stored DV) storage no longer
    holds, in order, at most `max_workers` HEAD requests in flight; a storage failure other than "not
    found" raises (`StorageError`). Both engines' `FileChecker` run this (Spark: on each task's files)."""
    from ..protocol.deletion_vectors import dv_location
    from ..read.deletion_vectors import store_path

    def gone(path: str) -> bool:
        try:
            return store.head(path) is None
        except NotADirectoryError:  # a local path under a file: nothing there
            return True

    def paths(f: AddFile) -> list[str]:
        out = [store_path(store, table_root, f.path)]
        dv = f.deletion_vector
        if deletion_vectors and dv is not None and dv.cardinality > 0:
            loc = dv_location(dv, table_root, table=table, file=f.path)
            if loc.kind == "file":
                out.append(
                    store.join(table_root, *loc.relative_path.split("/")) if loc.relative_path else loc.path or ""
                )
        return out

    if not files:
        return []
    with ThreadPoolExecutor(max_workers=min(max_workers, len(files)), thread_name_prefix="delta-head") as pool:
        lost = list(pool.map(lambda f: any(gone(p) for p in paths(f)), files))
    return [f for f, g in zip(files, lost, strict=True) if g]


class LocalFileChecker:
    """The local engine's `FileChecker`: `missing_files` in this process, `max_workers` HEADs in flight."""

    def __init__(self, max_workers: int | None = None) -> None:
        self.max_workers = max_workers or DEFAULT_HEAD_WORKERS

    def missing(
        self,
        store: LogStore,
        table_root: str,
        files: Sequence[AddFile],
        *,
        deletion_vectors: bool = False,
        table: str | None = None,
    ) -> list[AddFile]:
        return missing_files(
            store, table_root, files, deletion_vectors=deletion_vectors, max_workers=self.max_workers, table=table
        )

    def missing_active(self, snapshot: Snapshot) -> tuple[int, list[AddFile]]:
        files = list(snapshot.all_files(with_stats=True))
        gone = self.missing(snapshot.store, snapshot.table, files, table=snapshot.table)
        return len(files), sorted(gone, key=lambda f: f.path)
