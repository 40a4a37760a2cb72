"""`deltalog`'s progress display: the library's progress callbacks (`delta.progress.PROGRESS`)
drawn on stderr with `rich`, only when stderr is a terminal. Nothing is drawn into a pipe or a file, and
never on stdout, so `--json` output and redirected text stay exactly the result."""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator
from typing import Any, TextIO

#: Set (to anything but empty) to never draw progress, even at a terminal.
NO_PROGRESS_ENV = "DELTALOG_NO_PROGRESS"
#: A phase's counts are passed on at most this often (its start and end always).
MIN_INTERVAL_S = 0.05


def wanted(err: TextIO | None) -> bool:
    """Progress is drawn on `err` when it is a terminal and `DELTALOG_NO_PROGRESS` is not set."""
    if err is None or os.environ.get(NO_PROGRESS_ENV):
        return False
    try:
        return bool(err.isatty())
    except (AttributeError, ValueError):  # no isatty, or closed
        return False


@contextlib.contextmanager
def progress_display(err: TextIO | None, title: str) -> Iterator[None]:
    """While the block runs: a `title` spinner with the time taken, and one line per phase the library
    reports (`phase done/total`, a bar when the total is known), drawn on `err` when `wanted(err)` and
    erased at the end. A failure of the display never fails the command: it stops drawing."""
    if not wanted(err):
        yield
        return
    from rich.console import Console
    from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    from ..delta.progress import PROGRESS

    bar = Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        TimeElapsedColumn(),
        console=Console(file=err, stderr=True),
        transient=True,
        redirect_stdout=False,  # stdout is the result's
    )
    phases: dict[str, tuple[Any, int | None]] = {}  # phase -> (task, total)
    lock = threading.Lock()
    broken = False
    drawn = 0.0

    def report(phase: str, done: int, total: int | None) -> None:
        nonlocal broken, drawn
        now = time.monotonic()
        if broken or (phase in phases and done != total and now - drawn < MIN_INTERVAL_S):
            return  # a callback per file costs a comparison, not a redraw
        drawn = now
        try:
            with lock:
                for other, (task, other_total) in phases.items():  # a new phase ends the ones before it
                    if other != phase:
                        bar.update(task, total=other_total or 1, completed=other_total or 1)
                if total is None:  # a count so far (directories, folders listed), or the phase alone
                    text = f"{phase} {done:,}" if done > 0 else phase
                else:
                    text = phase if total <= 1 else f"{phase} {done:,}/{total:,}"
                task = phases[phase][0] if phase in phases else bar.add_task(text, total=total)
                phases[phase] = (task, total)
                bar.update(task, description=text, total=total, completed=done)
        except Exception:  # drawing is best effort: stop drawing, keep running
            broken = True

    bar.add_task(title, total=None)
    token = PROGRESS.set(report)
    try:
        with bar:
            yield
    finally:
        PROGRESS.reset(token)
