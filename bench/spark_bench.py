"""Benchmark the Spark engine (issue 4): the bundled spark-submit job and a warm query, vs delta-rs.

    .venv/bin/python bench/spark_bench.py                          # S, M, L; whole job x1; warm x3
    .venv/bin/python bench/spark_bench.py --scales S,M --reps 2 --markdown /tmp/s.md --json /tmp/s.json

Measured on the generated S/M/L logs (bench/generate.py; missing ones are generated first):

* **whole job**: the real `spark-submit --master local[2]` of the bundled job
  (`jobs/delta_job.py --request` with engine spark), action snapshot with each `--partitions` value and
  action tombstones; wall clock of the whole process (JVM start included), its CPU and peak
  RSS (`os.wait4`), the job's own JSON result (`duration_s`, `timings.replay_s/report_s`)
  and the duration of every Spark stage (parsed from spark-submit's INFO log). Every driver JVM runs
  with the JVM's defaults and the engine's `SPARK_CONF`, as the operators submit it; the C1-only JIT
  for short drivers (`-XX:TieredStopAtLevel=1`) is now a documented `conf` example in the README, not code.
* **JVM floor**: `spark-submit` of a no-op script that only creates the same SparkSession and runs
  one 2-task Python RDD job (so Python workers start too), then exits.
* **warm query**: one long-lived child process holds a `local[2]` SparkSession (the engine's
  `SPARK_CONF`, UI off); per scale it times `DeltaLog(p, engine=SparkEngine(spark, N)).update()`
  then `num_files`, `size_in_bytes` and `tombstone_summary(...)`, `--warm-runs` times; the first
  run is cold (reported apart), the median of the others is "warm". Persisted RDDs are unpersisted
  between runs (not timed).
* **baselines**, in fresh processes as in bench/run.py: our local engine (`OURS_LOAD`), delta-rs
  (`DeltaTable(p)` + `get_add_actions()`) and the parse floor (`FLOOR_LOAD`), interleaved.

Every answer is checked: the job's and the warm query's version, file count, bytes and tombstone
summary against the local engine's (`DeltaLog(p).update()` in a separate, untimed process), against
delta-rs (version, files, bytes) and against the generator's manifest. Children import a frozen copy
of the library (`bench/.data/libsnap/<sha>`, as run.py does) and that copy is what `--py-files`
ships. Before each timed process the benchmark waits for a quiet CPU (benchlib.wait_for_quiet) and
records the 1-minute load average; during each timed Spark run it measures the CPU other processes
used (machine busy time minus the run's process tree) and redoes the run (up to `--retries` times)
when that exceeds `--max-others` cores. Spark's logs and results stay in `bench/.data/sparkbench/`.
`--report-from run.json` re-renders the report of a saved `--json`. Exits 1 when an answer
disagrees (`--strict`: also when a target is missed).

`--fixed-cost` (issue 27) times only the fixed costs: a tiny delta-rs table's VACUUM (dry run) and OPTIMIZE
(applied to a fresh copy) by spark-submit local[2] and on a warm Spark Connect server (local[2]), with each
run's Spark jobs, stages and tasks from the INFO logs; `--fixed-conf NAME:key=value,...` adds variants
(Spark conf; `snapshot_partitions=N` is the request's), `--fixed-modes` picks submit and/or connect. It runs
the working tree's library, not a frozen copy.

`--large` (issue 27) runs only L: replay (`snapshot`), `checkpoint` (written to a `cp -rp` copy of L's
`_delta_log`, never into bench/.data/L) and VACUUM dry runs on L (`vacuum-L`: 1.03M active files to protect,
its 11,380 tombstoned files on disk, retention 0) and on vacuum_bench.py's 1M-file table (`vacuum-1M`), each by
`spark-submit --master local[2]` of the bundled job with `auto_threshold_mb=0` (the state replayed on the
cluster) and by the same job with the local engine, interleaved, under `nice -n 10` (`--nice`): wall, CPU and
peak RSS of the process tree, load1 at start and end, Spark's jobs, stages and tasks, and the answers
compared (checkpoints read back by delta-rs and our local engine; VACUUM plans as path sets):

    .venv/bin/python bench/spark_bench.py --large --no-wait-idle --markdown /tmp/l.md --json /tmp/l.json
    .venv/bin/python bench/spark_bench.py --large --large-actions checkpoint --large-reps 2
    .venv/bin/python bench/spark_bench.py --large --report-from /tmp/l.json    # re-render
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from itertools import pairwise
from pathlib import Path
from typing import Any

import benchlib
import run as benchrun

SPARK_DIR = benchlib.DATA / "sparkbench"
TARGET_WHOLE_JOB_S = 20.0
#: Linear growth (growing faster than linear is the failure): each middle scale's time is at least
#: this fraction of the straight line (chord) between the smallest and the largest scale's times. A
#: faster-than-linear curve sags below its chord; a fixed cost plus a linear term lies on it. (The
#: older test, comparing the marginal cost per action of S->M with M->L, divides by noise once the
#: S->M difference is a fraction of a second.)
CHORD_FRACTION = 0.90

# ---------------------------------------------------------------------------------------------------
# Child programs


#: The local engine's full answers (untimed): what every Spark answer must equal.
EXPECTED = """
import json, sys
from airflow_delta_provider.delta import DeltaLog
p, hours, now = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
s = DeltaLog(p, clock=lambda: now).update()
print(json.dumps({"version": s.version, "num_files": s.num_files, "size_in_bytes": s.size_in_bytes,
                  "num_tombstones_default": s.num_tombstones(),
                  "tombstones": s.tombstone_summary(hours, now_ms=now).to_dict()}, default=str))
"""

#: spark-submit of this is the JVM + SparkSession (+ Python workers) floor.
NOOP_JOB = """
import json, sys, time
t0 = time.perf_counter()
from pyspark.sql import SparkSession
from airflow_delta_provider.delta.engines.spark import SPARK_CONF
builder = SparkSession.builder.appName("spark-bench-noop")
for key, value in SPARK_CONF.items():
    builder = builder.config(key, value)
spark = builder.getOrCreate()
t1 = time.perf_counter()
n = spark.sparkContext.parallelize(range(2), 2).map(lambda x: x + 1).count()
t2 = time.perf_counter()
with open(sys.argv[1], "w") as fh:
    json.dump({"status": "success", "answer": n, "import_s": 0.0, "session_s": t1 - t0, "python_job_s": t2 - t1}, fh)
"""

#: One long-lived SparkSession; argv[1] is a JSON spec; prints one JSON line.
WARM_CHILD = """
import gc, json, os, statistics, sys, time
spec = json.loads(sys.argv[1])
sys.path.insert(0, spec["bench_dir"])
import benchlib
from spark_bench import machine_busy_s, tree_cpu_s
t0 = time.perf_counter()
from pyspark.sql import SparkSession
from airflow_delta_provider.delta import DeltaLog
from airflow_delta_provider.delta.engines.spark import SPARK_CONF, SparkEngine
builder = SparkSession.builder.master("local[2]").appName("spark-bench-warm")
for key, value in {**SPARK_CONF, "spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false"}.items():
    builder = builder.config(key, value)
spark = builder.getOrCreate()
spark.sparkContext.setLogLevel("WARN")
session_s = time.perf_counter() - t0

def unpersist_all():
    for rdd in spark.sparkContext._jsc.getPersistentRDDs().values():
        rdd.unpersist(True)
    gc.collect()

out = {"session_s": session_s, "scales": {}, "discarded": []}
for item in spec["scales"]:
    runs = []
    i = attempt = 0
    while i < spec["runs"]:
        busy = benchlib.wait_for_quiet(*spec["quiet"]) if spec["quiet"] else -1.0
        load1 = float(open("/proc/loadavg").read().split()[0])
        own0, busy0 = tree_cpu_s(os.getpid()), machine_busy_s()
        t0 = time.perf_counter()
        log = DeltaLog(item["path"], clock=lambda: item["now_ms"],
                       engine=SparkEngine(spark, snapshot_partitions=item["partitions"]))
        snap = log.update()
        t1 = time.perf_counter()
        files, size = snap.num_files, snap.size_in_bytes
        t2 = time.perf_counter()
        ts = snap.tombstone_summary(item["retention_hours"], now_ms=item["now_ms"]).to_dict()
        t3 = time.perf_counter()
        own, machine = tree_cpu_s(os.getpid()) - own0, machine_busy_s() - busy0
        run = {"update_s": t1 - t0, "files_s": t2 - t1, "tombstones_s": t3 - t2, "total_s": t3 - t0,
               "busy": busy, "load1": load1, "cpu": own, "others": max(machine - own, 0.0) / (t3 - t0),
               "answer": {"version": snap.version, "num_files": files, "size_in_bytes": size,
                          "tombstones": json.loads(json.dumps(ts, default=str))}}
        del log, snap
        unpersist_all()
        redo = i > 0 and run["others"] > spec["max_others"] and attempt < spec["retries"]
        print(f"  warm {item['scale']} run {i + 1}/{spec['runs']}: {t3 - t0:.2f} s, others {run['others']:.2f} cores"
              f"{' -> rerun' if redo else ''}", file=sys.stderr, flush=True)
        if redo:
            attempt += 1
            out["discarded"].append(f"{item['scale']}: {t3 - t0:.1f} s (others {run['others']:.2f} cores)")
            continue
        runs.append(run)
        i, attempt = i + 1, 0
    out["scales"][item["scale"]] = runs
