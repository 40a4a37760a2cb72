"""The bundled Spark job: where its script is, and the zip that ships the library to executors."""

from __future__ import annotations

import hashlib
import os
import py_compile
import sys
import tempfile
import zipfile
from pathlib import Path

import airflow_delta_provider

PACKAGE_ROOT = Path(airflow_delta_provider.__file__).resolve().parent
ZIP_DATE = (1980, 1, 1, 0, 0, 0)  # fixed entry times: the same sources give the same zip
#: Spark setting naming the Python worker daemon module, and the library's (`jobs/worker_daemon.py`).
DAEMON_MODULE_CONF = "spark.python.daemon.module"
WORKER_DAEMON_MODULE = "airflow_delta_provider.jobs.worker_daemon"


def job_script() -> str:
    """Absolute path of the spark-submit entry point (`delta_job.py`)."""
    return str(PACKAGE_ROOT / "jobs" / "delta_job.py")


def _sources() -> list[Path]:
    return sorted(p for p in PACKAGE_ROOT.rglob("*.py") if "__pycache__" not in p.parts)


def _hash_pyc(path: Path, name: str, scratch: str) -> bytes:
    """Bytecode of the module at `path` as a checked hash-based `.pyc` (PEP 552): valid while the
    source beside it in the zip is unchanged, whatever the zip's timestamps."""
    cfile = os.path.join(scratch, "module.pyc")
    py_compile.compile(
        str(path), cfile=cfile, dfile=name, doraise=True, invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH
    )
    with open(cfile, "rb") as fh:
        return fh.read()


def build_py_files_zip(directory: str | os.PathLike[str] | None = None) -> str:
    """A zip of this package for `spark-submit --py-files`, so workers need nothing but pyspark.

    Each module's bytecode for this interpreter sits beside its source (`name.pyc`, which zipimport
    prefers): Python caches no bytecode for zipped modules, so without it the driver and every Python
    worker compile the library at start. Another Python version ignores these files (the magic number
    differs) and compiles from the sources. Named by a hash of the sources and the interpreter's
    bytecode tag, and reused while neither changes; written atomically.
    """
    sources = _sources()
    digest = hashlib.sha256(sys.implementation.cache_tag.encode() + b"\0")
    for path in sources:
        digest.update(str(path.relative_to(PACKAGE_ROOT)).encode() + b"\0" + path.read_bytes() + b"\0")
    target_dir = Path(directory) if directory else Path(tempfile.gettempdir()) / "airflow-delta-provider"
    target_dir.mkdir(parents=True, exist_ok=True)
    target = target_dir / f"airflow_delta_provider-{airflow_delta_provider.__version__}-{digest.hexdigest()[:16]}.zip"
    if target.exists():
        return str(target)
    tmp = target.with_suffix(f".tmp-{os.getpid()}")
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as zf, tempfile.TemporaryDirectory() as scratch:
        for path in sources:
            name = "airflow_delta_provider/" + path.relative_to(PACKAGE_ROOT).as_posix()
            for member, data in ((name, path.read_bytes()), (name + "c", _hash_pyc(path, name, scratch))):
                info = zipfile.ZipInfo(member, ZIP_DATE)
                info.compress_type = zipfile.ZIP_DEFLATED
                info.external_attr = 0o644 << 16
                zf.writestr(info, data)
    os.replace(tmp, target)
    return str(target)
