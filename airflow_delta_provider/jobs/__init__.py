"""The bundled Spark job: where its script is, and the zip that ships the library to executors."""

from __future__ import annotations

import hashlib
import os
import tempfile
import zipfile
from pathlib import Path

import airflow_delta_provider

PACKAGE_ROOT = Path(airflow_delta_provider.__file__).resolve().parent
ZIP_DATE = (1980, 1, 1, 0, 0, 0)  # fixed entry times: the same sources give the same zip


def job_script() -> str:
    """Absolute path of the spark-submit entry point (`delta_job.py`)."""
    return str(PACKAGE_ROOT / "jobs" / "delta_job.py")


def _sources() -> list[Path]:
    """The package's modules and the report templates they render."""
    files = [*PACKAGE_ROOT.rglob("*.py"), *PACKAGE_ROOT.rglob("*.j2")]
    return sorted(p for p in files if "__pycache__" not in p.parts)


def build_py_files_zip(directory: str | os.PathLike[str] | None = None) -> str:
    """A zip of this package's sources for `spark-submit --py-files`, so workers need nothing but
    pyspark. Named by a hash of the sources, reused while they do not change; written atomically."""
    sources = _sources()
    digest = hashlib.sha256()
    for path in sources:
        digest.update(str(path.relative_to(PACKAGE_ROOT)).encode() + b"\0" + path.read_bytes() + b"\0")
    target_dir = Path(directory) if directory else Path(tempfile.gettempdir()) / "airflow-delta-provider"
    target_dir.mkdir(parents=True, exist_ok=True)
    target = target_dir / f"airflow_delta_provider-{airflow_delta_provider.__version__}-{digest.hexdigest()[:16]}.zip"
    if target.exists():
        return str(target)
    tmp = target.with_suffix(f".tmp-{os.getpid()}")
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for path in sources:
            info = zipfile.ZipInfo("airflow_delta_provider/" + path.relative_to(PACKAGE_ROOT).as_posix(), ZIP_DATE)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            zf.writestr(info, path.read_bytes())
    os.replace(tmp, target)
    return str(target)
