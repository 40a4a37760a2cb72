"""A recording `spark-submit` for the provider tests: a real process first on PATH, so an assertion is about
what reached a spawned process (argv, the credentials' environment variable), not about which function ran."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from airflow_delta_provider.jobs.runner import STORAGE_OPTIONS_ENV


def recording_spark_submit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, result: dict | None = None, code: int = 1, sleep: float = 0
) -> Path:
    """Put the stand-in first on PATH (and `spark_default` on `local[2]`); return the file of its calls. Each
    call appends one JSON line (`argv`, `env`: `DELTA_STORAGE_OPTIONS`), writes `result` to its
    `--result-uri` when given, sleeps `sleep` s and exits `code` (1: spark-submit failed, no result)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "spark-submit-calls"
    script = bin_dir / "spark-submit"
    script.write_text(
        f"#!{sys.executable}\n"
        "import json, os, sys, time\n"
        "argv = sys.argv[1:]\n"
        f"with open({str(calls)!r}, 'a') as fh:\n"
        f"    fh.write(json.dumps({{'argv': argv, 'env': os.environ.get({STORAGE_OPTIONS_ENV!r})}}) + '\\n')\n"
        f"result = {json.dumps(result)!r}\n"
        "if result != 'null':\n"
        "    with open(argv[argv.index('--result-uri') + 1], 'w') as fh:\n"
        "        fh.write(result)\n"
        f"time.sleep({sleep})\n"
        f"sys.exit({code})\n"
    )
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark", "host": "local[2]"}))
    return calls


def recorded(calls: Path) -> list[dict[str, Any]]:
    """The recorded calls, oldest first, each with its `request` (the job's `--request` JSON) parsed."""
    out = [json.loads(line) for line in calls.read_text().splitlines()]
    for call in out:
        argv = call["argv"]
        call["request"] = json.loads(argv[argv.index("--request") + 1]) if "--request" in argv else None
    return out
