"""What an engine does for the library: where work runs, never what it decides.

An engine turns a `LogSegment` into a `TableState` and hands out one executor per kind of heavy
work an operation does (as delta-kernel-rs's `Engine` trait hands out handlers): the operation
(`maintenance/<op>.py`) decides, plans and commits; the executor it gets from `snapshot.engine`
moves the bytes. The protocol decisions (which files, in which order, how actions reconcile) live in
`protocol`; `engines.local` runs the work in this process with pyarrow, `engines.spark` on a cluster.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING
from typing import Protocol as TypingProtocol

if TYPE_CHECKING:  # pragma: no cover
    from ..protocol.actions import Action, AddFile
    from ..protocol.checkpoints import CheckpointPlan
    from ..protocol.log_segment import LogSegment
    from ..protocol.optimize import Bin
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


class Engine(TypingProtocol):
    """Builds table states from log segments."""

    name: str

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
