"""OPTIMIZE next to other writers and through crashes, in real processes.

* Racing writers: one process runs `optimize()` round after round on a delta-rs table while another
  process appends, deletes or overwrites with delta-rs. Even rounds force the other writer's commit
  between OPTIMIZE's snapshot and its commit (file barriers: the optimizer's executor waits after
  compacting), odd rounds race freely. Each writer commit is tagged (`commitInfo.test_op`), so the
  test knows what every version did; then, reading EVERY version with delta-rs: an OPTIMIZE version
  has exactly the rows of the version before, a writer version exactly the rows its operation implies.
  OPTIMIZE fails exactly when the winning commit removed one of its inputs (the typed conflict names
  the winner's version and the input file; its new files are referenced by no version and a VACUUM
  dry run lists them); appends never make it fail. delta-rs's own conflict check may refuse its
  delete or overwrite when our OPTIMIZE won: a `CommitFailedError` is counted as the operation not
  having happened (and no version carries its tag).
* kill -9: `optimize()` in a child process SIGKILLs itself after k of n bins were written, just before
  the `put_if_absent` of the commit JSON, or after the first batch's commit (`max_commit_bytes`). The
  table then reads as before (or as after the committed batches) in delta-rs and here; the only new
  files are unreferenced compacted files, which a VACUUM dry run (a day later, retention 0) lists;
  a rerun of OPTIMIZE succeeds with the same rows.

Nothing is faked: the child's store is the real `LocalLogStore` with a hook that kills the process
at a named put, and its executor is the real `compact_bin` loop with a kill between bins.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

deltalake = pytest.importorskip("deltalake")
from deltalake import DeltaTable, write_deltalake  # noqa: E402
from test_optimize import (  # noqa: E402
    canonical_rows,
    deltars_rows,
    listing,
    random_batch,
    random_table,
)

from airflow_delta_provider.delta.delta_log import DeltaLog  # noqa: E402
from airflow_delta_provider.delta.maintenance.optimize import optimize  # noqa: E402
from airflow_delta_provider.delta.maintenance.vacuum import vacuum  # noqa: E402
from airflow_delta_provider.delta.protocol.actions import canonical_path, decode_path  # noqa: E402
from airflow_delta_provider.delta.protocol.optimize import commit_batches  # noqa: E402
from airflow_delta_provider.delta.read.deletion_vectors import read_data_file  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
DAY_MS = 86_400_000
ROUNDS = 12

# -- the log, read as files ---------------------------------------------------------------------------------


def commit_actions(path: Path, version: int) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (path / "_delta_log" / f"{version:020d}.json").read_text().splitlines() if x]


def commit_info(path: Path, version: int) -> dict[str, Any]:
    return next(a["commitInfo"] for a in commit_actions(path, version) if "commitInfo" in a)


def removed_paths(path: Path, version: int) -> set[str]:
    return {canonical_path(a["remove"]["path"]) for a in commit_actions(path, version) if "remove" in a}


def added_paths(path: Path, version: int) -> set[str]:
    return {canonical_path(a["add"]["path"]) for a in commit_actions(path, version) if "add" in a}


def referenced_anywhere(path: Path) -> set[str]:
    """Every data file any commit adds or removes (decoded, relative to the table)."""
    out: set[str] = set()
    for v in range(DeltaTable(str(path)).version() + 1):
        out |= {decode_path(p) for p in added_paths(path, v) | removed_paths(path, v)}
    return out


def our_rows(path: Path) -> Counter[str]:
    """The latest version as this library reads it: each file through its deletion vector, partition
    values from the log (file by file: delta-rs's DELETE writes strings as `string_view`, which pyarrow
    does not concatenate with `string`)."""
    log = DeltaLog(str(path))
    snap = log.update()
    rows: Counter[str] = Counter()
    for add in snap.all_files():
        t = read_data_file(log.store, log.table_uri, add)
        for c in snap.partition_columns:
            t = t.append_column(c, pa.array([add.partition_values.get(c)] * t.num_rows, pa.string()))
        rows += canonical_rows(t)
    return rows


def vacuum_plan_a_day_later(path: Path) -> set[str]:
    """What VACUUM with zero retention would delete a day from now (a dry run: nothing is deleted)."""
    later = int(time.time() * 1000) + DAY_MS
    result = vacuum(str(path), retention_hours=0, enforce_retention_duration=False, dry_run=True, clock=lambda: later)
    return {f.path for f in result.plan.files}


# -- racing processes ---------------------------------------------------------------------------------------

_SYNC = r"""
import json, os, sys, time
cfg = json.loads(sys.argv[1])

