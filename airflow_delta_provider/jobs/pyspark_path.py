"""Import PySpark from its byte-compiled installation rather than from Spark's `pyspark.zip`.

spark-submit puts `$SPARK_HOME/python/lib/pyspark.zip` (and py4j's zip) first on the module path of
the driver and of every Python worker daemon. Python keeps no bytecode for modules imported from a
zip, so each of those processes compiles PySpark from source when it starts: `import pyspark.worker`
takes 0.5 s from the zip and 0.1 s from an installed package on the project's machine
(`bench/RESULTS.md`). When the same PySpark version is also installed as a package (pip's `pyspark`,
whose modules were byte-compiled at install; it is where `local[*]` Spark itself comes from), moving
the zips behind it loads the same code without compiling. Nothing changes when no installed copy
exists or its version differs. Standard library only; imports nothing from PySpark.
"""

from __future__ import annotations

import os
import re
import sys
import zipfile
from importlib.machinery import PathFinder

_VERSION = re.compile(r"""__version__(?:\s*:\s*str)?\s*=\s*["']([^"']+)["']""")


def _version_in(text: str) -> str | None:
    match = _VERSION.search(text)
    return match[1] if match else None


def _zip_version(archive: str, member: str) -> str | None:
    try:
        with zipfile.ZipFile(archive) as zf:
            return _version_in(zf.read(member).decode("utf-8", "replace"))
    except (OSError, KeyError, zipfile.BadZipFile):
        return None


def _installed_version(package: str, member: str, path: list[str]) -> str | None:
    spec = PathFinder.find_spec(package, path)
    if spec is None or not spec.origin or not spec.origin.endswith("__init__.py"):
        return None
    try:
        with open(os.path.join(os.path.dirname(spec.origin), member), encoding="utf-8") as fh:
            return _version_in(fh.read())
    except OSError:
        return None


def prefer_installed_pyspark(path: list[str] | None = None) -> list[str]:
    """Move Spark's `pyspark.zip` (and py4j's `py4j-*-src.zip`) behind an installed copy of the same
    version on `path` (default `sys.path`, changed in place). Returns the entries moved; none when
    PySpark is already imported, no installed copy is found, or the versions differ."""
    path = sys.path if path is None else path
    if "pyspark" in sys.modules:
        return []
    moved: list[str] = []
    for package, zip_name, member in (
        ("pyspark", re.compile(r"pyspark\.zip$"), "pyspark/version.py"),
        ("py4j", re.compile(r"py4j-[^/\\]*-src\.zip$"), "py4j/version.py"),
    ):
        zips = [p for p in path if zip_name.search(p)]
        if not zips:
            continue
        rest = [p for p in path if p not in zips]
        wanted = _zip_version(zips[0], member)
        if wanted is None or _installed_version(package, member.rsplit("/", 1)[-1], rest) != wanted:
            continue
        path[:] = rest + zips
        moved.extend(zips)
    return moved
