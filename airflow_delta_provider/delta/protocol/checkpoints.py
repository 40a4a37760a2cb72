"""Checkpoint layout (PROTOCOL.md "Checkpoints"): which columns hold which actions, and where a V2
checkpoint's sidecars live. Pure: names in, names out."""

from __future__ import annotations

from collections.abc import Callable

from .filenames import SIDECAR_DIR_NAME

#: Checkpoint columns holding actions other than `add` and `remove`.
NON_FILE_COLUMNS = ("protocol", "metaData", "txn", "domainMetadata", "checkpointMetadata", "sidecar")


def sidecar_path(join: Callable[..., str], log_dir: str, path: str) -> str:
    """Where a V2 checkpoint's `sidecar.path` lives: absolute as given, else under `_delta_log/_sidecars`."""
    if "://" in path or path.startswith("/"):
        return path
    return join(log_dir, SIDECAR_DIR_NAME, path)
