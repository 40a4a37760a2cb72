"""Discover the Delta tables of a lake: prefixes walked level by level for `_delta_log` folders, plus explicit
table lists.

A folder holding `_delta_log` is a table and is not walked into (its partition folders are data); folders whose
names start with `_` or `.` are skipped as Spark and Hadoop hide them. Each level's listings run on a bounded
thread pool, one delimited listing per folder (`LogStore.list_level`), counted per prefix. A prefix that cannot
be listed is reported with its typed error and never stops the others.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from ..errors import DeltaError, InvalidArgumentError, StorageError
from ..progress import PROGRESS, Progress
from ..protocol.lake_policy import DEFAULT_MAX_DEPTH as DEFAULT_MAX_DEPTH  # its home is the light protocol module
from ..storage import normalize_table_uri, store_for
from .store import CountingStore

LOG_DIR = "_delta_log"
#: The progress phase (`delta.progress`): folders listed, the total known once the walk ends.
LISTING = "LAKE DISCOVER: listing folders"


@dataclass
class Discovery:
    """Tables found (normalized URIs, sorted, no duplicate), errors per prefix, and the listings made."""

    tables: list[str] = field(default_factory=list)
    errors: list[dict[str, Any]] = field(default_factory=list)
    requests: int = 0
    #: Folders at `max_depth` that hold subfolders not walked (raise `max_depth` to look deeper).
    truncated: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"tables": self.tables, "errors": self.errors, "requests": self.requests, "truncated": self.truncated}


def error_dict(exc: BaseException, **where: Any) -> dict[str, Any]:
    """A typed error as a result entry: `DeltaError.to_dict()`, anything else by its class and message."""
    out = exc.to_dict() if isinstance(exc, DeltaError) else {"error_class": type(exc).__name__, "message": str(exc)}
    for key, value in where.items():
        if out.get(key) is None:
            out[key] = value
    return out


def _walk(
    prefix: str,
    store: CountingStore,
    max_depth: int,
    concurrency: int,
    out: Discovery,
    progress: Progress | None,
    listed: list[int],
) -> None:
    """Walk one prefix; when it holds no table, a missing bucket is told from an empty prefix (a listing answers
    both alike) by one HEAD of the bucket (`BucketNotFoundError`). `listed[0]` counts the folders listed (of
    every prefix), told to `progress` (the caller's context callback) as each listing comes back."""
    before = len(out.tables)

    def level(folder: str) -> tuple[str, bool, list[str]]:
        names = [e.name.rstrip("/") for e in store.list_level(folder) if e.is_dir]
        return folder, LOG_DIR in names, [n for n in names if not n.startswith(("_", "."))]

    frontier = [prefix]
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        for depth in range(max_depth + 1):
            below: list[str] = []
            for folder, is_table, subfolders in pool.map(level, frontier):
                listed[0] += 1
                if progress is not None:
                    progress(LISTING, listed[0], None)
                if is_table:
                    out.tables.append(normalize_table_uri(folder))
                elif depth == max_depth and subfolders:
                    out.truncated.append(folder)
                else:
                    below.extend(store.join(folder, name) for name in sorted(subfolders))
            if not below:
                break
            frontier = below
    check_bucket = getattr(store.inner, "check_bucket", None)
    if len(out.tables) == before and check_bucket is not None:
        store.requests["head"] += 1
        check_bucket()


def discover(
    prefixes: Iterable[str] = (),
    *,
    tables: Iterable[str] = (),
    max_depth: int = DEFAULT_MAX_DEPTH,
    storage_options: Mapping[str, Any] | None = None,
    concurrency: int = 8,
) -> Discovery:
    """The tables under `prefixes` (a prefix may itself be a table; tables at most `max_depth` folders below it)
    and the explicit `tables` (taken as given: a scan reports the ones that are not tables)."""
    if isinstance(prefixes, str) or isinstance(tables, str):
        raise InvalidArgumentError("prefixes and tables must be lists of URIs, not one string", argument="prefixes")
    if isinstance(max_depth, bool) or not isinstance(max_depth, int) or max_depth < 0:
        raise InvalidArgumentError(f"max_depth must be an integer >= 0, got {max_depth!r}", argument="max_depth")
    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
        raise InvalidArgumentError(f"concurrency must be an integer >= 1, got {concurrency!r}", argument="concurrency")
    out = Discovery()
    progress = PROGRESS.get()  # read here: the pool's threads do not see the context's callback
    listed = [0]
    for prefix in prefixes:
        prefix = prefix.rstrip("/") or prefix
        try:
            store = CountingStore(store_for(prefix, storage_options))
        except Exception as exc:  # an unknown scheme, a missing filesystem package
            out.errors.append(error_dict(exc, prefix=prefix))
            continue
        try:
            _walk(prefix, store, max_depth, concurrency, out, progress, listed)
        except DeltaError as exc:
            out.errors.append(error_dict(exc, prefix=prefix))
        except OSError as exc:
            error = StorageError(f"Cannot list the prefix: {type(exc).__name__}: {exc}", table=prefix)
            out.errors.append(error_dict(error, prefix=prefix))
        finally:
            out.requests += sum(store.requests.values())
    out.tables = sorted({*out.tables, *(normalize_table_uri(t) for t in tables)})
    if progress is not None:
        progress(LISTING, listed[0], listed[0])
    return out
