"""What an engine does for the library: turn a `LogSegment` into a `TableState`.

The protocol decisions (which files, in which order, how actions reconcile) live in `log_segment`,
`replay` and `file_state`; an engine only reads the files it is given and runs that logic where it
wants: `engines.local` in this process with pyarrow, `engines.spark` on a cluster.
"""

from __future__ import annotations

from typing import TYPE_CHECKING
from typing import Protocol as TypingProtocol

if TYPE_CHECKING:  # pragma: no cover
    from ..protocol.log_segment import LogSegment
    from ..read.table_state import TableState
    from ..storage import LogStore


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