def mark(name):
    open(os.path.join(cfg["sync"], name), "w").close()

def wait(name):
    deadline = time.monotonic() + 120  # only so that a broken run ends
    while not os.path.exists(os.path.join(cfg["sync"], name)):
        if time.monotonic() > deadline:
            raise SystemExit(f"{cfg['me']}: waited for {name} in vain")
        time.sleep(0.002)

def barrier(name, me, other):
    mark(f"{name}-{me}")
    wait(f"{name}-{other}")
"""

OPTIMIZER = (
    _SYNC
    + r"""
from airflow_delta_provider.delta.errors import ConcurrentModificationError
from airflow_delta_provider.delta.engines.local import local_bin_rewriter as local_executor  # noqa: E402
from airflow_delta_provider.delta.maintenance.optimize import optimize

out = []
for i in range(cfg["rounds"]):
    forced = i % 2 == 0
    seen = {"inputs": [], "written": []}
    inner = local_executor(1)

    def run(layout, bins, *, store, clock):
        added = inner(layout, bins, store=store, clock=clock)
        seen["inputs"] += [f.path for b in bins for f in b.files]
        # each bin's new files (a list: the local engine rolls files over at the target size)
        seen["written"] += [a.path for new in added for a in new]
        if forced:  # let the other writer commit between our snapshot and our commit
            mark(f"compacted-{i}")
            wait(f"written-{i}")
        return added

    barrier(f"go-{i}", "O", "W")
    row = {"round": i, "forced": forced}
    try:
        row["versions"] = optimize(cfg["table"], where=cfg["where"], executor=run).versions
    except ConcurrentModificationError as exc:
        row.update(error=type(exc).__name__, file=exc.file, version=exc.version, message=str(exc))
    mark(f"compacted-{i}")  # also when there was nothing to compact
    row.update(seen)
    out.append(row)
    barrier(f"end-{i}", "O", "W")
print(json.dumps(out))
"""
)

WRITER = (
    _SYNC
    + r"""
import random
import pyarrow.parquet as pq
from deltalake import CommitProperties, DeltaTable, write_deltalake
from deltalake.exceptions import CommitFailedError

table = cfg["table"]
rng = random.Random(cfg["seed"])

def tag(name):
    return CommitProperties(custom_metadata={"test_op": name})

def append(batch, name):
    write_deltalake(table, pq.read_table(batch), mode="append", partition_by=["part"], commit_properties=tag(name))

out = []
for i, op in enumerate(cfg["ops"]):
    forced = i % 2 == 0
    for k, batch in enumerate(op.get("before", [])):  # new small files for this round's OPTIMIZE, not raced
        append(batch, f"{i}-before-{k}")
    barrier(f"go-{i}", "W", "O")
    if forced:
        wait(f"compacted-{i}")
    else:
        time.sleep(rng.uniform(0, cfg["jitter"]))
    row = {"round": i, "tag": str(i), "kind": op["kind"]}
    try:
        if op["kind"] == "append":
            append(op["batch"], str(i))
        elif op["kind"] == "overwrite":
            write_deltalake(
                table, pq.read_table(op["batch"]), mode="overwrite", predicate=op["predicate"],
                partition_by=["part"], commit_properties=tag(str(i)),
            )
        else:
            DeltaTable(table).delete(op["predicate"], commit_properties=tag(str(i)))
        row["committed"] = True
    except CommitFailedError as exc:  # delta-rs's own conflict check: the operation did not happen
        row.update(committed=False, error=str(exc)[:300])
    if forced:
        mark(f"written-{i}")
    out.append(row)
    barrier(f"end-{i}", "W", "O")