spark.stop()
print(json.dumps(out))
"""

# ---------------------------------------------------------------------------------------------------
# Processes


@dataclass
class JobSample:
    wall: float
    cpu: float
    rss_mib: float
    busy: float
    load1: float
    result: dict[str, Any]
    stages: list[tuple[str, float]]
    tasks: list[tuple[int, float, float]] = field(default_factory=list)  # per stage: count, longest s, sum s
    others: float = -1.0  # cores used by other processes during the run (machine busy - this tree's CPU)
    ok: bool = False
    mismatch: str = ""


@dataclass
class JobConfig:
    scale: str  # "" for the no-op floor
    action: str  # snapshot | tombstones | noop
    partitions: int
    samples: list[JobSample] = field(default_factory=list)
    discarded: list[str] = field(default_factory=list)  # runs redone because other processes were busy

    @property
    def key(self) -> str:
        return "noop" if self.action == "noop" else f"{self.scale}/{self.action}/p{self.partitions}"

    @classmethod
    def from_key(cls, key: str) -> JobConfig:
        """The configuration a `key` names (the inverse of `key`)."""
        if key == "noop":
            return cls("", "noop", 0)
        scale, action, partitions = key.split("/")
        return cls(scale, action, int(partitions[1:]))

    def med(self, attr: str) -> float:
        return statistics.median(getattr(s, attr) for s in self.samples)

    def rmed(self, *path: str) -> float:
        values = []
        for s in self.samples:
            v: Any = s.result
            for p in path:
                v = v.get(p) if isinstance(v, dict) else None
            if isinstance(v, int | float):
                values.append(float(v))
        return statistics.median(values) if values else float("nan")

    def stage_med(self) -> list[tuple[str, float]]:
        """Median seconds per stage label, in the order of the first sample."""
        return [(label, sec) for label, sec, _ in self.stage_detail()]

    def stage_detail(self) -> list[tuple[str, float, tuple[float, float, float]]]:
        """Per stage: label, median seconds, median (tasks, longest task s, sum of task s)."""
        if not self.samples:
            return []
        out = []
        for i, (label, _) in enumerate(self.samples[0].stages):
            same = [s for s in self.samples if len(s.stages) > i and s.stages[i][0] == label]
            tasks = [s.tasks[i] for s in same if len(s.tasks) > i]
            med = tuple(statistics.median(t[k] for t in tasks) for k in range(3)) if tasks else (0.0, 0.0, 0.0)
            out.append((label, statistics.median(s.stages[i][1] for s in same), med))
        return out


_STAGE = re.compile(r"(ResultStage|ShuffleMapStage) (\d+) \((\w+) at (\S+?):(\d+)\) finished in (\d+) ms")
_TASK = re.compile(r"Finished task [\d.]+ in stage (\d+)\.\d+ \(TID \d+\) in (\d+) ms")
_STAGE_MEANING = {
    "parquet": "checkpoint schema (parquet footer)",
    "collect": "read + parse every log line (persisted), collect state actions",
    "partitionBy": "key file actions by path, shuffle",
    "fold": "aggregate on executors (the first also reconciles)",
    "count": "count tombstones (num_tombstones)",
}


def stages_from_log(stderr: str) -> tuple[list[tuple[str, float]], list[tuple[int, float, float]]]:
    """(label, seconds) of every finished stage and (tasks, longest task s, sum of task s) of each."""
    task_ms: dict[str, list[int]] = {}
    for m in _TASK.finditer(stderr):
        task_ms.setdefault(m[1], []).append(int(m[2]))
    stages, tasks = [], []
    for m in _STAGE.finditer(stderr):
        kind, stage_id, func, where, line, ms = m.groups()
        stages.append((f"{kind} `{func}` at {Path(where).name}:{line}", int(ms) / 1000))
        t = task_ms.get(stage_id, [])
        tasks.append((len(t), max(t, default=0) / 1000, sum(t) / 1000))
    return stages, tasks


def spark_env(root: Path) -> dict[str, str]:
    """Environment of spark-submit as tests/support/spark_cluster.py sets it, plus the frozen library first."""
    import pyspark

    py = benchlib.python()
    env = dict(os.environ)
    env.update(
        {
            "SPARK_HOME": str(Path(pyspark.__file__).resolve().parent),
            "SPARK_LOCAL_IP": "127.0.0.1",
            "PYSPARK_PYTHON": py,
            "PYSPARK_DRIVER_PYTHON": py,
            "PYTHONPATH": str(root),
        }
    )
    return env


def spark_conf_args() -> list[str]:
    from airflow_delta_provider.delta.engines.spark import SPARK_CONF

    argv: list[str] = []
    for key, value in {**SPARK_CONF, "spark.ui.enabled": "false"}.items():
        argv += ["--conf", f"{key}={value}"]
    return argv


def machine_busy_s() -> float:
    """CPU seconds all processes have used since boot (from /proc/stat)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:9]]
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def _proc_table() -> dict[int, tuple[int, int, int]]:
    """pid -> (ppid, own CPU ticks, CPU ticks of reaped children) of every process (from /proc/*/stat)."""
    out = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            text = Path(entry.path, "stat").read_text()
        except OSError:
            continue
        rest = text[text.rindex(")") + 2 :].split()
        out[int(entry.name)] = (int(rest[1]), int(rest[11]) + int(rest[12]), int(rest[13]) + int(rest[14]))
    return out


def _tree(table: dict[int, tuple[int, int, int]], root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo += children.get(pid, [])
    return found


def tree_cpu_s(root: int) -> float:
    """CPU seconds (own + reaped children) of `root` and its live descendants."""
    table = _proc_table()
    ticks = sum(table[p][1] + table[p][2] for p in _tree(table, root) if p in table)
    return ticks / os.sysconf("SC_CLK_TCK")


def timed_process(
    argv: list[str],
    env: dict[str, str],
    cwd: Path,
    timeout: float,
    poll: float = 0.25,
    tree_rss: list[float] | None = None,
) -> tuple[float, float, float, int, str, float]:
    """(wall, cpu, peak RSS MiB, exit code, stderr, CPU s of other processes meanwhile) of `argv`.

    CPU is the process tree's: `wait4`'s rusage of the child (the JVM: spark-submit execs it) counts
    it and the processes it reaped (launcher, Python driver, the PySpark daemon), but the daemon's
    workers live until shutdown and are not reaped into it; so every `poll` seconds the own CPU of
    each live grandchild or deeper descendant is read from /proc and added (last value seen).
    "Other" is the machine's busy time during the run minus that. Peak RSS is `wait4`'s (the JVM);
    `tree_rss`, when given, gets the tree's summed RSS (MiB) at every poll.
    """
    seen: dict[int, int] = {}
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        busy0 = machine_busy_s()
        t0 = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=out, stderr=err, stdin=subprocess.DEVNULL, cwd=cwd, env=env)
        deadline = t0 + timeout
        next_poll = t0
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            now = time.perf_counter()
            if now > deadline:
                proc.kill()
                _, status, usage = os.wait4(proc.pid, 0)
                break
            if now >= next_poll:
                table = _proc_table()
                for p in _tree(table, proc.pid):
                    if p in table and p != proc.pid and table[p][0] != proc.pid:
                        seen[p] = table[p][1]  # own CPU only
                if tree_rss is not None:
                    tree_rss.append(_tree_rss_mib(proc.pid))
                next_poll = now + poll
            time.sleep(0.02)
        wall = time.perf_counter() - t0
        busy = machine_busy_s() - busy0
        code = os.waitstatus_to_exitcode(status)
        proc.returncode = code
        err.seek(0)
        stderr = err.read().decode(errors="replace")
    cpu = usage.ru_utime + usage.ru_stime + sum(seen.values()) / os.sysconf("SC_CLK_TCK")
    return wall, cpu, usage.ru_maxrss / 1024, code, stderr, max(busy - cpu, 0.0)


def loadavg1() -> float:
    try:
        return float(Path("/proc/loadavg").read_text().split()[0])
    except (OSError, ValueError):
        return float("nan")


def check_job(cfg: JobConfig, result: dict[str, Any], exp: dict[str, Any]) -> str:
    """'' when the job's result equals the local engine's answer, else what differs."""
    if result.get("status") != "success":
        return f"status {result.get('status')}: {result.get('message')}"
    if cfg.action == "noop":
        return "" if result.get("answer") == 2 else f"no-op answered {result.get('answer')}"
    if result.get("engine") != "spark":
        return f"engine {result.get('engine')}"
    got: dict[str, Any] = {"version": result.get("version")}
    want: dict[str, Any] = {"version": exp["version"]}
    if cfg.action == "snapshot":
        got |= {
            "num_files": result.get("num_files"),
            "size_in_bytes": result.get("size_bytes"),
            "num_tombstones": result.get("num_tombstones"),
            "file_summary.num_files": (result.get("file_summary") or {}).get("num_files"),
        }
        want |= {
            "num_files": exp["num_files"],
            "size_in_bytes": exp["size_in_bytes"],
            "num_tombstones": exp["num_tombstones_default"],
            "file_summary.num_files": exp["num_files"],
        }
    else:
        keys = ("num_tombstones", "retained", "expired", "retained_bytes", "reclaimable_bytes", "partitions")
        got |= {k: result.get(k) for k in keys}
        want |= {k: exp["tombstones"].get(k) for k in keys}
    bad = [k for k in want if got[k] != want[k]]
    return "" if not bad else "; ".join(f"{k}: {str(got[k])[:80]} != {str(want[k])[:80]}" for k in bad)


# ---------------------------------------------------------------------------------------------------
# Benchmarks


def count_actions(scale: str, manifest: dict[str, Any], data: Path) -> dict[str, int]:
    """Checkpoint rows (manifest) + non-empty lines of the commits after the checkpoint (counted here)."""
    log = benchlib.table_dir(scale, data) / "_delta_log"
    cp = manifest["checkpoint_version"]
    lines = 0
    commits = 0
    for entry in os.scandir(log):
        n = entry.name
        if len(n) == 25 and n.endswith(".json") and n[:20].isdigit() and int(n[:20]) > cp:
            commits += 1
            with open(entry.path, "rb") as fh:
                lines += sum(1 for line in fh if line.strip())
    return {
        "checkpoint_rows": manifest["checkpoint_rows"],
        "commits": commits,
        "commit_actions": lines,
        "actions": manifest["checkpoint_rows"] + lines,
    }


def expected_answers(scales: list[str], manifests: dict[str, dict], args: argparse.Namespace) -> dict[str, dict]:
    out = {}
    for s in scales:
        m = manifests[s]
        argv = [
            benchlib.python(),
            "-c",
            EXPECTED,
            str(benchlib.table_dir(s, args.data)),
            str(m["retention_hours"]),
            str(m["now_ms"]),
        ]
        proc = subprocess.run(
            argv, capture_output=True, text=True, cwd=benchrun.CHILD["cwd"], env=benchrun.CHILD["env"]
        )
        if proc.returncode != 0:
            raise SystemExit(f"local engine failed on {s}:\n{proc.stderr[-3000:]}")
        out[s] = json.loads(proc.stdout.strip().splitlines()[-1])
        print(f"expected answers for {s}: version {out[s]['version']}, {out[s]['num_files']:,} files", file=sys.stderr)
    return out


def bench_baselines(scales: list[str], manifests: dict[str, dict], args: argparse.Namespace, quiet: Any) -> dict:
    py = benchlib.python()
    commands: list[benchrun.Command] = []
    for s in scales:
        m = manifests[s]
        p = str(benchlib.table_dir(s, args.data))
        commands.append(
            benchrun.Command(
                (s, "ours"), [py, "-c", benchrun.OURS_LOAD, p, str(m["retention_hours"]), str(m["now_ms"])]
            )
        )
        commands.append(benchrun.Command((s, "delta-rs"), [py, "-c", benchrun.DELTARS_LOAD, p]))
        commands.append(benchrun.Command((s, "floor"), [py, "-c", benchrun.FLOOR_LOAD, p, "all"]))
    print(f"baselines: {len(commands)} commands x (1 warm-up + {args.baseline_reps}) rounds", file=sys.stderr)
    benchrun.run_round_robin(commands, args.baseline_reps, 1, quiet)
    return {c.key: c for c in commands}


