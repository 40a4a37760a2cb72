"""Helpers shared by bench/run.py and bench/profile.py (tables, machine description, commits)."""

from __future__ import annotations

import argparse
import compileall
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
DATA = BENCH_DIR / ".data"
MANIFEST = "_bench_manifest.json"


def python() -> str:
    """The interpreter for child processes: the project's venv when present."""
    venv = REPO / ".venv" / "bin" / "python"
    return str(venv) if venv.exists() else sys.executable


def table_dir(scale: str, data: Path = DATA) -> Path:
    return data / scale


def load_manifest(scale: str, data: Path = DATA) -> dict | None:
    try:
        return json.loads((table_dir(scale, data) / MANIFEST).read_text())
    except (OSError, ValueError):
        return None


def ensure_table(scale: str, data: Path = DATA, generate: bool = True) -> dict:
    """The manifest of a generated table; with `generate`, first runs generate.py (idempotent: it
    returns at once when the table is there with a matching marker)."""
    if generate:
        cmd = [python(), str(BENCH_DIR / "generate.py"), "--scale", scale, "--out", str(table_dir(scale, data))]
        subprocess.run(cmd, check=True)
    found = load_manifest(scale, data)
    if found is None:
        raise SystemExit(
            f"missing table {scale}: run `.venv/bin/python bench/generate.py --scale {scale} "
            f"--out {table_dir(scale, data)}`"
        )
    return found


def link_copy(table: Path, dest: Path) -> Path:
    """A copy of `table`'s `_delta_log` at `dest` made of hard links (data files are not needed)."""
    src_log, dst_log = table / "_delta_log", dest / "_delta_log"
    dst_log.mkdir(parents=True)
    for entry in os.scandir(src_log):
        if entry.is_file():
            try:
                os.link(entry.path, dst_log / entry.name)
            except OSError:
                shutil.copy2(entry.path, dst_log / entry.name)
    return dest


def scratch_dir() -> Path:
    DATA.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix="scratch-", dir=DATA))


def append_commit(table: Path, version: int, n: int) -> str:
    """Write commit `version` (commitInfo + one add) the way a writer does: put-if-absent."""
    ts = int(time.time() * 1000)
    path = f"date=2025-06-02/part-00000-bench-update-{n:06d}.c000.snappy.parquet"
    stats = (
        '{"numRecords":10,"minValues":{"id":1,"amount":1.0,"name":"a","ts":"2025-06-02T00:00:00.000Z"},'
        '"maxValues":{"id":10,"amount":9.5,"name":"z","ts":"2025-06-02T01:00:00.000Z"},'
        '"nullCount":{"id":0,"amount":0,"name":0,"ts":0}}'
    )
    actions = [
        {
            "commitInfo": {
                "timestamp": ts,
                "operation": "WRITE",
                "operationParameters": {"mode": "Append", "partitionBy": '["date"]'},
                "readVersion": version - 1,
                "isBlindAppend": True,
            }
        },
        {
            "add": {
                "path": path,
                "partitionValues": {"date": "2025-06-02"},
                "size": 4096 + n,
                "modificationTime": ts,
                "dataChange": True,
                "stats": stats,
            }
        },
    ]
    log_dir = table / "_delta_log"
    tmp = log_dir / f".{version:020d}.json.{os.getpid()}.tmp"
    tmp.write_text("\n".join(json.dumps(a, separators=(",", ":")) for a in actions) + "\n")
    try:
        os.link(tmp, log_dir / f"{version:020d}.json")  # fails if the version exists
    finally:
        tmp.unlink()
    return path


def _cpu_model() -> str:
    """`model name` from /proc/cpuinfo, with family/model/MHz (VMs often report a bare name)."""
    fields: dict[str, str] = {}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            key = key.strip()
            if key in ("model name", "cpu family", "model", "cpu MHz", "cache size") and key not in fields:
                fields[key] = value.strip()
    except OSError:
        pass
    if "model name" not in fields:
        return platform.processor() or "unknown"
    extra = [f"{k} {fields[k]}" for k in ("cpu family", "model", "cpu MHz", "cache size") if k in fields]
    return f"{fields['model name']} ({', '.join(extra)})" if extra else fields["model name"]