print(json.dumps(out))
"""
)


def race(tmp_path: Path, table: Path, ops: list[dict[str, Any]], *, where: str | None) -> tuple[list, list]:
    """The optimizer and the writer, one process each, `len(ops)` rounds; their reports."""
    sync = tmp_path / f"sync-{uuid.uuid4().hex[:6]}"
    sync.mkdir()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    common = {"sync": str(sync), "table": str(table), "rounds": len(ops)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", script, json.dumps({**common, **cfg})],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for script, cfg in (
            (OPTIMIZER, {"me": "optimizer", "where": where}),
            (WRITER, {"me": "writer", "ops": ops, "seed": 7, "jitter": 0.15}),
        )
    ]
    reports = []
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err[-3000:]
        reports.append(json.loads(out.strip().splitlines()[-1]))
    return reports[0], reports[1]


def unique_batch(rng: random.Random, first_id: int, n: int, parts: tuple[str | None, ...]) -> pa.Table:
    """`random_batch` (every primitive type, nulls, nested) with ids `first_id..` (unique in the table)."""
    batch = random_batch(rng, n, parts=parts)
    return batch.set_column(0, "id", pa.array(range(first_id, first_id + n), pa.int64()))


def apply_effect(effect: tuple[str, Any], before: Counter[str]) -> Counter[str]:
    """The rows after one writer operation, from the rows before it."""
    kind, arg = effect
    if kind == "append":
        return before + arg
    if kind == "delete":
        return Counter({r: n for r, n in before.items() if json.loads(r)["id"] not in arg})
    partition, rows = arg  # overwrite of one partition
    kept = Counter({r: n for r, n in before.items() if json.loads(r)["part"] != partition})
    return kept + rows


def check_every_version(
    path: Path, initial: Counter[str], effects: dict[str, tuple[str, Any]]
) -> tuple[dict[int, dict[str, Any]], set[str]]:
    """Version 0 holds `initial`; walking versions 1..latest, an OPTIMIZE version has the rows of the
    version before, a tagged writer version those its operation implies: every version's rows are those
    of the logical operations committed up to it. Returns the OPTIMIZE commits (version -> commitInfo)
    and the writer tags found."""
    latest = DeltaTable(str(path)).version()
    previous = deltars_rows(path, 0)
    assert previous == initial
    optimizes: dict[int, dict[str, Any]] = {}
    tags: set[str] = set()
    for v in range(1, latest + 1):
        info = commit_info(path, v)
        rows = deltars_rows(path, v)
        if info["operation"] == "OPTIMIZE":
            assert rows == previous, f"OPTIMIZE version {v} changed the rows"
            assert all(not a[k]["dataChange"] for a in commit_actions(path, v) for k in ("add", "remove") if k in a)
            optimizes[v] = info
        else:
            tag = info["test_op"]
            assert tag not in tags, f"{tag} committed twice"
            tags.add(tag)
            assert rows == apply_effect(effects[tag], previous), f"version {v} ({tag}, {info['operation']})"
        previous = rows
    return optimizes, tags


def check_optimize_outcomes(path: Path, rounds: list[dict], optimizes: dict[int, dict]) -> None:
    """Every OPTIMIZE commit is one a round reported; it removed exactly its inputs and no commit between
    its read version and itself removed one of them. Every failure names a winner that removed an input,
    and the files that attempt wrote are referenced by no version (and VACUUM would take them)."""
    reported = [v for r in rounds for v in r.get("versions", [])]
    assert sorted(reported) == sorted(optimizes)
    referenced = referenced_anywhere(path)
    vacuum_plan = vacuum_plan_a_day_later(path)
    for r in rounds:
        inputs = {canonical_path(p) for p in r["inputs"]}
        for v in r.get("versions", []):
            assert removed_paths(path, v) == inputs
            assert added_paths(path, v) == {canonical_path(p) for p in r["written"]}
            read_version = optimizes[v]["readVersion"]
            for winner in range(read_version + 1, v):
                assert not removed_paths(path, winner) & inputs, f"version {v} rebased over a removal"
        if "error" in r:
            assert r["error"] in ("ConcurrentDeleteReadError", "ConcurrentDeleteDeleteError"), r
            assert "left for VACUUM" in r["message"]
            assert canonical_path(r["file"]) in inputs, r
            assert canonical_path(r["file"]) in removed_paths(path, r["version"]), r
            assert commit_info(path, r["version"])["operation"] in ("DELETE", "WRITE")
            written = {decode_path(p) for p in r["written"]}
            assert written and all((path / p).is_file() for p in written)
            assert not written & referenced
            assert written <= vacuum_plan


@pytest.mark.slow
def test_appends_racing_optimize_lose_no_row_and_never_make_it_fail(tmp_path: Path) -> None:
    path = tmp_path / "t"
    rng = random.Random(20)
    parts = ("a", "b", None)
    first = unique_batch(rng, 0, 30, parts)
    write_deltalake(str(path), first, partition_by=["part"])
    ops, effects = [], {}
    for i in range(ROUNDS):
        batch = unique_batch(rng, 1000 * (i + 1), 30, parts)
        file = tmp_path / f"batch-{i}.parquet"
        pq.write_table(batch, file)
        ops.append({"kind": "append", "batch": str(file)})
        effects[str(i)] = ("append", canonical_rows(batch))

    rounds, writes = race(tmp_path, path, ops, where=None)

    assert all(w["committed"] for w in writes), [w for w in writes if not w["committed"]]
    assert not [r for r in rounds if "error" in r], "an append made OPTIMIZE fail"
    optimizes, tags = check_every_version(path, canonical_rows(first), effects)
    assert tags == set(effects)
    check_optimize_outcomes(path, rounds, optimizes)
    # forced rounds: the append landed between OPTIMIZE's snapshot and its commit, which rebased over it
    for r in rounds[1:]:  # round 0 has one file per partition: nothing to compact
        assert r["inputs"]
        (v,) = r["versions"]
        if r["forced"]:
            assert optimizes[v]["readVersion"] == v - 2
    rebased = [r["round"] for r in rounds for v in r["versions"] if optimizes[v]["readVersion"] < v - 1]
    print("OPTIMIZE rebased over an append in rounds", rebased)
    expected = canonical_rows(first)
    for _, rows in effects.values():
        expected += rows
    assert deltars_rows(path) == expected == our_rows(path)


@pytest.mark.slow
def test_deletes_and_overwrites_racing_optimize(tmp_path: Path) -> None:
    """Each round appends new small files (unraced), then races OPTIMIZE (partitions a and b only) with
    one of: a delete of rows in partition a (its input files), a delete in partition c (never an input),
    an overwrite of partition b (every b file is an input)."""
    path = tmp_path / "t"
    rng = random.Random(21)
    parts = ("a", "b", "c")
    first = unique_batch(rng, 0, 30, parts)
    write_deltalake(str(path), first, partition_by=["part"])
    ops, effects = [], {}
    for i in range(ROUNDS):
        before = []
        for k in range(2):
            batch = unique_batch(rng, 1000 * (i + 1) + 100 * k, 30, parts)
            file = tmp_path / f"before-{i}-{k}.parquet"
            pq.write_table(batch, file)
            before.append(str(file))
            effects[f"{i}-before-{k}"] = ("append", canonical_rows(batch))
        kind = ("delete a", "delete c", "overwrite b")[i % 3]
        if kind == "overwrite b":
            batch = unique_batch(rng, 1000 * (i + 1) + 500, 10, ("b",))
            file = tmp_path / f"overwrite-{i}.parquet"
            pq.write_table(batch, file)
            ops.append({"kind": "overwrite", "batch": str(file), "predicate": "part = 'b'", "before": before})
            effects[str(i)] = ("overwrite", ("b", canonical_rows(batch)))
        else:
            partition = kind[-1]
            fresh = [r for f in before for r in pq.read_table(f).to_pylist() if r["part"] == partition]
            ids = sorted(r["id"] for r in fresh)[:3]
            predicate = f"id IN ({', '.join(map(str, ids))})"
            ops.append({"kind": "delete", "predicate": predicate, "before": before})
            effects[str(i)] = ("delete", set(ids))

    rounds, writes = race(tmp_path, path, ops, where="part != 'c'")

    optimizes, tags = check_every_version(path, canonical_rows(first), effects)
    appended = {t for t in effects if "before" in t}
    assert tags & appended == appended
    assert tags - appended == {w["tag"] for w in writes if w["committed"]}  # a refused operation left no trace
    check_optimize_outcomes(path, rounds, optimizes)
    for r, w in zip(rounds, writes, strict=True):
        assert r["inputs"] and not [p for p in r["inputs"] if p.startswith("part=c/")]
        if not r["forced"]:
            continue
        # forced: the writer committed after OPTIMIZE's snapshot and before its commit
        assert w["committed"], w
        if r["round"] % 3 == 1:  # partition c: not an input, so OPTIMIZE rebased
            (v,) = r["versions"]
            assert optimizes[v]["readVersion"] == v - 2
        else:
            assert r["error"] == "ConcurrentDeleteReadError", r
    assert our_rows(path) == deltars_rows(path)
    print(
        "rounds:",
        [("fail" if "error" in r else "ok") + ("*" if r["forced"] else "") for r in rounds],
        "delta-rs refused:",
        [w["round"] for w in writes if not w["committed"]],
    )


# -- kill -9 ------------------------------------------------------------------------------------------------

KILLED_OPTIMIZE = r"""
import json, os, signal, sys
from airflow_delta_provider.delta.delta_log import DeltaLog
from airflow_delta_provider.delta.maintenance.optimize import optimize
from airflow_delta_provider.delta.storage.local import LocalLogStore
from airflow_delta_provider.delta.write.data_files import compact_bin

