"""Fault injection by wrapping a store (the package carries no test seam; delta-kernel-rs does the same
with `engine/test_delegating.rs`): `KillingStore` SIGKILLs its process at a named step of a write or of
a move, leaving storage exactly as a crash there would. `CopyDeleteLocalStore` is a local store that
moves as object stores do (a copy, then a delete)."""

from __future__ import annotations

import errno
import os
import re
import signal
import threading
import uuid
from collections.abc import Callable
from typing import Any

from airflow_delta_provider.delta.storage import LocalLogStore, local_path

_TOP_CHECKPOINT = re.compile(r"(^|/)_delta_log/\d{20}\.checkpoint(\.[^/]*)?\.parquet$")
_LAST_CHECKPOINT = re.compile(r"(^|/)_delta_log/_last_checkpoint$")
_WRITE_VERBS = ("put_if_absent", "put", "write_new")
#: A quarantine's completion markers (`protocol.quarantine`): after the moves of a VACUUM or an undo.
_QUARANTINE_MARKER = re.compile(r"(^|/)_delta_quarantine/[^/]+/(quarantined|restored)\.json$")

#: The steps a checkpoint write can be killed at:
#: - `before_write`: the first write verb (nothing written);
#: - `sidecars_written` (and on Spark `executor_files_written`): the driver's put of the top-level
#:   checkpoint file, after the sidecars or parts are stored;
#: - `temp_file_half_written`: that put, after half its bytes went to the hidden temp file beside it
#:   (what a crash inside `LocalLogStore.put_if_absent` leaves);
#: - `after_checkpoint_file`: right after the top-level file is stored (not verified, no hint);
#: - `after_last_checkpoint`: right after `_last_checkpoint` is written.
#:
#: and a quarantine's moves (VACUUM `quarantine=True`, `undo_quarantine`), counted by `at` (1-based):
#: - `move`: the `at`-th call of `move`, before it moves (the manifest, or the undo's marker, is written;
#:   `at=1`: nothing moved yet);
#: - `move_copied`: the `at`-th move copies the file to its destination (`put_if_absent` of its bytes:
#:   whole or not at all) and is killed before deleting the source: what a crash inside a copy+delete
#:   move leaves (use it with a store whose `move_method` is `copy+delete`);
#: - `after_move`: right after the `at`-th move;
#: - `before_marker`: at the write of the completion marker (`quarantined.json`, `restored.json`), every
#:   move done.
MOVE_STEPS = ("move", "move_copied", "after_move", "before_marker")
STEPS = (
    "before_write",
    "sidecars_written",
    "executor_files_written",
    "temp_file_half_written",
    "after_checkpoint_file",
    "after_last_checkpoint",
    *MOVE_STEPS,
)


def _kill() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


class KillingStore:
    """Delegates every verb to `inner` and SIGKILLs this process at `step` (see `STEPS`).

    Only the process that made it is killed: a copy unpickled elsewhere (a Spark worker) passes
    everything through."""

    def __init__(self, inner: Any, step: str, at: int = 1) -> None:
        if step not in STEPS:
            raise ValueError(f"unknown step {step!r}; one of {STEPS}")
        self._inner, self._step, self._pid, self._at = inner, step, os.getpid(), at
        self._moves = 0
        self._lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if name in _WRITE_VERBS and callable(attr) and os.getpid() == self._pid:
            return self._wrap(name, attr)
        if name == "move" and os.getpid() == self._pid:
            return self._move
        return attr

    def _move(self, src: str, dst: str) -> None:
        with self._lock:  # moves may run on threads (copy+delete stores)
            self._moves += 1
            n = self._moves
        here = n == self._at
        if here and self._step == "move":
            _kill()
        if here and self._step == "move_copied":
            self._inner.put_if_absent(dst, self._inner.read_bytes(src))
            _kill()
        self._inner.move(src, dst)
        if here and self._step == "after_move":
            _kill()

    def _wrap(self, verb: str, fn: Callable[[str, bytes], None]) -> Callable[[str, bytes], None]:
        step = self._step

        def call(path: str, data: bytes) -> None:
            top = bool(_TOP_CHECKPOINT.search(path))
            if step == "before_write":
                _kill()
            if step == "before_marker" and _QUARANTINE_MARKER.search(path):
                _kill()
            if top and step in ("sidecars_written", "executor_files_written"):
                _kill()
            if top and step == "temp_file_half_written":
                directory, name = os.path.split(local_path(path))
                os.makedirs(directory, exist_ok=True)
                with open(os.path.join(directory, f".{name}.{uuid.uuid4().hex}.tmp"), "xb") as fh:
                    fh.write(data[: len(data) // 2])
                _kill()
            fn(path, data)
            if (top and step == "after_checkpoint_file") or (
                step == "after_last_checkpoint" and _LAST_CHECKPOINT.search(path)
            ):
                _kill()

        return call


class CopyDeleteLocalStore(LocalLogStore):
    """The local store, moving as S3 and GCS do: a copy (here `put_if_absent` of the bytes: whole or not
    at all, as a server-side copy) then a delete of the source; the copy gets a new mtime. Crash tests
    of a quarantine's copy+delete path run on it without a server."""

    move_method = "copy+delete"

    def move(self, src: str, dst: str) -> None:
        if os.path.lexists(local_path(dst)):
            raise FileExistsError(errno.EEXIST, "File exists", dst)
        self.put_if_absent(dst, self.read_bytes(src))
        self.delete_many([src])


class RacingStore:
    """The local store, but before the first commit put another writer commits (`race` runs once)."""

    def __init__(self, race: Any) -> None:
        self._inner, self._race = LocalLogStore(), race

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def put_if_absent(self, path: str, data: bytes) -> None:
        if self._race is not None and "_delta_log" in path:
            race, self._race = self._race, None
            race()
        self._inner.put_if_absent(path, data)
