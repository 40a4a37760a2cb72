"""The local engine: replays the log in this process with pyarrow.

Checkpoints are read as Arrow columns, never one Python object per file, and the commits (replayed with
`InMemoryLogReplay`) are reconciled onto them in bulk (`FileState.apply`). The newest protocol is checked
before any checkpoint file action is read; a state over `memory_limit_bytes` is refused on the footers.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Collection, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Literal

import pyarrow as pa

from ..protocol.actions import Action, AddFile, CommitInfo
from ..protocol.checkpoints import NON_FILE_COLUMNS
from ..protocol.filenames import LogFileKind, ParsedLogPath
from ..protocol.log_segment import CheckpointInstance, LogSegment
from ..protocol.replay import InMemoryLogReplay
from ..protocol.table_features import check_can_read
from ..read.checkpoint import LAZY_STATS_BYTES, CheckpointData, SidecarCheck, read_checkpoint, state_from_checkpoint
from ..read.commits import read_commit
from ..read.file_state import FileState, adds_to_table, iter_adds, iter_removes, removes_to_table
from ..read.memory_budget import MemoryBudget, default_memory_limit
from ..read.table_state import TableState
from ..storage import LogStore
from ..write.data_file_writer import BackgroundStores
from ..write.data_files import compact_bin, compact_bin_files_deferred
from . import pool_workers, run_pooled

if TYPE_CHECKING:  # pragma: no cover
    from ..protocol.optimize import Bin
    from ..write.data_files import TableLayout
    from . import BinRewriter, CheckpointWriter, StatsRecomputer, VacuumExecutor, ZOrderRewriter

#: `lazy_stats_bytes` that makes the local engine read checkpoint stats with everything else.
EAGER_STATS = 1 << 62


class LocalEngine:
    """Replays the log in this process.

    `plain=True` replays every action, checkpoint rows included, through `InMemoryLogReplay`: the reference
    path the columnar one is tested against. `threaded=True` reads an Arrow checkpoint in a second thread
    while the commits after it are replayed; errors keep the sequential order (a commit's, then the protocol
    check's, then the checkpoint's). `file_fields` projects a Parquet checkpoint's file actions onto those
    fields (`read_checkpoint`: the file identity and size are always read, the rest come back null), for a
    reader that needs only them (the lake health); None reads every field, and `for_checkpoint` drops it.
    """

    name = "local"
    in_process = True

    def __init__(
        self,
        *,
        plain: bool = False,
        lazy_stats_bytes: int = LAZY_STATS_BYTES,
        threaded: bool = True,
        memory_limit_bytes: int | Literal["auto"] | None = "auto",
        file_fields: Collection[str] | None = None,
    ) -> None:
        self.plain = plain
        self.file_fields = None if file_fields is None else frozenset(file_fields)
        self.lazy_stats_bytes = lazy_stats_bytes
        self.threaded = threaded
        self.memory_limit_bytes = default_memory_limit() if memory_limit_bytes == "auto" else memory_limit_bytes

    def for_checkpoint(self) -> LocalEngine:
        """This engine reading file stats in the same pass as the rest (a checkpoint needs every one)."""
        engine = copy.copy(self)
        engine.lazy_stats_bytes = EAGER_STATS
        engine.file_fields = None
        return engine

    def checkpoint_writer(self) -> CheckpointWriter:
        from .local_checkpoint import LocalCheckpointWriter

        return LocalCheckpointWriter()

    def bin_rewriter(self, *, max_workers: int | None = None) -> BinRewriter:
        return local_bin_rewriter(max_workers)

    def zorder_rewriter(self, *, max_workers: int | None = None) -> ZOrderRewriter:
        """Partitions sorted in this process, each within `memory_limit_bytes`."""
        from .local_zorder import local_zorder_rewriter

        return local_zorder_rewriter(max_workers, self.memory_limit_bytes)

    def vacuum_executor(self, *, plan_dir: str | None = None) -> VacuumExecutor:
        """This process (`plan_dir` is the Spark engine's)."""
        from .local_vacuum import LocalVacuumExecutor

        return LocalVacuumExecutor()

    def stats_recomputer(self, *, max_workers: int | None = None) -> StatsRecomputer:
        from .local_stats import local_stats_recomputer

        return local_stats_recomputer(max_workers)

    def memory_budget(self, table: str, store: LogStore, segment: LogSegment) -> MemoryBudget | None:
        """The segment checked against `memory_limit_bytes` (None: no limit); `ResourceLimitError` before
        anything but footers is read when it would not fit."""
        if self.memory_limit_bytes is None:
            return None
        budget = MemoryBudget(self.memory_limit_bytes, table, segment.version, store, NON_FILE_COLUMNS)
        parts = segment.checkpoint.files if segment.checkpoint is not None else []
        json_bytes = sum(c.file.size for c in segment.commits)
        json_bytes += sum(p.file.size for p in parts if p.extension == "json")
        budget.add([(p.file.path, p.file.size) for p in parts if p.extension != "json"], json_bytes)
        return budget

    def read_checkpoint(
        self,
        table: str,
        log_dir: str,
        store: LogStore,
        checkpoint: CheckpointInstance,
        check_sidecars: SidecarCheck | None = None,
    ) -> CheckpointData:
        """Read every file of a complete checkpoint with pyarrow, following V2 sidecars."""
        return read_checkpoint(
            table, log_dir, store, checkpoint, self.lazy_stats_bytes, check_sidecars, file_fields=self.file_fields
        )

    def replay_commits(
        self,
        table: str,
        store: LogStore,
        commits: Sequence[ParsedLogPath],
        version: int,
        replay: InMemoryLogReplay | None = None,
    ) -> tuple[InMemoryLogReplay, dict[int, CommitInfo]]:
        """Replay commit files in order onto `replay` (a new one by default), then check that the newest
        protocol among them is readable at `version`; returns the replay and each commit's commitInfo."""
        replay = InMemoryLogReplay() if replay is None else replay
        infos: dict[int, CommitInfo] = {}
        for commit in commits:
            assert commit.kind is LogFileKind.COMMIT
            actions = read_commit(store, table, commit)
            replay.append(commit.version, actions)
            info = next((a for a in actions if isinstance(a, CommitInfo)), None)
            if info is not None:
                infos[commit.version] = info
        if replay.current_protocol is not None:
            check_can_read(replay.current_protocol, table=table, version=version)
        return replay, infos

    def load_state(self, table: str, log_dir: str, store: LogStore, segment: LogSegment) -> TableState:
        budget = self.memory_budget(table, store, segment)
        check = budget.sidecars if budget is not None else None
        checkpoint = segment.checkpoint
        if self.plain:
            replay = InMemoryLogReplay()
            if checkpoint is not None:
                cp = self.read_checkpoint(table, log_dir, store, checkpoint, check)
                state = FileState(cp.adds, cp.removes, stats_loader=cp.stats_loader)
                actions: list[Action] = [*cp.actions, *iter_adds(state.adds_with_stats), *iter_removes(cp.removes)]
                replay.append(checkpoint.version, actions)
            replay, infos = self.replay_commits(table, store, segment.commits, segment.version, replay)
            return TableState(-1, None, None, {}, {}, FileState.empty()).apply(replay, infos)
        # Parquet decoding releases the GIL: the checkpoint is read while the commits are replayed; leaving
        # the pool on an error waits for that read and drops its outcome
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="delta-checkpoint-read") as pool:
            pending: Future[CheckpointData] | None = None
            if checkpoint is not None and segment.commits and self.threaded:
                pending = pool.submit(self.read_checkpoint, table, log_dir, store, checkpoint, check)
            replay, infos = self.replay_commits(table, store, segment.commits, segment.version)
            if checkpoint is None:
                return TableState.empty().apply(replay, infos)
            tables = None
            if pending is not None:  # the commits' rows are built while the checkpoint thread still reads
                tables = (adds_to_table(replay.active_files.values()), removes_to_table(replay.tombstones.values()))
            cp = (
                pending.result()
                if pending is not None
                else self.read_checkpoint(table, log_dir, store, checkpoint, check)
            )
        if replay.current_protocol is None and cp.protocol is not None:
            check_can_read(cp.protocol, table=table, version=segment.version)
        return state_from_checkpoint(checkpoint.version, cp).apply(replay, infos, file_tables=tables)

    def extend_state(
        self, table: str, log_dir: str, store: LogStore, state: TableState, segment: LogSegment
    ) -> TableState:
        new = [c for c in segment.commits if c.version > state.version]
        return state.apply(*self.replay_commits(table, store, new, segment.version))