def bench_jobs(
    scales: list[str],
    manifests: dict[str, dict],
    expected: dict[str, dict],
    args: argparse.Namespace,
    root: Path,
    py_files: str,
    quiet: Any,
) -> list[JobConfig]:
    """The whole-job configurations, timed."""
    from airflow_delta_provider.commands.request import Request
    from airflow_delta_provider.jobs import job_script
    from airflow_delta_provider.jobs.runner import job_argv

    configs = [JobConfig("", "noop", 0)]
    for s in scales:
        configs += [JobConfig(s, "snapshot", n) for n in args.partitions]
        configs.append(JobConfig(s, "tombstones", args.tombstone_partitions))
    env = spark_env(root)
    work = Path(tempfile.mkdtemp(prefix="jobs-", dir=SPARK_DIR))
    noop_script = work / "noop_job.py"
    noop_script.write_text(NOOP_JOB)
    submit = [str(Path(env["SPARK_HOME"]) / "bin" / "spark-submit"), "--master", "local[2]", "--py-files", py_files]
    if args.driver_memory:
        submit += ["--driver-memory", args.driver_memory]
    submit += spark_conf_args()

    def argv_of(cfg: JobConfig, out: Path) -> list[str]:
        if cfg.action == "noop":
            return [*submit, str(noop_script), str(out)]
        m = manifests[cfg.scale]
        fields = {"retention_hours": m["retention_hours"]} if cfg.action == "tombstones" else {}
        request = Request.make(
            table=str(benchlib.table_dir(cfg.scale, args.data)),
            action=cfg.action,
            engine="spark",
            snapshot_partitions=cfg.partitions,
            now_ms=m["now_ms"],
            **fields,
        )
        return [*submit, job_script(), *job_argv(request, str(out))]

    print(f"whole job: {len(configs)} spark-submits x {args.reps} rounds", file=sys.stderr)
    for r in range(args.reps):
        shift = r % len(configs)
        for cfg in configs[shift:] + configs[:shift]:
            out = work / f"{cfg.key.replace('/', '-')}-{r}.json"
            argv = argv_of(cfg, out)
            for attempt in range(args.retries + 1):
                busy = benchlib.wait_for_quiet(*quiet) if quiet else -1.0
                load1 = loadavg1()
                wall, cpu, rss, code, stderr, others = timed_process(argv, env, work, args.timeout)
                (work / f"{cfg.key.replace('/', '-')}-{r}-{attempt}.log").write_text(stderr)
                try:
                    result = json.loads(out.read_text())
                except (OSError, ValueError):
                    result = {"status": "no result", "message": f"exit {code}: {stderr[-2000:]}"}
                stages, tasks = stages_from_log(stderr)
                sample = JobSample(wall, cpu, rss, busy, load1, result, stages, tasks, others / wall)
                sample.mismatch = check_job(cfg, result, expected.get(cfg.scale, {}))
                if code != 0 and not sample.mismatch:
                    sample.mismatch = f"exit code {code}"
                sample.ok = not sample.mismatch
                contended = sample.others > args.max_others and attempt < args.retries
                print(
                    f"  round {r + 1}/{args.reps} {cfg.key}: {wall:.1f} s wall, job {result.get('duration_s')} s, "
                    f"load {load1:.2f}, others {sample.others:.2f} cores"
                    f"{'' if sample.ok else ' MISMATCH ' + sample.mismatch}{' -> rerun' if contended else ''}",
                    file=sys.stderr,
                    flush=True,
                )
                if not contended:
                    cfg.samples.append(sample)
                    break
                cfg.discarded.append(f"{wall:.1f} s (others {sample.others:.2f} cores)")
    return configs


def bench_warm(
    scales: list[str], manifests: dict[str, dict], args: argparse.Namespace, root: Path, quiet: Any
) -> dict[str, Any]:
    spec = {
        "bench_dir": str(benchlib.BENCH_DIR),
        "runs": args.warm_runs,
        "quiet": list(quiet) if quiet else None,
        "max_others": args.max_others,
        "retries": args.retries,
        "scales": [
            {
                "scale": s,
                "path": str(benchlib.table_dir(s, args.data)),
                "partitions": args.warm_partitions,
                "retention_hours": manifests[s]["retention_hours"],
                "now_ms": manifests[s]["now_ms"],
            }
            for s in scales
        ],
    }
    work = Path(tempfile.mkdtemp(prefix="warm-", dir=SPARK_DIR))
    print(f"warm query: one SparkSession, {len(scales)} scales x {args.warm_runs} runs", file=sys.stderr)
    argv = [benchlib.python(), "-c", WARM_CHILD, json.dumps(spec)]
    with open(work / "warm.log", "wb") as err:
        proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=err, cwd=work, env=spark_env(root))
    if proc.returncode != 0:
        raise SystemExit(f"warm child failed ({proc.returncode}); log: {work / 'warm.log'}")
    return json.loads(proc.stdout.decode().strip().splitlines()[-1])


# ---------------------------------------------------------------------------------------------------
# Report


def fmt(x: float, digits: int = 2) -> str:
    return "n/a" if x != x else f"{x:,.{digits}f}"


def table(header: list[str], rows: list[list[str]]) -> str:
    return benchrun.table(header, rows)


