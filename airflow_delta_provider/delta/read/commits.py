"""Reading commit files from a store: the bytes, then `protocol.commits` parses them."""

from __future__ import annotations

from ..errors import StorageError
from ..protocol.actions import Action
from ..protocol.commits import parse_commit
from ..protocol.filenames import ParsedLogPath
from ..storage import LogStore


def read_commit(store: LogStore, table: str, commit: ParsedLogPath) -> list[Action]:
    """The actions of one commit file, in log order."""
    try:
        data = store.read_bytes(commit.file.path)
    except FileNotFoundError:
        raise StorageError(
            "Commit file listed but no longer readable (was the log cleaned up concurrently?)",
            table=table,
            version=commit.version,
            file=commit.name,
        ) from None
    except OSError as exc:
        raise StorageError(
            f"Cannot read commit: {type(exc).__name__}: {exc}",
            table=table,
            version=commit.version,
            file=commit.name,
            transient=not isinstance(exc, PermissionError),
        ) from None
    return parse_commit(data, table=table, version=commit.version, file=commit.name)
