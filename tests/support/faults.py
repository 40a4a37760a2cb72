"""Fault injection by wrapping a store (the package carries no test seam; delta-kernel-rs does the same
with `engine/test_delegating.rs`): `KillingStore` SIGKILLs its process at a named step of a write,
leaving storage exactly as a crash there would."""

from __future__ import annotations

import os
import re
import signal
import uuid
from collections.abc import Callable
from typing import Any

from airflow_delta_provider.delta.storage import local_path

_TOP_CHECKPOINT = re.compile(r"(^|/)_delta_log/\d{20}\.checkpoint(\.[^/]*)?\.parquet$")
_LAST_CHECKPOINT = re.compile(r"(^|/)_delta_log/_last_checkpoint$")
_WRITE_VERBS = ("put_if_absent", "put", "write_new")

#: The steps a checkpoint write can be killed at:
#: - `before_write`: the first write verb (nothing written);
#: - `sidecars_written` (and on Spark `executor_files_written`): the driver's put of the top-level
#:   checkpoint file, after the sidecars or parts are stored;
#: - `temp_file_half_written`: that put, after half its bytes went to the hidden temp file beside it
#:   (what a crash inside `LocalLogStore.put_if_absent` leaves);
#: - `after_checkpoint_file`: right after the top-level file is stored (not verified, no hint);
#: - `after_last_checkpoint`: right after `_last_checkpoint` is written.
STEPS = (
    "before_write",
    "sidecars_written",
    "executor_files_written",
    "temp_file_half_written",
    "after_checkpoint_file",
    "after_last_checkpoint",
)


def _kill() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


class KillingStore:
    """Delegates every verb to `inner` and SIGKILLs this process at `step` (see `STEPS`).

    Only the process that made it is killed: a copy unpickled elsewhere (a Spark worker) passes
    everything through."""

    def __init__(self, inner: Any, step: str) -> None:
        if step not in STEPS:
            raise ValueError(f"unknown step {step!r}; one of {STEPS}")
        self._inner, self._step, self._pid = inner, step, os.getpid()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if name in _WRITE_VERBS and callable(attr) and os.getpid() == self._pid:
            return self._wrap(name, attr)
        return attr

    def _wrap(self, verb: str, fn: Callable[[str, bytes], None]) -> Callable[[str, bytes], None]:
        step = self._step

        def call(path: str, data: bytes) -> None:
            top = bool(_TOP_CHECKPOINT.search(path))
            if step == "before_write":
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