def fit_line(xs: list[float], ys: list[float]) -> tuple[float, float, float]:
    """Least squares y = a + b x: (a, b, largest |residual| / y)."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx if sxx else float("nan")
    a = my - b * mx
    worst = max(abs(y - (a + b * x)) / y for x, y in zip(xs, ys, strict=True))
    return a, b, worst


def linearity(scales: list[str], actions: dict[str, dict], seconds: dict[str, float]) -> dict[str, Any]:
    xs = [actions[s]["actions"] / 1e6 for s in scales]
    ys = [seconds[s] for s in scales]
    out: dict[str, Any] = {}
    if len(scales) >= 2:
        out["fit"] = fit_line(xs, ys)
    if len(scales) >= 3:
        seg = [(ys[i + 1] - ys[i]) / (xs[i + 1] - xs[i]) for i in range(len(xs) - 1)]
        out["segments"] = seg
        chord = [ys[0] + (ys[-1] - ys[0]) * (x - xs[0]) / (xs[-1] - xs[0]) for x in xs[1:-1]]
        out["chord_ratio"] = min(y / c for y, c in zip(ys[1:-1], chord, strict=True))
        out["linear"] = out["chord_ratio"] >= CHORD_FRACTION
    return out


def stage_growth(scales: list[str], actions: dict[str, dict], jobs: list[JobConfig], partitions: int) -> str:
    """Per-stage seconds of the snapshot job across scales, with the marginal s per million actions."""
    by_scale = {
        c.scale: c.stage_med()
        for c in jobs
        if c.action == "snapshot" and c.partitions == partitions and c.samples and c.scale in scales
    }
    present = [s for s in scales if s in by_scale]
    if len(present) < 2 or len({len(by_scale[s]) for s in present}) != 1:
        return ""
    n = {s: actions[s]["actions"] / 1e6 for s in present}
    rows = []
    for i, (label, _) in enumerate(by_scale[present[0]]):
        secs = [by_scale[s][i][1] for s in present]
        marg = [(secs[j + 1] - secs[j]) / (n[present[j + 1]] - n[present[j]]) for j in range(len(present) - 1)]
        rows.append([label, *(fmt(x) for x in secs), " -> ".join(fmt(x, 1) for x in marg)])
    steps = ", ".join(f"{a}->{b}" for a, b in pairwise(present))
    return (
        f"\nPer stage across scales (snapshot, {partitions} partitions; marginal s per million actions "
        f"{steps}):\n\n" + table(["stage", *(f"{s} s" for s in present), "marginal s/M actions"], rows)
    )


def report(
    args: argparse.Namespace,
    machine: dict[str, str],
    manifests: dict[str, dict],
    actions: dict[str, dict],
    expected: dict[str, dict],
    baselines: dict | None,
    jobs: list[JobConfig] | None,
    warm: dict[str, Any] | None,
) -> tuple[str, list[list[str]], bool]:
    scales = args.scales
    parts: list[str] = []
    targets: list[list[str]] = []
    all_ok = True
    parts.append("### Machine and run\n")
    parts.append(table(["", ""], [[k, str(v)] for k, v in machine.items()]))
    parts.append(
        f"\nwhole job: {args.reps} round(s) per configuration, interleaved (the order rotates each round); "
        f"warm query: {args.warm_runs} runs per scale in one session (first = cold); baselines: "
        f"{args.baseline_reps} rounds after a warm-up round; "
        + (
            "quiet-wait off"
            if args.no_wait_idle
            else f"before each timed process: wait up to {args.idle_max_wait:g} s for other CPU use < "
            f"{args.idle_threshold:.0%}"
        )
    )

    parts.append("\n### Tables (actions = checkpoint rows + lines of the commits after it)\n")
    rows = []
    for s in scales:
        a, m = actions[s], manifests[s]
        rows.append(
            [
                s,
                f"{a['checkpoint_rows']:,}",
                f"{a['commits']:,}",
                f"{a['commit_actions']:,}",
                f"{a['actions']:,}",
                f"{m['num_files']:,}",
                f"{m['log_bytes'] / 2**20:.0f}",
            ]
        )
    parts.append(
        table(["scale", "checkpoint rows", "commits", "commit actions", "actions", "active files", "log MiB"], rows)
    )

    base: dict[str, dict[str, float]] = {}
    if baselines:
        for s in scales:
            base[s] = {k: baselines[(s, k)].med("wall") for k in ("ours", "delta-rs", "floor")}
            answers = [baselines[(s, "ours")].answer, baselines[(s, "delta-rs")].answer]
            e = expected[s]
            ok = (
                answers[0] == [e["version"], e["num_files"], e["size_in_bytes"], e["tombstones"]["retained"]]
                and answers[1] == answers[0][:3]
            )
            base[s]["ok"] = ok
            all_ok &= ok
    noop = next((c for c in jobs or [] if c.action == "noop"), None)
    floor = noop.med("wall") if noop and noop.samples else float("nan")

    if jobs:
        parts.append("\n### Whole job: `spark-submit --master local[2]` of the bundled job, wall clock\n")
        rows = []
        for c in jobs:
            if not c.samples:
                continue
            ok = all(s.ok for s in c.samples)
            all_ok &= ok
            walls = [s.wall for s in c.samples]
            dur = c.rmed("duration_s")
            rep, rpt = c.rmed("timings", "replay_s"), c.rmed("timings", "report_s")
            common = [fmt(c.med("wall")), f"{fmt(min(walls))}-{fmt(max(walls))}"]
            tail = [
                fmt(c.med("cpu"), 1),
                f"{c.med('rss_mib'):,.0f}",
                fmt(c.med("load1")),
                fmt(c.med("others")),
                "yes" if ok else "**NO**: " + next(s.mismatch for s in c.samples if not s.ok),
            ]
            if c.action == "noop":
                rows.append(
                    [
                        "-",
                        "no-op: SparkSession + 2-task Python job",
                        "-",
                        *common,
                        "-",
                        "-",
                        "-",
                        f"session {fmt(c.rmed('session_s'))}, Python job {fmt(c.rmed('python_job_s'))}",
                        "-",
                        "-",
                        *tail,
                    ]
                )
                continue
            d = base.get(c.scale, {}).get("delta-rs", float("nan"))
            rows.append(
                [
                    c.scale,
                    c.action,
                    str(c.partitions),
                    *common,
                    fmt(c.med("wall") / d, 1) + "x",
                    fmt(dur),
                    fmt(c.med("wall") - dur),
                    fmt(dur - rep - rpt),
                    fmt(rep),
                    fmt(rpt),
                    *tail,
                ]
            )
        header = [
            "scale",
            "action",
            "partitions",
            "wall s",
            "min-max",
            "wall / delta-rs",
            "job duration_s",
            "JVM + driver start (wall - duration)",
            "SparkSession start (duration - timings)",
            "replay_s",
            "report_s",
            "CPU s",
            "peak RSS MiB",
            "load1 at start (incl. own previous run)",
            "other processes' cores during the run",
            "answers = local engine",
        ]
        parts.append(table(header, rows))
        parts.append(
            "\n`duration_s` is the job's own clock (from `run()` in the driver's Python to the result); "
            "`replay_s` is `DeltaLog.update()` (list the log, read + parse every line, persist, collect the state "
            "actions); the file actions are keyed, shuffled and reconciled lazily, so that work is paid by the first "
            "report action and shows in `report_s` (snapshot: `file_summary` + `num_tombstones`; tombstones: "
            "`tombstone_summary`). CPU is the spark-submit process tree's (the JVM and what it reaped, from "
            "`os.wait4`, plus the PySpark workers polled from /proc); peak RSS is the JVM's. \"Other "
            "processes' cores\" is the machine's busy CPU time during the run minus that tree's, per second."
        )
        redone = [f"{c.key}: {', '.join(c.discarded)}" for c in jobs if c.discarded]
        parts.append(
            f"\nRuns redone because other processes used more than {args.max_others:g} cores during them "
            f"(at most {args.retries} times each): " + ("; ".join(redone) if redone else "none") + "."
        )
        big = [c for c in jobs if c.action != "noop" and c.samples]
        if big:
            parts.append("\n### Spark stages of the whole job (seconds, median; from spark-submit's INFO log)\n")
            for c in big:
                if c.scale != scales[-1]:
                    continue
                rows = [
                    [
                        label,
                        fmt(sec),
                        f"{n:.0f}",
                        fmt(longest),
                        fmt(total / sec if sec else float("nan"), 1),
                        _STAGE_MEANING.get(label.split("`")[1], ""),
                    ]
                    for label, sec, (n, longest, total) in c.stage_detail()
                ]
                parts.append(f"\n{c.key}:\n")
                parts.append(
                    table(["stage", "s", "tasks", "longest task s", "cores busy (task s / stage s)", "what"], rows)
                )
            rows = []
            for c in big:
                st = c.stage_med()
                rows.append([c.key, fmt(sum(x for _, x in st)), " + ".join(fmt(x, 1) for _, x in st)])
            parts.append("\nAll configurations (stage seconds in order):\n")
            parts.append(table(["job", "sum of stages s", "stages"], rows))
            parts.append(stage_growth(scales, actions, jobs, args.partitions[0]))

    if warm:
        parts.append(
            f"\n### Warm query: one SparkSession (local[2]), `DeltaLog(p, engine=SparkEngine(spark, "
            f"{args.warm_partitions})).update()` + `num_files`, `size_in_bytes`, `tombstone_summary()`\n"
        )
        parts.append(
            f"SparkSession start in the child: {fmt(warm['session_s'])} s. Runs redone because other processes "
            f"were busy: {'; '.join(warm.get('discarded') or []) or 'none'}.\n"
        )
        rows = []
        for s in scales:
            runs = warm["scales"].get(s) or []
            if not runs:
                continue
            e = expected[s]
            ok = all(
                r["answer"]
                == {
                    "version": e["version"],
                    "num_files": e["num_files"],
                    "size_in_bytes": e["size_in_bytes"],
                    "tombstones": e["tombstones"],
                }
                for r in runs
            )
            all_ok &= ok
            later = runs[1:] or runs
            med = {
                k: statistics.median(r[k] for r in later) for k in ("update_s", "files_s", "tombstones_s", "total_s")
            }
            d = base.get(s, {}).get("delta-rs", float("nan"))
            rows.append(
                [
                    s,
                    fmt(runs[0]["total_s"]),
                    fmt(med["total_s"]),
                    ", ".join(fmt(r["total_s"]) for r in later),
                    fmt(med["update_s"]),
                    fmt(med["files_s"]),
                    fmt(med["tombstones_s"]),
                    fmt(med["total_s"] / d, 1) + "x",
                    fmt(statistics.median(r["load1"] for r in later)),
                    fmt(statistics.median(r.get("others", float("nan")) for r in later)),
                    "yes" if ok else "**NO**",
                ]
            )
        parts.append(
            table(
                [
                    "scale",
                    "cold (1st run) s",
                    "warm s (median of the rest)",
                    "warm runs s",
                    "update() s",
                    "num_files + size s",
                    "tombstone_summary s",
                    "warm / delta-rs",
                    "load1",
                    "other processes' cores",
                    "answers = local engine",
                ],
                rows,
            )
        )

    if baselines:
        parts.append("\n### Baselines in the same run (fresh process each, median wall s) and ratios\n")
        rows = []
        for s in scales:
            b = base[s]
            d = b["delta-rs"]
            best = min(
                (c for c in jobs or [] if c.scale == s and c.action == "snapshot" and c.samples),
                key=lambda c: c.med("wall"),
                default=None,
            )
            w = warm["scales"].get(s) if warm else None
            wmed = statistics.median(r["total_s"] for r in (w[1:] or w)) if w else float("nan")
            whole = best.med("wall") if best else float("nan")
            rows.append(
                [
                    s,
                    fmt(b["ours"]),
                    fmt(d),
                    fmt(b["floor"]),
                    fmt(floor),
                    fmt(whole) + (f" (p{best.partitions})" if best else ""),
                    fmt(whole / d, 1) + "x",
                    fmt(wmed / d, 1) + "x",
                    fmt(whole / b["ours"], 1) + "x",
                    fmt(whole / b["floor"], 1) + "x",
                    fmt(wmed / b["floor"], 1) + "x",
                    "yes" if b["ok"] else "**NO**",
                ]
            )
        parts.append(
            table(
                [
                    "scale",
                    "ours (local engine)",
                    "delta-rs",
                    "parse floor",
                    "spark-submit no-op",
                    "spark whole job (best snapshot)",
                    "whole / delta-rs",
                    "warm / delta-rs",
                    "whole / ours",
                    "whole / parse floor",
                    "warm / parse floor",
                    "ours = delta-rs = local answers",
                ],
                rows,
            )
        )
        parts.append(
            "\nours / delta-rs / parse floor are bench/run.py's `OURS_LOAD`, `DELTARS_LOAD`, `FLOOR_LOAD` "
            "(`all` columns); the no-op is `spark-submit` of a script that creates the job's SparkSession and "
            "runs one 2-task Python RDD job."
        )

    if jobs and len(scales) >= 2:
        parts.append("\n### Growth with the number of actions\n")
        rows = []
        # (seconds per scale, is a target): the job's own work (replay_s + report_s: what scales with the
        # log; JVM and SparkSession start are constant and shown above) carries the target
        series: dict[str, tuple[dict[str, float], bool]] = {}
        for c in jobs:
            if c.action != "noop" and c.samples:
                work = c.rmed("timings", "replay_s") + c.rmed("timings", "report_s")
                name = f"job work (replay_s + report_s), {c.action} p{c.partitions}"
                series.setdefault(name, ({}, True))[0][c.scale] = work
        for c in jobs:
            if c.action != "noop" and c.samples:
                name = f"whole job wall, {c.action} p{c.partitions}"
                series.setdefault(name, ({}, False))[0][c.scale] = c.med("wall")
        if warm:
            for s in scales:
                w = warm["scales"].get(s)
                if w:
                    series.setdefault(f"warm query p{args.warm_partitions}", ({}, True))[0][s] = statistics.median(
                        r["total_s"] for r in (w[1:] or w)
                    )
        first = scales[0]
        for name, (secs, is_target) in series.items():
            if any(s not in secs for s in scales):
                continue
            lin = linearity(scales, actions, secs)
            a, b, worst = lin["fit"]
            cells = []
            for s in scales:
                n = actions[s]["actions"] / 1e6
                grow = actions[s]["actions"] / actions[first]["actions"]
                cells.append(
                    f"{s}: {fmt(secs[s])} s, {fmt(secs[s] / n, 1)} s/M, "
                    f"x{secs[s] / secs[first]:.1f} time for x{grow:.1f} actions"
                )
            seg = lin.get("segments")
            rows.append(
                [
                    name,
                    "; ".join(cells),
                    f"{fmt(a)} s + {fmt(b)} s/M actions (worst residual {worst:.0%})",
                    " -> ".join(f"{fmt(x)}" for x in seg) if seg else "n/a",
                    ("yes" if lin["linear"] else "**no**") if "linear" in lin else "n/a",
                ]
            )
            if is_target and "linear" in lin:
                targets.append(
                    [
                        f"linear growth ({name}): each middle scale's time >= {CHORD_FRACTION:g}x the straight line "
                        f"between {scales[0]} and {scales[-1]}",
                        f"x{lin['chord_ratio']:.2f} of the line; fit {fmt(a)} s + {fmt(b)} s/M actions, "
                        f"worst residual {worst:.0%}",
                        benchrun.verdict(lin["linear"]),
                    ]
                )
        parts.append(
            table(
                [
                    "series",
                    "per scale (time, s per million actions, growth vs " + first + ")",
                    "least-squares fit",
                    "marginal s/M actions between scales",
                    "linear",
                ],
                rows,
            )
        )
        parts.append(
            f'\n"Linear" here: the middle scale takes at least {CHORD_FRACTION:g}x the time on the straight '
            "line between the smallest and the largest scale: a faster-than-linear curve sags below it (the intercept "
            "is the fixed cost: JVM, SparkSession, Python workers). The targets use the job's own work "
            "(`replay_s + report_s`) and the warm query, which leave out the constant start-up. The marginal "
            "costs between scales are shown, not judged: once S->M differs by a fraction of a second, its "
            "slope is noise."
        )

    if jobs and "L" in scales:
        for c in jobs:
            if c.scale == "L" and c.samples:
                w = c.med("wall")
                targets.append(
                    [
                        f"L whole job ({c.action}, p{c.partitions}) <= {TARGET_WHOLE_JOB_S:g} s",
                        f"{fmt(w)} s ({w / TARGET_WHOLE_JOB_S:.1f}x the target, +{fmt(w - TARGET_WHOLE_JOB_S)} s over)"
                        if w > TARGET_WHOLE_JOB_S
                        else f"{fmt(w)} s",
                        benchrun.verdict(w <= TARGET_WHOLE_JOB_S),
                    ]
                )
    targets.append(
        [
            "answers: Spark job, warm query, local engine, delta-rs, manifest agree",
            "yes" if all_ok else "no",
            benchrun.verdict(all_ok),
        ]
    )
    parts.append("\n### Targets\n")
    parts.append(table(["target", "measured", ""], targets))
    return "\n".join(parts) + "\n", targets, all_ok


# ---------------------------------------------------------------------------------------------------


def rerender(args: argparse.Namespace) -> int:
    """The report of a saved `--json` run (with this version's formatting)."""
    raw = json.loads(args.report_from.read_text())
    for key in (
        "scales",
        "reps",
        "partitions",
        "warm_runs",
        "warm_partitions",
        "baseline_reps",
        "max_others",
        "retries",
        "no_wait_idle",
        "idle_threshold",
        "idle_max_wait",
    ):
        if key in raw.get("args", {}):
            setattr(args, key, raw["args"][key])
    jobs = []
    for key, samples in raw["jobs"].items():
        if key.endswith("/cds"):  # class-archive configurations of runs before their removal
            continue
        cfg = JobConfig.from_key(key)
        for x in samples:
            x["stages"] = [tuple(t) for t in x["stages"]]
            x["tasks"] = [tuple(t) for t in x.get("tasks", [])]
            cfg.samples.append(JobSample(**x))
        jobs.append(cfg)
    baselines = {}
    for key, samples in raw["baselines"].items():
        cmd = benchrun.Command(tuple(key.split("/")), [])  # type: ignore[arg-type]
        cmd.samples = [benchrun.Sample(**x) for x in samples]
        baselines[cmd.key] = cmd
    text, _, ok = report(
        args,
        raw["machine"],
        raw["manifests"],
        raw["actions"],
        raw["expected"],
        baselines or None,
        jobs or None,
        raw["warm"],
    )
    print(text)
    if args.markdown:
        args.markdown.write_text(text)
    return 0 if ok else 1


# ---------------------------------------------------------------------------------------------------
# --fixed-cost (issue 27): what a tiny-table VACUUM and OPTIMIZE cost on Spark whatever the table's size

TARGET_SUBMIT_TINY_S = 15.0
TARGET_CONNECT_TINY_S = 5.0
_GOT_JOB = re.compile(r"Got job (\d+)")
_STAGE_DONE = re.compile(r"(ResultStage|ShuffleMapStage) (\d+) \(.{0,3000}?\) finished in (\d+) ms", re.S)
_TASK_DONE = re.compile(r"Finished task [\d.]+ in stage (\d+)\.\d+ \(TID \d+\) in (\d+) ms")


def job_breakdown(log: str) -> dict[str, Any]:
    """Spark's jobs, stages (kind, id, s, tasks) and task count in an INFO log (spark-submit's stderr or a
    Connect server's log between two offsets)."""
    tasks: dict[str, int] = {}
    for m in _TASK_DONE.finditer(log):
        tasks[m[1]] = tasks.get(m[1], 0) + 1
    stages = [(kind, int(sid), int(ms) / 1000, tasks.get(sid, 0)) for kind, sid, ms in _STAGE_DONE.findall(log)]
    return {
        "jobs": len(set(_GOT_JOB.findall(log))),
        "stages": len(stages),
        "tasks": sum(tasks.values()),
        "stage_s": round(sum(st[2] for st in stages), 2),
        "longest_stages": sorted(stages, key=lambda st: -st[2])[:3],
    }


def tiny_table(path: Path) -> Path:
    """A tiny partitioned delta-rs table: four appends of two partitions (small files OPTIMIZE compacts),
    then a delete (a rewritten file VACUUM plans with retention 0)."""
    import deltalake
    import pyarrow as pa

    for i in range(4):
        batch = pa.table({"id": [i, i + 10], "part": ["a", "b"]})
        deltalake.write_deltalake(str(path), batch, mode="append", partition_by=["part"])
    deltalake.DeltaTable(str(path)).delete("id = 0")
    return path


def fixed_requests(table: str, action: str, partitions: int) -> Any:
    from airflow_delta_provider.commands.request import Request

    fields: dict[str, Any] = {"retention_hours": 0, "enforce_retention_duration": False}
    if action == "optimize":
        fields = {"apply": True}
    return Request.make(table=table, action=action, engine="spark", snapshot_partitions=partitions, **fields)


def check_fixed(action: str, result: dict[str, Any]) -> str:
    """'' when a tiny run's answer is the expected one, else what is wrong."""
    if result.get("status") != "success":
        return f"{result.get('error_class')}: {str(result.get('message'))[:300]}"
    if action == "vacuum" and result.get("num_files") != 1:
        return f"vacuum planned {result.get('num_files')} files, expected 1"
    if action == "optimize" and (result.get("num_files_removed"), result.get("num_files_added")) != (7, 2):
        return f"optimize removed/added {result.get('num_files_removed')}/{result.get('num_files_added')}, expected 7/2"
    return ""


def fixed_cost(args: argparse.Namespace) -> int:
    """spark-submit (local[2]) of the bundled job and a warm Connect server (local[2]), tiny VACUUM (dry
    run) and OPTIMIZE (applied to a fresh copy each time), with each run's Spark jobs."""
    import shutil

    import pyspark

    from airflow_delta_provider.commands.command import execute
    from airflow_delta_provider.commands.spark_session import spark_session
    from airflow_delta_provider.jobs import build_py_files_zip, job_script
    from airflow_delta_provider.jobs.runner import job_argv

    work = Path(tempfile.mkdtemp(prefix="fixed-", dir=SPARK_DIR))
    source = tiny_table(work / "source")
    env = spark_env(benchlib.REPO)  # the working tree's library (not a frozen copy)
    spark_home = Path(pyspark.__file__).resolve().parent
    py_files = build_py_files_zip(SPARK_DIR / "pyfiles")
    submit = [str(spark_home / "bin" / "spark-submit"), "--master", "local[2]", "--py-files", py_files]
    submit += spark_conf_args()
    rows: list[dict[str, Any]] = []

    def fresh(name: str) -> str:
        target = work / name
        if target.exists():
            shutil.rmtree(target)
        shutil.copytree(source, target, copy_function=shutil.copy2)
        return str(target)

    def record(mode: str, action: str, rep: int, wall: float, result: dict[str, Any], log: str, **extra: Any) -> None:
        row = {"mode": mode, "action": action, "rep": rep, "wall_s": round(wall, 2), **extra}
        row.update(job_s=result.get("duration_s"), timings=result.get("timings"), **job_breakdown(log))
        row["mismatch"] = check_fixed(action, result)
        rows.append(row)
        print(
            f"  {mode} {action} #{rep}: {wall:.1f} s wall, job {result.get('duration_s')} s, {row['jobs']} jobs "
            f"{row['stages']} stages {row['tasks']} tasks{' MISMATCH ' + row['mismatch'] if row['mismatch'] else ''}",
            file=sys.stderr,
            flush=True,
        )

    quiet = benchlib.quiet_setting(args)
    for variant, conf, parts in args.fixed_variants if "submit" in args.fixed_modes else ():
        for rep in range(args.fixed_reps):
            for action in ("vacuum", "optimize"):
                table, out = fresh(f"submit-{action}"), work / f"submit-{action}-{rep}.json"
                extra = [a for k, v in conf.items() for a in ("--conf", f"{k}={v}")]
                argv = [
                    *submit,
                    *extra,
                    job_script(),
                    *job_argv(fixed_requests(table, action, parts), str(out)),
                ]
                busy = benchlib.wait_for_quiet(*quiet) if quiet else -1.0
                load1 = loadavg1()
                wall, _, _, code, stderr, _ = timed_process(argv, env, work, args.timeout)
                result = (
                    json.loads(out.read_text())
                    if out.exists()
                    else {"status": f"exit {code}", "message": stderr[-500:]}
                )
                record(f"spark-submit{variant}", action, rep, wall, result, stderr, busy=busy, load1=load1)

    # a warm Connect server: started once, warmed by one untimed run of each action, then timed
    if "connect" not in args.fixed_modes:
        return report_fixed(rows, args)
    port = free_port()
    server_log = work / "connect-server.log"
    server_argv = [str(spark_home / "bin" / "spark-submit"), "--master", "local[2]", "--class", CONNECT_CLASS]
    for key, value in {**CONNECT_BENCH_CONF, "spark.connect.grpc.binding.port": str(port)}.items():
        server_argv += ["--conf", f"{key}={value}"]
    (jar,) = (spark_home / "jars").glob("spark-connect_*.jar")
    with open(server_log, "wb") as fh:
        server = subprocess.Popen(
            [*server_argv, str(jar)], stdout=fh, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
    try:
        deadline = time.monotonic() + 180
        while "Spark Connect server started" not in server_log.read_text(errors="replace"):
            if server.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"the Connect server did not start:\n{server_log.read_text(errors='replace')[-2000:]}")
            time.sleep(0.5)
        url = f"sc://127.0.0.1:{port}"
        for variant, conf, parts in args.fixed_variants:
            for rep in range(-1, args.fixed_reps):  # rep -1 warms the server (and this process's imports)
                for action in ("vacuum", "optimize"):
                    table = fresh(f"connect-{action}")
                    busy = benchlib.wait_for_quiet(*quiet) if quiet and rep >= 0 else -1.0
                    load1 = loadavg1()
                    offset = server_log.stat().st_size
                    t0 = time.perf_counter()
                    sessions: list[Any] = []
                    opened: list[float] = []

                    def factory(
                        options: Any, conf: dict = conf, sessions: list = sessions, opened: list = opened
                    ) -> Any:
                        t = time.perf_counter()
                        sessions.append(spark_session(url, options, app_name="bench", py_files=[py_files], conf=conf))
                        opened.append(time.perf_counter() - t)
                        return sessions[-1]

                    _, result = execute(fixed_requests(table, action, parts), spark_factory=factory)
                    for spark in sessions:
                        spark.stop()
                    session_s = round(sum(opened), 2)
                    wall = time.perf_counter() - t0
                    time.sleep(0.5)  # the server's last log lines
                    if rep >= 0:
                        log = server_log.read_bytes()[offset:].decode(errors="replace")
                        record(
                            f"connect{variant}",
                            action,
                            rep,
                            wall,
                            result,
                            log,
                            session_s=session_s,
                            busy=busy,
                            load1=load1,
                        )
    finally:
        os.killpg(server.pid, 15)
        server.wait(timeout=60)
    return report_fixed(rows, args)


def report_fixed(rows: list[dict[str, Any]], args: argparse.Namespace) -> int:
    """The fixed-cost table (median run of each mode and action), printed and written where asked."""
    lines = [
        "| mode | action | wall s: median (all) | job s | Spark jobs | stages | tasks | stage s | longest stages "
        "| load1 | target |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for mode in dict.fromkeys(r["mode"] for r in rows):
        for action in ("vacuum", "optimize"):
            mine = [r for r in rows if r["mode"] == mode and r["action"] == action]
            if not mine:
                continue
            mid = sorted(mine, key=lambda r: r["wall_s"])[len(mine) // 2]
            target = TARGET_CONNECT_TINY_S if mode.startswith("connect") else TARGET_SUBMIT_TINY_S
            walls = ", ".join(f"{r['wall_s']:.1f}" for r in mine)
            longest = "; ".join(f"{k} {i} {sec:.1f} s/{n} tasks" for k, i, sec, n in mid["longest_stages"])
            met = "met" if mid["wall_s"] <= target else "missed"
            bad = " MISMATCH" if any(r["mismatch"] for r in mine) else ""
            lines.append(
                f"| {mode} | {action} | {mid['wall_s']:.1f} ({walls}) | {mid['job_s']} | {mid['jobs']} | "
                f"{mid['stages']} | {mid['tasks']} | {mid['stage_s']} | {longest} | {mid['load1']:.1f} | "
                f"<= {target:.0f} s: {met}{bad} |"
            )
    text = "\n".join(lines)
    print(text)
    if args.markdown:
        args.markdown.write_text(text + "\n")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1, default=str))
    return 1 if any(r["mismatch"] for r in rows) else 0


CONNECT_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
#: The benchmark's Connect server: loopback, no UI, the engine's settings, Spark's other defaults.
CONNECT_BENCH_CONF = {
    "spark.connect.grpc.binding.address": "127.0.0.1",
    "spark.ui.enabled": "false",
    "spark.hadoop.fs.file.impl": "org.apache.hadoop.fs.RawLocalFileSystem",
    "spark.sql.session.timeZone": "UTC",
}


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# ---------------------------------------------------------------------------------------------------
# --large (issue 27): L replay, checkpoint and VACUUM dry run, spark-submit local[2] against the local engine

#: (name, action, table) of each large run: replay and checkpoint read the generated L log; VACUUM plans on
#: L itself (1.03M active files to protect, its 11,380 tombstoned files on disk) and on vacuum_bench.py's
#: 1,000,000-file table (every file on disk: 666,666 active, 333,334 planned).
LARGE_RUNS = {
    "snapshot": ("snapshot", "L"),
    "checkpoint": ("checkpoint", "L"),
    "vacuum-L": ("vacuum", "L"),
    "vacuum-1M": ("vacuum", "vacuum-1M"),
}
LARGE_ENGINES = ("spark", "local")

#: Untimed read-back of a written checkpoint: delta-rs and our local engine, from the checkpoint alone
#: (`_last_checkpoint` names it; the commits before it are gone from the copy's view of the segment).
READ_BACK = """
import json, sys
from deltalake import DeltaTable
from airflow_delta_provider.delta import DeltaLog
p = sys.argv[1]
dt = DeltaTable(p)
adds = dt.get_add_actions()
rs = [dt.version(), adds.num_rows, sum(x for x in adds.column("size_bytes").to_pylist() if x is not None)]
s = DeltaLog(p).update()
seg = s.log_segment
cp = seg.checkpoint.version if seg.checkpoint is not None else None
ours = [s.version, s.num_files, s.size_in_bytes]
hint = json.load(open(p + "/_delta_log/_last_checkpoint"))
print(json.dumps({"delta-rs": rs, "ours": ours, "checkpoint_version": cp, "commits_after": len(seg.commits),
                  "last_checkpoint": hint.get("version"), "parts": hint.get("parts")}))
"""


def _tree_rss_mib(root: int) -> float:
    """Resident memory (MiB) of `root` and its live descendants, summed (from /proc/<pid>/statm)."""
    page = os.sysconf("SC_PAGE_SIZE")
    total = 0
    for pid in _tree(_proc_table(), root):
        try:
            total += int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * page
        except (OSError, ValueError, IndexError):
            continue
    return total / 2**20


_ANY_STAGE = re.compile(
    r"(ResultStage|ShuffleMapStage) (\d+) \((.{0,300}?) at ([^\s()]+?):(\d+)\) finished in (\d+) ms"
)


def large_stages(log: str) -> list[list[Any]]:
    """[label, s, tasks, longest task s, sum of task s] of every finished stage, in order (what `stages_from_log`
    finds, plus stages named by a JVM closure such as `$anonfun$withThreadLocalCaptured$1`: Spark SQL's
    broadcast and shuffle jobs)."""
    task_ms: dict[str, list[int]] = {}
    for m in _TASK.finditer(log):
        task_ms.setdefault(m[1], []).append(int(m[2]))
    out = []
    for kind, sid, func, where, line, ms in _ANY_STAGE.findall(log):
        t = task_ms.get(sid, [])
        label = f"{kind} {sid} `{func}` at {Path(where).name}:{line}"
        out.append([label, int(ms) / 1000, len(t), max(t, default=0) / 1000, sum(t) / 1000])
    return out


def large_request(name: str, engine: str, table: str, manifest: dict[str, Any], partitions: int) -> Any:
    """The bundled job's request for one large run (`auto_threshold_mb=0`: Spark replays on the cluster)."""
    from airflow_delta_provider.commands.request import Request

    action = LARGE_RUNS[name][0]
    fields: dict[str, Any] = {}
    if action == "snapshot":
        fields["now_ms"] = manifest["now_ms"]
    if name == "vacuum-L":  # L's tombstoned files were touched when L was generated: retention 0 plans them all
        fields.update(retention_hours=0, enforce_retention_duration=False)
    return Request.make(
        table=table, action=action, engine=engine, snapshot_partitions=partitions, auto_threshold_mb=0, **fields
    )


def plan_paths(result: dict[str, Any]) -> set[str] | None:
    """A VACUUM dry run's planned paths: inline, else the JSON lines at `files_uri` (Spark's plan_dir)."""
    if result.get("files_inline", True) and result.get("files") is not None and not result.get("files_uri"):
        return {f["path"] for f in result["files"]}
    uri = result.get("files_uri")
    if not uri:
        return None
    root = Path(uri.removeprefix("file://"))
    out: set[str] = set()
    for part in sorted(root.glob("part-*")):
        with open(part) as fh:
            out.update(json.loads(line)["path"] for line in fh if line.strip())
    return out


def answer_of(name: str, result: dict[str, Any]) -> dict[str, Any]:
    """The answer two engines must agree on."""
    if result.get("status") != "success":
        return {"error": f"{result.get('error_class')}: {str(result.get('message'))[:300]}"}
    if name == "snapshot":
        return {k: result.get(k) for k in ("version", "num_files", "size_bytes", "num_tombstones")}
    if name == "checkpoint":
        return {k: result.get(k) for k in ("version", "num_add_files", "num_tombstones")}
    return {k: result.get(k) for k in ("version", "num_files", "bytes", "dry_run", "deleted")}


def large(args: argparse.Namespace) -> int:
    """spark-submit (local[2], cluster replay) and the local engine (the same bundled job in one Python process),
    interleaved, on L: replay, checkpoint (of a copy of the log) and VACUUM dry runs."""
    import shutil

    import vacuum_bench

    names = [n for n in args.large_actions.split(",") if n]
    unknown = [n for n in names if n not in LARGE_RUNS]
    if unknown:
        raise SystemExit(f"unknown --large-actions {unknown} (of {', '.join(LARGE_RUNS)})")
    command_line = " ".join(shlex.quote(a) for a in [".venv/bin/python", "bench/spark_bench.py", *args.argv])
    manifest = benchlib.ensure_table("L", args.data, generate=not args.no_generate)
    tables = {"L": benchlib.table_dir("L", args.data)}
    vacuum_manifest: dict[str, Any] = {}
    if "vacuum-1M" in names:
        tables["vacuum-1M"], vacuum_manifest = vacuum_bench.ensure_vacuum_table(1_000_000, args.data)
    machine = benchlib.machine_info()
    root, fingerprint = benchlib.snapshot_library()
    sys.path.insert(0, str(root))  # the job script and the --py-files zip come from the frozen copy
    from airflow_delta_provider.jobs import build_py_files_zip, job_script
    from airflow_delta_provider.jobs.runner import job_argv

    SPARK_DIR.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="large-", dir=SPARK_DIR))
    py_files = build_py_files_zip(work / "pyfiles")
    env = spark_env(root)
    nice = ["nice", "-n", str(args.nice)] if args.nice else []
    submit = [str(Path(env["SPARK_HOME"]) / "bin" / "spark-submit"), "--master", "local[2]", "--py-files", py_files]
    if args.driver_memory:
        submit += ["--driver-memory", args.driver_memory]
    submit += spark_conf_args()
    script = job_script()
    quiet = benchlib.quiet_setting(args)
    rows: list[dict[str, Any]] = []
    started = time.time()
    load_start = machine.pop("loadavg")
    for rep in range(args.large_reps):
        for name in names:
            engines = LARGE_ENGINES if (rep + names.index(name)) % 2 == 0 else LARGE_ENGINES[::-1]
            for engine in engines:
                action, source = LARGE_RUNS[name]
                table = tables[source]
                run_dir = work / f"{name}-{engine}-{rep}"
                run_dir.mkdir()
                if action == "checkpoint":  # never into bench/.data/L: a copy of its log (data files not needed)
                    (run_dir / "table").mkdir()
                    subprocess.run(["cp", "-rp", str(table / "_delta_log"), str(run_dir / "table")], check=True)
                    table = run_dir / "table"
                request = large_request(name, engine, str(table), manifest, args.large_partitions)
                out = run_dir / "result.json"
                job = [script, *job_argv(request, str(out))]
                argv = [*nice, *submit, *job] if engine == "spark" else [*nice, benchlib.python(), *job]
                busy = benchlib.wait_for_quiet(*quiet) if quiet else -1.0
                load1 = loadavg1()
                peak: list[float] = []
                wall, cpu, rss, code, stderr, others = timed_process(argv, env, run_dir, args.timeout, tree_rss=peak)
                load_end = loadavg1()
                (run_dir / "stderr.log").write_text(stderr)
                try:
                    result = json.loads(out.read_text())
                except (OSError, ValueError):
                    result = {"status": f"no result (exit {code})", "message": stderr[-2000:]}
                row: dict[str, Any] = {
                    "name": name,
                    "engine": engine,
                    "rep": rep,
                    "table": str(table),
                    "wall_s": round(wall, 2),
                    "cpu_s": round(cpu, 2),
                    "rss_mib": round(rss),
                    "tree_rss_mib": round(max(peak, default=0.0)),
                    "exit": code,
                    "load1": load1,
                    "load1_end": load_end,
                    "busy_before": round(busy, 2),
                    "others_cores": round(others / wall, 2) if wall else 0.0,
                    "job_s": result.get("duration_s"),
                    "timings": result.get("timings"),
                    "status": result.get("status"),
                    "result_engine": result.get("engine"),
                    "answer": answer_of(name, result),
                    "log": str(run_dir / "stderr.log"),
                }
                if engine == "spark":
                    row.update(job_breakdown(stderr))
                    row["stage_list"] = large_stages(stderr)
                if action == "vacuum" and result.get("status") == "success":
                    paths = plan_paths(result)
                    row["plan_paths"] = len(paths) if paths is not None else None
                    (run_dir / "plan-paths.json").write_text(json.dumps(sorted(paths or ())))
                if action == "checkpoint" and result.get("status") == "success":
                    proc = subprocess.run(
                        [benchlib.python(), "-c", READ_BACK, str(table)],
                        capture_output=True,
                        text=True,
                        cwd=run_dir,
                        env={**os.environ, "PYTHONPATH": str(root)},
                    )
                    row["read_back"] = (
                        json.loads(proc.stdout.strip().splitlines()[-1])
                        if proc.returncode == 0
                        else {"error": proc.stderr[-1000:]}
                    )
                    row["checkpoint_files"] = len(result.get("parts") or []) or 1
                    row["checkpoint_mib"] = round((result.get("size_in_bytes") or 0) / 2**20, 1)
                    shutil.rmtree(table)  # 166 MB of log per run
                rows.append(row)
                print(
                    f"  {name} {engine} #{rep}: {wall:.1f} s wall, {cpu:.1f} s CPU, RSS {rss:.0f}/"
                    f"{row['tree_rss_mib']} MiB, load {load1:.1f}->{load_end:.1f}, others {row['others_cores']} cores, "
                    f"{row['answer']}"
                    + (
                        f", {row.get('jobs')} jobs {row.get('stages')} stages {row.get('tasks')} tasks"
                        if engine == "spark"
                        else ""
                    ),
                    file=sys.stderr,
                    flush=True,
                )
    machine["library sources sha256"] = f"{fingerprint} (frozen copy in {root.relative_to(benchlib.REPO)})"
    machine["date (UTC)"] = datetime.now(UTC).strftime("%Y-%m-%d %H:%M")
    machine["command"] = f"`{command_line}`"
    machine["loadavg (start -> end)"] = f"{load_start} -> {benchlib.loadavg()}"
    machine["duration"] = f"{time.time() - started:.0f} s"
    info = {"manifest": {k: v for k, v in manifest.items() if k != "tombstone_paths"}, "vacuum": vacuum_manifest}
    return report_large(rows, machine, info, args, work)


