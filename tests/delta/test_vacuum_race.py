"""VACUUM with retention 0 (and the override) racing real delta-rs writers: the grace period for untracked
files keeps every write that is in flight, so no committed version loses a file.

Two delta-rs processes run appends, updates, deletes, merges and overwrites in a loop while this process
runs VACUUM rounds (alternately a dry-run plan applied later and a one-shot apply), `retention_hours=0`,
`enforce_retention_duration=False`, the default grace period. delta-rs writes a data file, then commits:
between the two the file is untracked, and a retention of 0 hours alone would let VACUUM delete it (the
version committed next would then be unreadable).

What is checked after each round: every version from the one the round's plan was made on up to the
latest delta-rs lists (the versions committed while the round ran included) reads with delta-rs, each
read as `DeltaTable(path, version=v).to_pyarrow_table()`, and each of those versions that read before the
round still reads. Versions older than the plan's snapshot are not checked: retention 0 lets VACUUM delete
the files they alone need (their tombstones expired at once), exactly as Delta allows (P§12).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

deltalake = pytest.importorskip("deltalake")
from deltalake import DeltaTable, write_deltalake  # noqa: E402
from test_vacuum_faults import child_env, missing_active  # noqa: E402

from airflow_delta_provider.delta.delta_log import DeltaLog  # noqa: E402
from airflow_delta_provider.delta.errors import CommitRetriesExceededError  # noqa: E402
from airflow_delta_provider.delta.maintenance.vacuum import VacuumResult, vacuum  # noqa: E402

ROUNDS = 20

_WRITER = """
import json, os, random, sys
import pyarrow as pa
from deltalake import DeltaTable, write_deltalake
path, stop, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
rng = random.Random(seed)
done, failures, n = {}, [], 0

def rows(k):
    global n
    ids = [seed * 1_000_000 + n + i for i in range(k)]
    n += k
    return pa.table({"id": pa.array(ids, pa.int64()), "v": pa.array([0] * k, pa.int64()),
                     "p": [str(i % 3) for i in ids]})

while not os.path.exists(stop):
    op = rng.choice(["append", "append", "update", "delete", "merge", "overwrite"])
    try:
        if op == "append":
            write_deltalake(path, rows(rng.randint(1, 4)), partition_by=["p"], mode="append")
        elif op == "overwrite":
            write_deltalake(path, rows(rng.randint(2, 6)), partition_by=["p"], mode="overwrite")
        elif op == "update":
            DeltaTable(path).update(updates={"v": "v + 1"}, predicate=f"id % 2 = {rng.randint(0, 1)}")
        elif op == "delete":
            DeltaTable(path).delete(f"id % 5 = {rng.randint(0, 4)}")
        else:
            source = rows(2)
            ids = DeltaTable(path).to_pyarrow_table(columns=["id"]).column("id").to_pylist()[:2]
            source = pa.concat_tables([source, pa.table({"id": pa.array(ids, pa.int64()),
                                        "v": pa.array([9] * len(ids), pa.int64()), "p": [str(i % 3) for i in ids]})])
            (DeltaTable(path).merge(source, "t.id = s.id", source_alias="s", target_alias="t")
             .when_matched_update_all().when_not_matched_insert_all().execute())
        done[op] = done.get(op, 0) + 1
    except Exception as exc:  # a lost commit race, or a file of an older version vacuumed under a reader
        failures.append(f"{op}: {type(exc).__name__}: {exc}"[:300])
print(json.dumps({"done": done, "failures": failures}))
"""


def _readable(path: Path, version: int) -> str | None:
    """None when delta-rs reads `version` whole, else the error."""
    try:
        DeltaTable(str(path), version=version).to_pyarrow_table()
    except Exception as exc:  # any failure to read the version is what this test looks for
        return f"{type(exc).__name__}: {exc}"[:500]
    return None


#: The writes that must race the rounds: rounds go on (past `ROUNDS`) until delta-rs committed each of them,
#: however slowly the writers start on a loaded machine.
KINDS = {"append", "overwrite", "update", "delete", "merge"}


def _kinds_committed(path: Path) -> set[str]:
    """The kinds of delta-rs writes in the table's history (its WRITE commits by mode)."""
    out = set()
    for entry in DeltaTable(str(path)).history():
        op = str(entry.get("operation", ""))
        mode = str((entry.get("operationParameters") or {}).get("mode", "")).lower()
        out.add(mode if op == "WRITE" else op.lower())
    return out & KINDS