def local_bin_rewriter(max_workers: int | None = None) -> BinRewriter:
    """Bins on a thread pool (pyarrow releases the GIL; `run_pooled`). With `layout.target_size` each bin's
    result is the list of its new files (`compact_bin_files_deferred`: rows past the target roll over to
    another file), else its one `add` or None (`compact_bin`: the `BinRewriter` contract PURGE and Spark keep).

    Finished files are written by one more thread (`BackgroundStores`, at most `STORE_AHEAD_BYTES` of encoded
    files in flight), every one before this returns or raises: a bin thread no longer idles its core while
    its file is written (a local fsync; on an object store, the PUT of up to a target size) but reads and
    encodes the next bin. On the 2,000-file OPTIMIZE benchmark (`bench/optimize_bench.py`) the 20 writes
    (~7 MiB each, fsynced) kept their bin threads waiting 0.5-0.9 s in all for 0.1 s of CPU (phase timing,
    load 10-21); the wall it saves there is within the noise (in-process interleaved pairs, background vs
    synchronous writes: medians 3.55 vs 3.84 s over 8 pairs at load 4.3, 4.11 vs 3.86 s over 6 at load 3-4).
    What it hides grows with the store's latency (an object store's PUT rather than a local fsync); files
    over `STORE_AHEAD_BYTES` (most outputs at a 100 MiB+ target) are still written by their bin thread.
    """

    def one(
        layout: TableLayout, b: Bin, store: LogStore, clock: Callable[[], int], stores: BackgroundStores
    ) -> AddFile | list[Future[AddFile]] | None:
        try:
            if layout.target_size is None:
                return compact_bin(store, layout, b, now_ms=clock)
            return compact_bin_files_deferred(store, layout, b, now_ms=clock, stores=stores)
        finally:
            # A bin's buffers are freed by now, but pyarrow's default allocator (mimalloc) keeps freed pages
            # per thread for reuse: hand them back once per bin, so a long OPTIMIZE (or the worker process
            # running it) does not hold the high-water mark of every bin. The 2,000-file OPTIMIZE benchmark's
            # peak RSS: 230 MiB without, 215 MiB with; with packed row groups (`DataFileWriter`) 209 without,
            # 198 with (medians of 4 runs each, same CPU). After each input file instead: 196, but +11% CPU.
            pa.default_memory_pool().release_unused()

    def run(
        layout: TableLayout, bins: Sequence[Bin], *, store: LogStore, clock: Callable[[], int]
    ) -> list[AddFile | list[AddFile] | None]:
        workers = pool_workers(max_workers, len(bins))
        with BackgroundStores() as stores:  # leaving it waits for every write handed over
            done = run_pooled(lambda b: one(layout, b, store, clock, stores), bins, workers, "optimize")
            return [[f.result() for f in d] if isinstance(d, list) else d for d in done]

    return run  # type: ignore[return-value]  # BinRewriter: one add per bin, until it takes lists