def check_large(rows: list[dict[str, Any]], info: dict[str, Any]) -> dict[tuple[str, int], str]:
    """Per (run, rep): '' when both engines' answers agree (and match the generators' manifests), else why not."""
    m, vm = info["manifest"], info["vacuum"]
    out = {}
    for name, rep in dict.fromkeys((r["name"], r["rep"]) for r in rows):
        pair = {r["engine"]: r for r in rows if r["name"] == name and r["rep"] == rep}
        problems = [f"{e}: {r['answer']['error']}" for e, r in pair.items() if "error" in r["answer"]]
        problems += [f"{e} ran on {r['result_engine']}" for e, r in pair.items() if r.get("result_engine") != e]
        if len(pair) == 2 and pair["spark"]["answer"] != pair["local"]["answer"]:
            problems.append(f"spark {pair['spark']['answer']} != local {pair['local']['answer']}")
        for e, r in pair.items():
            a = r["answer"]
            if "error" in a:
                continue
            if name == "snapshot" and [a["version"], a["num_files"], a["size_bytes"]] != [
                m["version"],
                m["num_files"],
                m["size_in_bytes"],
            ]:
                problems.append(f"{e}: snapshot differs from the manifest")
            if name == "checkpoint":
                back = r.get("read_back") or {}
                want = [m["version"], m["num_files"], m["size_in_bytes"]]
                if a["num_add_files"] != m["num_files"]:
                    problems.append(f"{e}: {a['num_add_files']} adds written, manifest {m['num_files']}")
                if back.get("delta-rs") != want or back.get("ours") != want:
                    problems.append(f"{e}: read back {back} != manifest {want}")
                elif [back.get("checkpoint_version"), back.get("last_checkpoint"), back.get("commits_after")] != [
                    m["version"],
                    m["version"],
                    0,
                ]:
                    problems.append(f"{e}: the readers did not use the new checkpoint ({back})")
            if name == "vacuum-1M" and vm and a["num_files"] != vm["tombstoned"] + vm["strays"]:
                problems.append(f"{e}: planned {a['num_files']}, expected {vm['tombstoned'] + vm['strays']}")
            if name == "vacuum-L" and a["num_files"] != m["tombstones_total"]:
                problems.append(f"{e}: planned {a['num_files']}, expected {m['tombstones_total']}")
        if name.startswith("vacuum") and len(pair) == 2:
            sets = [
                json.loads((Path(r["log"]).parent / "plan-paths.json").read_text()) if r.get("plan_paths") else None
                for r in pair.values()
            ]
            if sets[0] is not None and sets[0] != sets[1]:
                problems.append("the planned paths differ")
        out[(name, rep)] = "; ".join(problems)
    return out


