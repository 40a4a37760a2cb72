"""Progress reporting: the library's operations tell a callback `(phase, done, total)` how far they are.

The bottom layer (it imports nothing from the package), so storage, engines, maintenance and lake code all
report to the same context callback. Reporting only observes: nothing a callback does changes a decision.
A `ContextVar` is not seen by pool threads: read `PROGRESS.get()` (or call `report_progress`) in the calling
thread, from the loop that collects the pool's results.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import ParamSpec, TypeVar

__all__ = ["PROGRESS", "Progress", "progress_to", "report_progress", "with_progress"]

#: A progress callback, `(phase, done, total)`: `total` is None while unknown; a phase ends when `done ==
#: total` or the next one starts. It only observes: nothing it does changes what an operation decides.
Progress = Callable[[str, int, "int | None"], None]
P = ParamSpec("P")
R = TypeVar("R")
#: The progress callback of the operations running in this context (`deltalog` sets one when stderr is a
#: terminal), so a face shows progress without threading it through the command layer; an operation's
#: `progress=` argument sets it for one call.
PROGRESS: ContextVar[Progress | None] = ContextVar("delta_progress", default=None)


def report_progress(phase: str, done: int, total: int | None = None) -> None:
    """Tell the context's progress callback (`PROGRESS`), if there is one."""
    callback = PROGRESS.get()
    if callback is not None:
        callback(phase, done, total)


def with_progress(fn: Callable[P, R]) -> Callable[P, R]:
    """`fn` run with its `progress=` keyword argument as the context's callback (`progress_to`)."""

    @functools.wraps(fn)
    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        with progress_to(kwargs.get("progress")):  # type: ignore[arg-type]
            return fn(*args, **kwargs)

    return run


@contextmanager
def progress_to(progress: Progress | None) -> Iterator[None]:
    """`progress` as the context's callback while the block runs (None: the context's stays)."""
    if progress is None:
        yield
        return
    token = PROGRESS.set(progress)
    try:
        yield
    finally:
        PROGRESS.reset(token)