def _round(dlog: DeltaLog, i: int) -> VacuumResult:
    kw: dict[str, Any] = dict(retention_hours=0, enforce_retention_duration=False)
    if i % 2:
        return vacuum(dlog, dry_run=False, **kw)
    plan = vacuum(dlog, **kw).to_dict()
    return vacuum(dlog, plan=json.loads(json.dumps(plan)), dry_run=False, **kw)


@pytest.mark.slow
def test_no_committed_version_loses_a_file_while_deltars_writes(tmp_path: Path) -> None:
    path = tmp_path / "t"
    first = pa.table({"id": pa.array(range(6), pa.int64()), "v": pa.array([0] * 6, pa.int64())})
    write_deltalake(str(path), first.append_column("p", pa.array([str(i % 3) for i in range(6)])), partition_by=["p"])
    stop = tmp_path / "stop"
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", _WRITER, str(path), str(stop), str(seed)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=child_env(),
            text=True,
        )
        for seed in (1, 2)
    ]
    dlog = DeltaLog(str(path))
    lost: list[str] = []
    checked = deleted = kept_by_grace = lost_start = 0
    done: list[VacuumResult] = []
    deadline = time.monotonic() + 240  # a guard against stalled writers, not a timing assertion
    try:
        time.sleep(0.5)  # the writers start
        low = 0  # versions below the last plan's are no longer checked (retention 0 may empty them)
        while (len(done) < ROUNDS or _kinds_committed(path) != KINDS) and time.monotonic() < deadline:
            assert all(w.poll() is None for w in writers), "a writer exited early"
            before_latest = DeltaTable(str(path)).version()
            readable_before = {v for v in range(low, before_latest + 1) if _readable(path, v) is None}
            try:
                result = _round(dlog, len(done))
            except CommitRetriesExceededError:  # VACUUM START lost every attempt: nothing was deleted
                lost_start += 1
                continue
            done.append(result)
            deleted += result.deleted
            kept_by_grace = max(kept_by_grace, result.plan.grace_kept_files)  # counted again each round
            latest = DeltaTable(str(path)).version()
            for v in range(result.plan.version, latest + 1):
                if v <= before_latest and v not in readable_before:
                    continue  # did not read before this round either
                checked += 1
                error = _readable(path, v)
                if error is not None:
                    lost.append(f"round {len(done)}: version {v} (plan at {result.plan.version}): {error}")
            low = result.plan.version
    finally:
        stop.touch()
        outputs = [w.communicate(timeout=120) for w in writers]
    for w, (_, err) in zip(writers, outputs, strict=True):
        assert w.returncode == 0, err[-3000:]
    stats = [json.loads(out.strip().splitlines()[-1]) for out, _ in outputs]
    kinds = ("append", "update", "delete", "merge", "overwrite")
    commits = {op: sum(s["done"].get(op, 0) for s in stats) for op in kinds}
    print(
        f"\n{len(done)} vacuum rounds (retention 0, default grace): {checked} version reads checked, {deleted} files "
        f"deleted, up to {kept_by_grace} untracked files kept by the grace period in a round, {lost_start} rounds "
        f"lost VACUUM START; "
        f"delta-rs commits {commits}, {sum(len(s['failures']) for s in stats)} failed operations"
    )
    assert lost == [], "\n".join(lost[:10])
    assert len(done) >= ROUNDS and deleted > 0  # tombstoned files did go: retention 0 was in force
    assert all(commits[op] > 0 for op in commits), commits  # every kind of write raced the vacuum
    assert missing_active(path) == []  # the latest version, read by this library: every file there
    assert DeltaTable(str(path)).version() == dlog.update().version