def report_large(
    rows: list[dict[str, Any]], machine: dict[str, str], info: dict[str, Any], args: argparse.Namespace, work: Path
) -> int:
    """The large table (one row per run), the Spark stages of each Spark run, printed and written where asked."""
    checks = check_large(rows, info)
    m, vm = info["manifest"], info["vacuum"]
    parts = ["### Machine and run\n", table(["", ""], [[k, str(v)] for k, v in machine.items()])]
    parts.append(
        f"\nL: {m['num_files']:,} active files, version {m['version']}, checkpoint at {m['checkpoint_version']} "
        f"({m['checkpoint_rows']:,} rows) + {m['commits_after_checkpoint']:,} commits, "
        f"{m['log_bytes'] / 2**20:.0f} MiB of log; {m['tombstones_total']:,} tombstoned files on disk "
        "(its only data files)."
        + (
            f" vacuum-1M: vacuum_bench.py's table, {vm['files']:,} files on disk ({vm['active']:,} active, "
            f"{vm['tombstoned']:,} tombstoned, {vm['strays']:,} strays), {vm['partitions']} partitions."
            if vm
            else ""
        )
    )
    parts.append(
        "\nEach run is a fresh process: `spark-submit --master local[2]` of the bundled job (`engine=spark`, "
        "`auto_threshold_mb=0`: the state is replayed on the cluster) or the same job script run by Python "
        f"(`engine=local`); both under `nice -n {args.nice}`, the two engines interleaved (the order alternates). "
        "Checkpoints are written to a `cp -rp` copy of L's `_delta_log` (removed after the read-back); VACUUMs are "
        "dry runs (`vacuum-L` with retention 0, unenforced: L's tombstoned files were touched at generation; "
        "`vacuum-1M` with the table's 7 days). CPU is the process tree's (`os.wait4` plus PySpark workers polled "
        "from /proc); RSS: the largest process (`wait4`) / the tree's sum (sampled every 0.25 s). "
        'load1 is /proc/loadavg\'s 1-minute figure at the start and the end of the run; "others" is the other '
        "processes' CPU during the run (cores). Spark jobs, stages and tasks are from the driver's INFO log."
    )
    header = [
        "run",
        "engine",
        "wall s",
        "job s",
        "CPU s",
        "RSS MiB (largest / tree)",
        "load1 start->end",
        "others cores",
        "Spark jobs / stages / tasks",
        "stage s",
        "longest stages (s / tasks)",
        "answer",
        "engines agree",
    ]
    body = []
    for r in rows:
        a = r["answer"]
        if "error" in a:
            ans = a["error"][:120]
        elif r["name"] == "snapshot":
            ans = f"v{a['version']}, {a['num_files']:,} files, {a['size_bytes']:,} B"
        elif r["name"] == "checkpoint":
            back = r.get("read_back") or {}
            ans = (
                f"v{a['version']}, {a['num_add_files']:,} adds, {r.get('checkpoint_files')} file(s), "
                f"{r.get('checkpoint_mib')} MiB; read back from it alone: delta-rs "
                f"{_count(back.get('delta-rs'))} files, ours {_count(back.get('ours'))}"
            )
        else:
            ans = f"{a['num_files']:,} files, {a['bytes']:,} B planned"
        spark = r["engine"] == "spark"
        longest = "; ".join(f"{k[0]}{i} {sec:.1f}/{n}" for k, i, sec, n in r.get("longest_stages", []))
        body.append(
            [
                f"{r['name']} #{r['rep']}" if args.large_reps > 1 else r["name"],
                r["engine"],
                f"{r['wall_s']:.1f}",
                fmt(r["job_s"] if isinstance(r["job_s"], int | float) else float("nan"), 1),
                f"{r['cpu_s']:.1f}",
                f"{r['rss_mib']:,} / {r['tree_rss_mib']:,}",
                f"{r['load1']:.1f}->{r['load1_end']:.1f}",
                f"{r['others_cores']:.2f}",
                f"{r['jobs']} / {r['stages']} / {r['tasks']}" if spark else "-",
                f"{r['stage_s']:.1f}" if spark else "-",
                longest if spark else "-",
                ans,
                "yes" if not checks[(r["name"], r["rep"])] else "**NO**: " + checks[(r["name"], r["rep"])][:200],
            ]
        )
    parts.append("\n### L on Spark (local[2], cluster replay) vs the local engine\n")
    parts.append(table(header, body))
    parts.append("\nSpark/local ratios (same rep): " + "; ".join(ratio_lines(rows)) + ".")
    for r in rows:
        if r["engine"] != "spark":
            continue
        if Path(r["log"]).exists():  # re-rendered: parse the log again (newer parsers find more)
            r["stage_list"] = large_stages(Path(r["log"]).read_text(errors="replace"))
        if not r.get("stage_list"):
            continue
        parts.append(
            f"\n#### Spark stages: {r['name']} #{r['rep']} (seconds; tasks, longest task s, task s / stage s)\n"
        )
        parts.append(
            table(
                ["stage", "s", "tasks", "longest task s", "cores busy"],
                [
                    [label, fmt(sec), str(n), fmt(longest), fmt(total / sec if sec else float("nan"), 1)]
                    for label, sec, n, longest, total in r["stage_list"]
                ],
            )
        )
    parts.append(f"\nLogs and results: `{work.relative_to(benchlib.REPO)}`.")
    text = "\n".join(parts) + "\n"
    print(text)
    if args.markdown:
        args.markdown.write_text(text)
    if args.json:
        args.json.write_text(json.dumps({"machine": machine, "info": info, "rows": rows}, indent=1, default=str))
    return 1 if any(checks.values()) else 0