def _mem_total_gib() -> float:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) / 2**20
    except OSError:
        pass
    return float("nan")


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def _git(*args: str) -> str:
    try:
        return subprocess.run(
            ["git", *args], cwd=REPO, capture_output=True, text=True, check=True, timeout=10
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "?"


def library_fingerprint(root: Path = REPO) -> str:
    """A short hash of the library's Python sources under `root` (to notice edits)."""
    import hashlib

    digest = hashlib.sha256()
    for path in sorted((root / "airflow_delta_provider").rglob("*.py")):
        digest.update(str(path.relative_to(root)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


def snapshot_library() -> tuple[Path, str]:
    """A frozen copy of the library's sources for child processes: (root to put first on sys.path,
    fingerprint). Benchmarks run children with cwd and PYTHONPATH at that root, so edits to the
    working tree during a run cannot mix two versions into one report. The copy is byte-compiled."""
    base = DATA / "libsnap"
    base.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".copy-", dir=base))
    shutil.copytree(
        REPO / "airflow_delta_provider",
        tmp / "airflow_delta_provider",
        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
    )
    fingerprint = library_fingerprint(tmp)
    final = base / fingerprint
    try:
        tmp.rename(final)
    except OSError:  # already there (maybe made by a concurrent run): identical content
        shutil.rmtree(tmp)
        if not final.is_dir():
            raise
    # Byte-compile the copy as an installed package is (pip compiles wheels on install): children may run
    # with PYTHONDONTWRITEBYTECODE=1 and would otherwise compile every module of the library from source in
    # every process (~30-40 ms), which site-packages' pyarrow and deltalake never do.
    compileall.compile_dir(final / "airflow_delta_provider", quiet=1)
    return final, fingerprint


def machine_info() -> dict[str, str]:
    """Facts about this machine and the packages (read from the child interpreter)."""
    probe = (
        "import json, platform, sys; from importlib import metadata as m\n"
        "def v(d):\n"
        "    try: return m.version(d)\n"
        "    except m.PackageNotFoundError: return 'not installed'\n"
        "print(json.dumps({'python': sys.version.split()[0], 'implementation': platform.python_implementation(),"
        " 'deltalake': v('deltalake'), 'pyarrow': v('pyarrow'), 'numpy': v('numpy'), 'arro3-core': v('arro3-core'),"
        " 'airflow-delta-provider': v('airflow-delta-provider')}))"
    )
    try:
        versions = json.loads(subprocess.run([python(), "-c", probe], capture_output=True, text=True).stdout)
    except ValueError:
        versions = {"python": platform.python_version(), "deltalake": _version("deltalake")}
    status = _git("status", "--porcelain", "--", "airflow_delta_provider")
    return {
        "nproc": str(os.cpu_count()),
        "cpu": _cpu_model(),
        "ram": f"{_mem_total_gib():.1f} GiB",
        "os": f"{platform.system()} {platform.release()}",
        **versions,
        "library commit": _git("rev-parse", "--short", "HEAD") + (" (library modified)" if status else ""),
        "library sources sha256": library_fingerprint(),
        "loadavg": loadavg(),
    }


def loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


def cpu_busy(interval: float = 0.3) -> float:
    """Fraction of all CPUs busy over `interval` seconds (from /proc/stat); -1 when unknown."""

    def sample() -> tuple[int, int]:
        fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
        idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
        return idle, sum(fields)

    try:
        i0, t0 = sample()
        time.sleep(interval)
        i1, t1 = sample()
    except OSError:
        return -1.0
    return 1.0 - (i1 - i0) / max(t1 - t0, 1)


def add_quiet_options(parser: argparse.ArgumentParser, max_wait: float) -> None:
    """The runners' shared options: table generation and the quiet-CPU wait before each timed run."""
    parser.add_argument("--no-generate", action="store_true", help="fail instead of generating missing tables")
    parser.add_argument("--no-wait-idle", action="store_true", help="don't wait for a quiet CPU before each run")
    parser.add_argument("--idle-threshold", type=float, default=0.5, help="max busy CPU fraction to start a run")
    parser.add_argument("--idle-max-wait", type=float, default=max_wait, help="max seconds to wait for it")


def quiet_setting(args: argparse.Namespace) -> tuple[float, float] | None:
    """(threshold, max wait) for `wait_for_quiet`, or None with `--no-wait-idle`."""
    return None if args.no_wait_idle else (args.idle_threshold, args.idle_max_wait)


def wait_for_quiet(threshold: float, max_wait: float) -> float:
    """Wait (up to `max_wait` s) until other processes use less than `threshold` of the CPUs."""
    deadline = time.monotonic() + max_wait
    busy = cpu_busy()
    while busy > threshold and time.monotonic() < deadline:
        time.sleep(0.5)
        busy = cpu_busy()
    return busy
