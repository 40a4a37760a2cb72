"""Print the XCom return values of each named DAG's latest run and fail unless every task succeeded or was
skipped (a branch not taken)."""

from __future__ import annotations

import json
import os
import sqlite3
import sys
from pathlib import Path


def main(dag_id: str) -> int:
    db = sqlite3.connect(Path(os.environ["AIRFLOW_HOME"]) / "airflow.db")
    run = db.execute(
        "SELECT run_id, state FROM dag_run WHERE dag_id = ? ORDER BY id DESC LIMIT 1", (dag_id,)
    ).fetchone()
    if run is None:
        print(f"no run of {dag_id}", file=sys.stderr)
        return 1
    run_id, state = run
    print(f"== {dag_id} run {run_id}: {state}")
    tasks = db.execute(
        "SELECT task_id, state FROM task_instance WHERE dag_id = ? AND run_id = ? ORDER BY start_date",
        (dag_id, run_id),
    ).fetchall()
    for task_id, task_state in tasks:
        row = db.execute(
            "SELECT value FROM xcom WHERE dag_id = ? AND run_id = ? AND task_id = ? AND key = 'return_value'",
            (dag_id, run_id, task_id),
        ).fetchone()
        value = json.loads(row[0]) if row else None
        value = json.loads(value) if isinstance(value, str) else value
        print(f"-- {task_id} ({task_state})")
        print(json.dumps(value, indent=2))
    return 0 if state == "success" and all(s in ("success", "skipped") for _, s in tasks) else 1


if __name__ == "__main__":
    sys.exit(max(main(dag_id) for dag_id in sys.argv[1:] or ["delta_table_health"]))