def _count(answer: list[Any] | None) -> str:
    """The file count of a [version, files, bytes] answer."""
    return f"{answer[1]:,}" if answer else "?"


def ratio_lines(rows: list[dict[str, Any]]) -> list[str]:
    out = []
    for name, rep in dict.fromkeys((r["name"], r["rep"]) for r in rows):
        pair = {r["engine"]: r for r in rows if r["name"] == name and r["rep"] == rep}
        if len(pair) == 2:
            s, lo = pair["spark"], pair["local"]
            out.append(
                f"{name}: wall {s['wall_s'] / lo['wall_s']:.1f}x, CPU {s['cpu_s'] / lo['cpu_s']:.1f}x, "
                f"tree RSS {s['tree_rss_mib'] / max(lo['tree_rss_mib'], 1):.1f}x"
            )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scales", default="S,M,L", help="comma-separated, of S,M,L (default all)")
    parser.add_argument("--reps", type=int, default=1, help="rounds of whole-job spark-submits (default 1)")
    parser.add_argument("--partitions", default="8,50", help="--snapshot-partitions values for the snapshot job")
    parser.add_argument(
        "--tombstone-partitions", type=int, default=None, help="for the tombstones job (default: first)"
    )
    parser.add_argument("--warm-runs", type=int, default=3, help="warm query runs per scale; the first is cold")
    parser.add_argument("--warm-partitions", type=int, default=None, help="snapshot partitions (default: first)")
    parser.add_argument("--baseline-reps", type=int, default=3, help="rounds of the fresh-process baselines")
    parser.add_argument("--driver-memory", help="spark-submit --driver-memory (default: Spark's, 1g)")
    parser.add_argument("--skip-jobs", action="store_true")
    parser.add_argument("--skip-warm", action="store_true")
    parser.add_argument("--skip-baselines", action="store_true")
    parser.add_argument("--timeout", type=float, default=900, help="seconds per spark-submit")
    benchlib.add_quiet_options(parser, max_wait=60.0)
    parser.add_argument(
        "--max-others",
        type=float,
        default=0.3,
        help="redo a timed Spark run when other processes used more than this many cores during it (default 0.3)",
    )
    parser.add_argument("--retries", type=int, default=2, help="redos per run at most (default 2)")
    parser.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    parser.add_argument("--data", type=Path, default=benchlib.DATA)
    parser.add_argument("--report-from", type=Path, help="only re-render the report of a --json file")
    parser.add_argument("--markdown", type=Path, help="also write the report here")
    parser.add_argument("--json", type=Path, help="write raw samples here")
    parser.add_argument(
        "--fixed-cost",
        action="store_true",
        help="only the fixed costs: a tiny table's VACUUM and OPTIMIZE by spark-submit and on a warm Connect server",
    )
    parser.add_argument("--fixed-reps", type=int, default=3, help="timed runs of each (default 3)")
    parser.add_argument("--fixed-modes", default="submit,connect", help="of submit,connect (default both)")
    parser.add_argument("--fixed-partitions", type=int, default=50, help="snapshot partitions (default 50)")
    parser.add_argument(
        "--fixed-conf",
        action="append",
        default=[],
        help="a variant NAME:key=value,... (Spark conf on the submit and the Connect session; snapshot_partitions=N "
        "the request's); repeatable",
    )
    parser.add_argument(
        "--large",
        action="store_true",
        help="only L: replay, checkpoint (of a copy) and VACUUM dry runs, spark-submit local[2] vs the local engine",
    )
    parser.add_argument(
        "--large-actions",
        default=",".join(LARGE_RUNS),
        help=f"of {','.join(LARGE_RUNS)} (default all)",
    )
    parser.add_argument("--large-reps", type=int, default=1, help="rounds of the large runs (default 1)")
    parser.add_argument("--large-partitions", type=int, default=50, help="snapshot partitions (default 50)")
    parser.add_argument("--nice", type=int, default=10, help="niceness of the large runs (default 10; 0: none)")
    args = parser.parse_args(argv)
    args.argv = list(argv if argv is not None else sys.argv[1:])
    if args.large and args.report_from:
        saved = json.loads(args.report_from.read_text())
        args.large_reps = max(r["rep"] for r in saved["rows"]) + 1
        return report_large(
            saved["rows"], saved["machine"], saved["info"], args, Path(saved["rows"][0]["log"]).parents[1]
        )
    if args.large:
        args.data = args.data.resolve()
        return large(args)
    args.fixed_variants = [("", {}, args.fixed_partitions)]
    for spec in args.fixed_conf:  # snapshot_partitions=N is the request's, the rest Spark conf
        name, _, pairs = spec.partition(":")
        conf = dict(p.split("=", 1) for p in pairs.split(",") if p)
        parts = int(conf.pop("snapshot_partitions", args.fixed_partitions))
        args.fixed_variants.append((f" ({name})", conf, parts))
    if args.fixed_cost:
        SPARK_DIR.mkdir(parents=True, exist_ok=True)
        return fixed_cost(args)
    command_line = " ".join(
        shlex.quote(a) for a in [".venv/bin/python", "bench/spark_bench.py", *(argv or sys.argv[1:])]
    )
    args.data = args.data.resolve()
    args.scales = [s for s in args.scales.split(",") if s]
    args.partitions = [int(x) for x in args.partitions.split(",") if x]
    args.tombstone_partitions = args.tombstone_partitions or args.partitions[0]
    args.warm_partitions = args.warm_partitions or args.partitions[0]
    quiet = benchlib.quiet_setting(args)
    if args.report_from:
        return rerender(args)

    manifests = {s: benchlib.ensure_table(s, args.data, generate=not args.no_generate) for s in args.scales}
    actions = {s: count_actions(s, manifests[s], args.data) for s in args.scales}
    machine = benchlib.machine_info()
    start_print = machine["library sources sha256"]
    root, fingerprint = benchlib.snapshot_library()
    benchrun.CHILD["cwd"] = str(root)
    benchrun.CHILD["env"] = {**os.environ, "PYTHONPATH": str(root)}
    sys.path.insert(0, str(root))  # job_script() and the --py-files zip come from the frozen copy
    from airflow_delta_provider.jobs import build_py_files_zip

    SPARK_DIR.mkdir(parents=True, exist_ok=True)
    py_files = build_py_files_zip(SPARK_DIR / "pyfiles")
    import pyspark

    java = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr.splitlines()
    machine["library sources sha256"] = f"{fingerprint} (frozen copy in {root.relative_to(benchlib.REPO)})"
    machine["pyspark"] = pyspark.__version__
    machine["java"] = java[0] if java else "?"
    machine["date (UTC)"] = datetime.now(UTC).strftime("%Y-%m-%d %H:%M")
    machine["command"] = f"`{command_line}`"
    load_start = machine.pop("loadavg")
    started = time.time()

    expected = expected_answers(args.scales, manifests, args)
    for s in args.scales:  # the local engine must agree with the generator before anything is timed
        e, m = expected[s], manifests[s]
        if [e["version"], e["num_files"], e["size_in_bytes"], e["tombstones"]["retained"]] != [
            m["version"],
            m["num_files"],
            m["size_in_bytes"],
            m["tombstones_unexpired"],
        ]:
            raise SystemExit(f"{s}: the local engine disagrees with the manifest")
    baselines = None if args.skip_baselines else bench_baselines(args.scales, manifests, args, quiet)
    jobs = None if args.skip_jobs else bench_jobs(args.scales, manifests, expected, args, root, py_files, quiet)
    warm = None if args.skip_warm else bench_warm(args.scales, manifests, args, root, quiet)

    machine["loadavg (start -> end)"] = f"{load_start} -> {benchlib.loadavg()}"
    loads = [s.load1 for c in jobs or [] for s in c.samples]
    if warm:
        loads += [r["load1"] for runs in warm["scales"].values() for r in runs]
    busy = [s.busy for c in jobs or [] for s in c.samples if s.busy >= 0]
    if loads:
        machine["load1 before timed Spark runs (median, max; includes this benchmark's previous process)"] = (
            f"{statistics.median(loads):.2f}, {max(loads):.2f}"
        )
    if busy:
        machine["other CPU use before Spark runs (median)"] = f"{statistics.median(busy):.0%}"
    others = [s.others for c in jobs or [] for s in c.samples if s.others >= 0]
    if warm:
        others += [r["others"] for runs in warm["scales"].values() for r in runs if "others" in r]
    if others:
        machine["other processes during timed Spark runs (cores: median, max)"] = (
            f"{statistics.median(others):.2f}, {max(others):.2f}"
        )
    end_print = benchlib.library_fingerprint()
    if end_print != start_print:
        machine["library sources sha256"] += f"; the working tree changed to {end_print} during the run"
    machine["duration"] = f"{time.time() - started:.0f} s"

    text, targets, ok = report(args, machine, manifests, actions, expected, baselines, jobs, warm)
    print(text)
    if args.markdown:
        args.markdown.write_text(text)
    if args.json:
        raw: dict[str, Any] = {
            "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
            "machine": machine,
            "actions": actions,
            "expected": expected,
            "manifests": {k: {x: y for x, y in v.items() if x != "tombstone_paths"} for k, v in manifests.items()},
            "jobs": {c.key: [asdict(s) for s in c.samples] for c in jobs or []},
            "warm": warm,
            "baselines": {"/".join(k): [asdict(s) for s in v.samples] for k, v in (baselines or {}).items()},
            "targets": targets,
        }
        args.json.write_text(json.dumps(raw, indent=1, default=str))
    missed = [t for t in targets if t[2] != "met"]
    return 1 if not ok or (missed and args.strict) else 0


if __name__ == "__main__":
    sys.exit(main())