table, point, k, target = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
batch = json.loads(sys.argv[5])

def die():
    os.kill(os.getpid(), signal.SIGKILL)

class KillingStore(LocalLogStore):
    # the real local store; the process dies at the k-th commit put (before it starts, or once it landed),
    # or in the middle of the k-th data file's write (half its bytes under its own name)
    commits = 0
    data_puts = 0

    def write_new(self, path, data):
        if point == "mid_put":
            self.data_puts += 1
            if self.data_puts == k:  # half the bytes under the file's own name, then the crash
                super().write_new(path, data[: len(data) // 2])
                die()
        super().write_new(path, data)

    def put_if_absent(self, path, data):
        commit = os.path.basename(os.path.dirname(path)) == "_delta_log" and path.endswith(".json")
        if commit and point == "before_commit" and self.commits + 1 == k:
            die()
        super().put_if_absent(path, data)
        if commit:
            self.commits += 1
            if point == "after_commit" and self.commits == k:
                die()

written = 0

def executor(layout, bins, *, store, clock):
    # the local engine's loop, one bin after the other; the process dies once k bins were written
    global written
    out = []
    for b in bins:
        if point == "bins" and written == k:
            die()
        out.append(compact_bin(store, layout, b, now_ms=clock))
        written += 1
    return out

optimize(DeltaLog(table, store=KillingStore()), target_size=target, max_commit_bytes=batch, executor=executor)
sys.exit(3)  # not killed
"""


@pytest.fixture(scope="module")
def kill_base(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int]:
    """Three partitions of small files (with tombstones from a delete), and a target size that makes
    several bins per partition."""
    path = random_table(tmp_path_factory.mktemp("kill") / "t", 31, partitioned=True, appends=8, rows=40)
    sizes = [f.size for f in DeltaLog(str(path)).update().all_files()]
    return path, 3 * max(sizes)


@pytest.mark.parametrize(
    ("point", "k", "batched"),
    [
        ("bins", 1, False),  # after the first bin
        ("bins", -1, False),  # after n-1 of n bins
        ("before_commit", 1, False),  # every bin written, the commit not
        ("after_commit", 1, True),  # the first batch committed
        ("before_commit", 2, True),  # the first batch committed, the second's files written
        ("mid_put", 2, False),  # in the middle of the second bin's write: a partial file under its name
    ],
)
def test_kill_9_mid_compaction_leaves_the_table_as_before_and_only_unreferenced_files(
    kill_base: tuple[Path, int], tmp_path: Path, point: str, k: int, batched: bool
) -> None:
    base, target = kill_base
    path = tmp_path / "t"
    shutil.copytree(base, path)  # copy2: mtimes kept
    v0 = DeltaTable(str(path)).version()
    rows = deltars_rows(path)
    files_before = listing(path)
    active_before = {f.path for f in DeltaLog(str(path)).update().all_files()}
    baseline_vacuum = vacuum_plan_a_day_later(path)

    plan = optimize(str(path), target_size=target, dry_run=True).plan
    n = len(plan.bins)
    assert n >= 6 and len({b.partition for b in plan.bins}) == 3
    max_commit_bytes = 2 * target if batched else None
    batches = commit_batches(plan.bins, max_commit_bytes)
    assert len(batches) >= (3 if batched else 1)
    k = n - 1 if k < 0 else k
    # what must be on disk: the batches committed before the kill, and the bins written and not committed
    if point in ("bins", "mid_put"):
        committed, written_uncommitted = 0, k
    elif point == "before_commit":
        committed, written_uncommitted = k - 1, len(batches[k - 1])
    else:
        committed, written_uncommitted = k, 0

    env = {**os.environ, "PYTHONPATH": str(REPO)}
    argv = [sys.executable, "-c", KILLED_OPTIMIZE, str(path), point, str(k), str(target), json.dumps(max_commit_bytes)]
    proc = subprocess.run(argv, env=env, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-3000:]

    # the table reads as before, or as after the committed batches (the same rows either way)
    log = DeltaLog(str(path))
    snap = log.update()
    assert snap.version == DeltaTable(str(path)).version() == v0 + committed
    assert deltars_rows(path) == rows == our_rows(path)
    assert deltars_rows(path, v0) == rows
    committed_inputs = {f.path for batch in batches[:committed] for b in batch for f in b.files}
    committed_adds: set[str] = set()
    for v in range(v0 + 1, v0 + 1 + committed):
        assert commit_info(path, v)["operation"] == "OPTIMIZE"
        committed_adds |= added_paths(path, v)
    assert {f.path for f in snap.all_files()} == (active_before - committed_inputs) | committed_adds

    # nothing changed or deleted; the new files are the commits, the committed adds and the leftovers
    files_after = listing(path)
    assert {p: files_after.get(p) for p in files_before} == files_before
    new = set(files_after) - set(files_before)
    commits = {f"_delta_log/{v:020d}.json" for v in range(v0 + 1, v0 + 1 + committed)}
    assert commits <= new
    leftovers = new - commits - {decode_path(p) for p in committed_adds}
    assert len(leftovers) == written_uncommitted
    assert not leftovers & referenced_anywhere(path)
    whole = set()
    for p in leftovers:  # whole Parquet files (written and synced before the kill)...
        try:
            whole.add(p) if pq.read_metadata(path / p).num_rows > 0 else None
        except Exception:  # ... but for the one a crash cut in half (mid_put), visible under its own name
            pass
    assert len(leftovers - whole) == (1 if point == "mid_put" else 0)

    # VACUUM (a day later, no retention) would delete exactly the leftovers, besides what it would anyway
    removed_by_committed = {decode_path(p) for p in committed_inputs}
    assert vacuum_plan_a_day_later(path) == baseline_vacuum | leftovers | removed_by_committed

    # and OPTIMIZE runs again to the end, the rows unchanged, the leftovers left for VACUUM
    again = optimize(str(path), target_size=target)
    assert again.version == v0 + committed + 1
    assert deltars_rows(path) == rows == our_rows(path)
    assert all((path / p).is_file() for p in leftovers)
