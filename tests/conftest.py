"""Shared fixtures for the Delta log tests: the reference corpus and safe copies of its tables."""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

import pytest

from airflow_delta_provider.delta import DeltaLog

#: The reference Delta tables (read-only). `DELTA_TABLES_DIR` points the tests at another copy.
CORPUS: Path = Path(
    os.environ.get("DELTA_TABLES_DIR") or Path(__file__).resolve().parents[2] / "shared" / "delta-tables"
).resolve()


def copy_table(name: str, tmp_path: Path) -> Path:
    """Copy the corpus table `name` (a root relative to CORPUS) under `tmp_path` and return the copy.

    `copy2` keeps the files' mtimes; the copy is made writable (the corpus is read-only), which changes
    no mtime. Tests that change mtimes or files work on the copy, never on the corpus.
    """
    src = CORPUS / name
    dst = tmp_path / name
    shutil.copytree(src, dst, copy_function=shutil.copy2, symlinks=False)
    for path in [dst, *dst.rglob("*")]:
        if not path.is_symlink():
            path.chmod(path.stat().st_mode | stat.S_IWUSR)
    return dst


@pytest.fixture(autouse=True)
def _clear_delta_log_cache():
    """Every test starts with an empty `DeltaLog` cache (instances are cached per table path)."""
    DeltaLog.clear_cache()
    yield
    DeltaLog.clear_cache()
