"""Where results and their renderings live: a result is a JSON file at its `result_uri` (a local path or an
object-store URI, read and written through fsspec), its renderings are its siblings (`.md`, `.html`), and the earlier
results of a task are the other JSON files in its folder (the chart points across runs)."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

from ..delta.storage import is_local, local_path
from .report_data import run_point
from .reports import MAX_RUNS


def _fs(uri: str, storage_options: Mapping[str, Any] | None) -> tuple[Any, str]:
    import fsspec

    return fsspec.core.url_to_fs(uri, **dict(storage_options or {}))


def write_result(uri: str, result: Mapping[str, Any], storage_options: Mapping[str, Any] | None = None) -> None:
    """Write `result` as JSON to `uri` atomically (temp file + rename locally, one PUT on object stores)."""
    write_text(uri, json.dumps(result, indent=2, default=str) + "\n", storage_options)


def read_result(uri: str, storage_options: Mapping[str, Any] | None = None) -> dict[str, Any] | None:
    """The JSON result at `uri`, or None when there is none (or it is not JSON)."""
    try:
        if is_local(uri):
            with open(local_path(uri), encoding="utf-8") as fh:
                return json.load(fh)
        fs, path = _fs(uri, storage_options)
        return json.loads(fs.cat_file(path))
    except (FileNotFoundError, ValueError):
        return None


def _table_key(uri: str) -> str:
    """A table URI compared across results (some name a local table as a path, some as `file://`)."""
    return uri.removeprefix("file://").rstrip("/")


def previous_runs(
    result_uri: str, action: str, table: str, storage_options: Mapping[str, Any] | None = None
) -> list[dict[str, Any]]:
    """The chart points (`report_data.run_point`) of the earlier successful results of `action` on `table` in
    `result_uri`'s folder (an operator's `dag/task/` folder holds one task's runs), oldest first, the last
    `MAX_RUNS`; none when the folder cannot be listed."""
    target = result_uri.removeprefix("file://")
    folder, own = target.rsplit("/", 1) if "/" in target else (".", target)
    try:
        if is_local(result_uri):
            path = local_path(folder)
            entries = [(e.name, e.stat().st_mtime) for e in os.scandir(path) if e.is_file()]
        else:
            fs, path = _fs(folder, storage_options)
            entries = []
            for info in fs.ls(path, detail=True):
                stamp = info.get("mtime") or info.get("LastModified") or info.get("updated") or 0
                stamp = stamp.timestamp() if hasattr(stamp, "timestamp") else float(stamp or 0)
                entries.append((info["name"].rsplit("/", 1)[-1], stamp))
    except (OSError, ValueError):  # no folder yet, or one this process may not list: no earlier runs
        return []
    names = sorted((mtime, name) for name, mtime in entries if name.endswith(".json") and name != own)
    points = []
    for mtime, name in names[-MAX_RUNS * 2 :]:  # a folder shared with other actions may hold others
        result = read_result(f"{folder}/{name}", storage_options)
        if not isinstance(result, dict) or result.get("status") != "success" or result.get("action") != action:
            continue
        if _table_key(str(result.get("table"))) != _table_key(table):
            continue
        point = run_point(result, name=name, finished_ms=int(mtime * 1000))
        if point is not None:
            points.append(point)
    return points[-MAX_RUNS:]


def write_text(uri: str, text: str, storage_options: Mapping[str, Any] | None = None) -> None:
    data = text.encode()
    if is_local(uri):
        path = local_path(uri)
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        tmp = f"{path}.tmp-{os.getpid()}"
        with open(tmp, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
        return
    fs, path = _fs(uri, storage_options)
    fs.pipe_file(path, data)


def sibling(uri: str, ext: str) -> str:
    """`result.json` -> `result.<ext>`: where a rendering of a result goes."""
    base = uri[: -len(".json")] if uri.endswith(".json") else uri
    return f"{base}.{ext}"
