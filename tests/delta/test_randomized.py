"""Randomized differential tests: tables written by delta-rs, read back by our `DeltaLog`.

For a handful of fixed seeds, `random.Random(seed)` drives a sequence of delta-rs operations on a
fresh table (appends, partitioned appends, overwrites, predicate overwrites, deletes, merges,
updates, checkpoints, compaction, vacuum, table property changes, schema changes and app
transactions). Then, for EVERY version of the table:

* our active file set (path -> size), `num_files` and `size_in_bytes` equal delta-rs's
  `DeltaTable(p, version=v).get_add_actions()`;
* protocol, metadata id, partition columns and configuration equal delta-rs's;
* tombstones (`include_expired=True`), their deletion timestamps and sizes, and app transactions
  equal a naive reconciliation of the raw log files (`deltars_oracle.raw_log_state`: newest classic
  checkpoint <= v read with pyarrow, then the JSON commits after it).

Right after every operation, a fresh load of the latest version is also checked against both oracles
(this covers versions that log cleanup deletes later). A second test keeps one `DeltaLog` alive and
calls `update()` after every operation: each incremental snapshot must equal a fresh full load of the
same version. A third applies random damage (torn commits, deleted commits, corrupt, deleted or
zero-byte checkpoints, bad `_last_checkpoint`) to copies of each table: every version must load to the
right state or raise a `DeltaError` naming the table, never a raw exception or a wrong state, and
must load whenever intact files make it.

Scenarios (table-level choices) are fixed; the seed drives everything else, so a failure reproduces.
"""

from __future__ import annotations

import random
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

deltalake = pytest.importorskip("deltalake")
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake  # noqa: E402

from airflow_delta_provider.delta import DeltaError, DeltaLog, Snapshot, VersionNotFoundError  # noqa: E402

try:
    from support.deltars_oracle import RawLogState, deltars_files, deltars_view, raw_log_state, recreatable
except ImportError:  # tests/ imported as a package
    from support.deltars_oracle import RawLogState, deltars_files, deltars_view, raw_log_state, recreatable

NUM_OPS = 30


@dataclass(frozen=True)
class Scenario:
    """Table-level choices; the seed drives everything else."""

    seed: int
    partitioned: bool = True
    cdf: bool = False  # delta.enableChangeDataFeed: deletes/updates/merges also write `cdc` actions
    zero_retention: bool = False  # delta.deletedFileRetentionDuration = 0: checkpoints drop tombstones
    checkpoint_interval: int | None = None  # delta-rs post-commit hook writes checkpoints by itself
    log_cleanup: bool = False  # delta.logRetentionDuration = 0: old commits and checkpoints get deleted


SCENARIOS = [
    Scenario(3),
    Scenario(11, partitioned=False),
    Scenario(29, cdf=True),
    Scenario(101, zero_retention=True, checkpoint_interval=4),
    Scenario(2024, partitioned=False, cdf=True, zero_retention=True),
    Scenario(7, checkpoint_interval=5, log_cleanup=True),
]

#: Partition values with characters that must be URI-escaped in the log, and a null.
PART_VALUES = ["a", "b", "a b", "x%y", "ü", "c=d", "e/f", "a+b", None]


def _sql_literal(value: str | None) -> str:
    return "IS NULL" if value is None else "= '" + value.replace("'", "''") + "'"


@dataclass
class OpRecord:
    index: int
    op: str
    version: int
    detail: str = ""


@dataclass
class Incremental:
    """Snapshots taken by one long-lived DeltaLog calling update() after every operation."""

    snapshots: list[Snapshot] = field(default_factory=list)
    error: BaseException | None = None


@dataclass
class LatestCheck:
    """Right after one operation: a fresh load of the latest version and both oracles' view of it."""

    version: int
    ours: Snapshot | None
    error: BaseException | None
    deltars_files: dict[str, int]
    raw: RawLogState


@dataclass
class RandomTable:
    """One table driven by `random.Random(seed)` through delta-rs operations."""

    path: Path
    scenario: Scenario
    rng: random.Random = field(init=False)
    partition_by: list[str] | None = None
    extra_columns: list[str] = field(default_factory=list)
    configuration: dict[str, str] = field(default_factory=dict)
    next_id: int = 0
    ops: list[OpRecord] = field(default_factory=list)
    short_retention: bool = False

    def __post_init__(self) -> None:
        sc = self.scenario
        self.rng = random.Random(sc.seed)
        self.partition_by = ["part"] if sc.partitioned else None
        if sc.cdf:
            self.configuration["delta.enableChangeDataFeed"] = "true"
        if sc.zero_retention:
            # Checkpoints then drop every tombstone: the raw-log oracle must start from the checkpoint.
            self.configuration["delta.deletedFileRetentionDuration"] = "interval 0 seconds"
            self.short_retention = True
        if sc.checkpoint_interval is not None:
            self.configuration["delta.checkpointInterval"] = str(sc.checkpoint_interval)
        if sc.log_cleanup:
            self.configuration["delta.logRetentionDuration"] = "interval 0 seconds"

    @property
    def seed(self) -> int:
        return self.scenario.seed

    # -- data -------------------------------------------------------------------------------------
    def rows(self, n: int, part: str | bool | None = False) -> pa.Table:
        rng = self.rng
        ids = list(range(self.next_id, self.next_id + n))
        self.next_id += n
        parts = [part if part is not False else rng.choice(PART_VALUES) for _ in ids]
        cols: dict[str, pa.Array] = {
            "id": pa.array(ids, pa.int64()),
            "part": pa.array(parts, pa.string()),
            "v": pa.array([rng.uniform(-100, 100) for _ in ids], pa.float64()),
        }
        for name in self.extra_columns:
            cols[name] = pa.array([f"{name}-{i}" for i in ids], pa.string())
        return pa.table(cols)

    def existing_id(self) -> int:
        return self.rng.randrange(max(self.next_id, 1))

    def version(self) -> int:
        return DeltaTable(str(self.path)).version()

    def txn_properties(self) -> tuple[CommitProperties, str]:
        rng = self.rng
        txns = []
        for app in rng.sample(["app-a", "app-b", "app-c"], rng.randint(1, 2)):
            last_updated = rng.choice([None, 1_700_000_000_000 + rng.randrange(10**9)])
            txns.append(Transaction(app, rng.randrange(0, 50), last_updated))
        detail = ",".join(f"{t.app_id}={t.version}" for t in txns)
        return CommitProperties(app_transactions=txns), detail

    # -- operations -------------------------------------------------------------------------------
    def create(self) -> None:
        write_deltalake(
            str(self.path),
            self.rows(self.rng.randint(3, 8)),
            partition_by=self.partition_by,
            mode="append",
            configuration=self.configuration or None,
        )
        self.ops.append(OpRecord(0, "create", self.version(), f"partition_by={self.partition_by}"))

    def choose(self) -> str:
        weights = {
            "append": 4,
            "append_txn": 2,
            "overwrite": 1,
            "predicate_overwrite": 1,
            "delete_id": 2,
            "delete_range": 1,
            "delete_partition": 1,
            "merge": 2,
            "update": 2,
            "checkpoint": 2,
            "compact": 1,
            "vacuum": 1,
            "set_properties": 0.6,
            "add_column": 0.5,
            "repartition": 0.5,
            "cleanup_metadata": 1 if self.scenario.log_cleanup else 0,
        }
        names = list(weights)
        return self.rng.choices(names, weights=[weights[n] for n in names])[0]

    def run(self, op: str) -> str:
        rng, p = self.rng, str(self.path)
        if op == "append":
            write_deltalake(p, self.rows(rng.randint(1, 6)), partition_by=self.partition_by, mode="append")
            return ""
        if op == "append_txn":
            props, detail = self.txn_properties()
            write_deltalake(
                p,
                self.rows(rng.randint(1, 4)),
                partition_by=self.partition_by,
                mode="append",
                commit_properties=props,
            )
            return detail
        if op == "overwrite":
            write_deltalake(p, self.rows(rng.randint(1, 5)), partition_by=self.partition_by, mode="overwrite")
            return ""
        if op == "predicate_overwrite":
            part = rng.choice(PART_VALUES[:-1])
            predicate = f"part {_sql_literal(part)}"
            write_deltalake(
                p,
                self.rows(rng.randint(1, 3), part=part),
                partition_by=self.partition_by,
                mode="overwrite",
                predicate=predicate,
            )
            return predicate
        if op == "delete_id":
            predicate = f"id = {self.existing_id()}"
            DeltaTable(p).delete(predicate)
            return predicate
        if op == "delete_range":
            predicate = f"id {rng.choice(['<', '>'])} {self.existing_id()} AND v > {rng.uniform(-100, 100):.3f}"
            DeltaTable(p).delete(predicate)
            return predicate
        if op == "delete_partition":
            predicate = f"part {_sql_literal(rng.choice(PART_VALUES))}"
            DeltaTable(p).delete(predicate)
            return predicate
        if op == "merge":
            n_old = rng.randint(1, 3)
            old_ids = sorted({self.existing_id() for _ in range(n_old)})
            new = self.rows(rng.randint(0, 2))
            old = pa.table(
                {
                    "id": pa.array(old_ids, pa.int64()),
                    "part": pa.array([rng.choice(PART_VALUES) for _ in old_ids], pa.string()),
                    "v": pa.array([rng.uniform(-100, 100) for _ in old_ids], pa.float64()),
                    **{c: pa.array([f"{c}-m" for _ in old_ids], pa.string()) for c in self.extra_columns},
                }
            )
            source = pa.concat_tables([old, new.cast(old.schema)])
            kind = rng.choice(["update_insert", "delete", "update"])
            merger = DeltaTable(p).merge(source, "t.id = s.id", source_alias="s", target_alias="t")
            if kind == "update_insert":
                merger = merger.when_matched_update({"v": "s.v"}).when_not_matched_insert_all()
            elif kind == "delete":
                merger = merger.when_matched_delete()
            else:
                merger = merger.when_matched_update({"v": "s.v + 1"})
            merger.execute()
            return f"{kind} ids={old_ids}+{new.num_rows} new"
        if op == "update":
            predicate = rng.choice([f"id = {self.existing_id()}", f"id % {rng.randint(2, 4)} = 0", "v < 0"])
            DeltaTable(p).update(updates={"v": "v * 2"}, predicate=predicate)
            return predicate
        if op == "checkpoint":
            DeltaTable(p).create_checkpoint()
            return ""
        if op == "compact":
            DeltaTable(p).optimize.compact()
            return ""
        if op == "vacuum":
            removed = DeltaTable(p).vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
            return f"{len(removed)} files"
        if op == "set_properties":
            props = {"delta.checkpointInterval": str(rng.randint(3, 12))}
            if not self.scenario.log_cleanup:
                props["delta.logRetentionDuration"] = f"interval {rng.randint(2, 60)} days"
            DeltaTable(p).alter.set_table_properties(props)
            return str(props)
        if op == "cleanup_metadata":
            DeltaTable(p).cleanup_metadata()
            return ""
        if op == "add_column":
            name = f"extra{len(self.extra_columns)}"
            self.extra_columns.append(name)
            write_deltalake(
                p, self.rows(rng.randint(1, 3)), partition_by=self.partition_by, mode="append", schema_mode="merge"
            )
            return name
        if op == "repartition":
            self.partition_by = None if self.partition_by else ["part"]
            write_deltalake(
                p,
                self.rows(rng.randint(1, 4)),
                partition_by=self.partition_by,
                mode="overwrite",
                schema_mode="overwrite",
            )
            return f"partition_by={self.partition_by}"
        raise AssertionError(op)

    def build(self, after_each: Any = None) -> None:
        self.create()
        if after_each is not None:
            after_each()
        for i in range(1, NUM_OPS + 1):
            op = self.choose()
            detail = self.run(op)
            self.ops.append(OpRecord(i, op, self.version(), detail))
            if after_each is not None:
                after_each()

    def describe(self) -> str:
        lines = [f"seed={self.seed} config={self.configuration}"]
        lines += [f"  #{r.index} {r.op} -> v{r.version} {r.detail}" for r in self.ops]
        return "\n".join(lines)


@dataclass
class Built:
    table: RandomTable
    incremental: Incremental
    latest: int
    latest_checks: list[LatestCheck]


def _scenario_id(sc: Scenario) -> str:
    flags = [k for k in ("cdf", "zero_retention", "log_cleanup") if getattr(sc, k)]
    flags.insert(0, "partitioned" if sc.partitioned else "flat")
    if sc.checkpoint_interval:
        flags.append(f"cpi{sc.checkpoint_interval}")
    return f"seed{sc.seed}-" + "-".join(flags)


@pytest.fixture(scope="module", params=SCENARIOS, ids=[_scenario_id(s) for s in SCENARIOS])
def built(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Built:
    scenario: Scenario = request.param
    path = tmp_path_factory.mktemp(f"rand{scenario.seed}") / "table"
    table = RandomTable(path, scenario)
    inc = Incremental()
    holder: dict[str, DeltaLog] = {}

    checks: list[LatestCheck] = []

    def after_each() -> None:
        version = table.version()
        ours, error = None, None
        try:
            ours = DeltaLog(str(path)).update()
        except Exception as exc:  # reported by the test, not as a fixture error
            error = exc
        checks.append(LatestCheck(version, ours, error, deltars_files(path), raw_log_state(path, version)))
        if inc.error is not None:
            return
        try:
            if "log" not in holder:
                holder["log"] = DeltaLog(str(path))  # not the cache: this instance is ours alone
            inc.snapshots.append(holder["log"].update())
        except Exception as exc:
            inc.error = exc

    table.build(after_each)
    return Built(table, inc, table.version(), checks)


def fresh_log(path: Path) -> DeltaLog:
    DeltaLog.invalidate_cache(str(path))
    return DeltaLog.for_table(str(path))


def files_of(snap: Snapshot) -> dict[str, int]:
    out: dict[str, int] = {}
    for f in snap.all_files():
        assert f.path not in out, f"path {f.path} active twice"
        out[f.path] = f.size
    return out


def tombstones_of(snap: Snapshot) -> dict[str, tuple[int | None, int | None]]:
    out: dict[str, tuple[int | None, int | None]] = {}
    for t in snap.tombstones(include_expired=True):
        assert t.path not in out, f"tombstone {t.path} listed twice"
        out[t.path] = (t.deletion_timestamp, t.size)
    return out


def _features(value: Any) -> tuple[str, ...] | None:
    return None if value is None else tuple(sorted(value))


# -- A.1: every version against delta-rs and the raw log --------------------------------------------
def test_every_version_matches_deltars_and_raw_log(built: Built) -> None:
    table = built.table
    p = table.path
    log = fresh_log(p)
    assert log.latest_version() == built.latest, table.describe()
    assert built.latest >= NUM_OPS // 2, table.describe()  # most operations committed
    mismatches: list[str] = []
    checked = 0
    for v in range(built.latest + 1):
        if not recreatable(p, v):
            # log cleanup deleted what makes v: a typed error naming the table and the version
            with pytest.raises(VersionNotFoundError) as info:
                log.snapshot_at(version=v)
            assert info.value.version == v and str(p) in str(info.value), str(info.value)
            assert f"version={v}" in str(info.value)
            continue
        checked += 1
        snap = log.snapshot_at(version=v)
        rs = deltars_view(p, v)
        raw = raw_log_state(p, v)
        ours = files_of(snap)
        ctx = f"version {v}"
        assert snap.version == v
        # the oracles agree with each other (guards the test itself)
        assert raw.active == rs.files, f"{ctx}: raw log vs delta-rs disagree\n{table.describe()}"
        if ours != rs.files:
            only_ours = sorted(set(ours) - set(rs.files))
            only_rs = sorted(set(rs.files) - set(ours))
            sizes = sorted(k for k in set(ours) & set(rs.files) if ours[k] != rs.files[k])
            mismatches.append(f"{ctx}: files only ours={only_ours} only delta-rs={only_rs} size diff={sizes}")
        if snap.num_files != len(rs.files) or snap.size_in_bytes != sum(rs.files.values()):
            mismatches.append(
                f"{ctx}: num_files/size_in_bytes {snap.num_files}/{snap.size_in_bytes} != "
                f"{len(rs.files)}/{sum(rs.files.values())}"
            )
        proto = snap.protocol
        if (proto.min_reader_version, proto.min_writer_version) != (rs.min_reader_version, rs.min_writer_version):
            mismatches.append(f"{ctx}: protocol {proto} vs delta-rs {rs}")
        if (
            _features(proto.reader_features) != rs.reader_features
            or _features(proto.writer_features) != rs.writer_features
        ):
            mismatches.append(f"{ctx}: features {proto} vs delta-rs {rs}")
        meta = snap.metadata
        if meta.id != rs.metadata_id or tuple(meta.partition_columns) != rs.partition_columns:
            mismatches.append(f"{ctx}: metadata {meta.id} {meta.partition_columns} vs {rs}")
        if dict(meta.configuration) != rs.configuration:
            mismatches.append(f"{ctx}: configuration {dict(meta.configuration)} vs {rs.configuration}")
        # tombstones against the raw log
        expected_tombs = {path: (rm.get("deletionTimestamp"), rm.get("size")) for path, rm in raw.tombstones.items()}
        got_tombs = tombstones_of(snap)
        if got_tombs != expected_tombs:
            diff = {
                k: (got_tombs.get(k), expected_tombs.get(k))
                for k in set(got_tombs) | set(expected_tombs)
                if got_tombs.get(k) != expected_tombs.get(k)
            }
            mismatches.append(f"{ctx}: tombstones (ours, raw) differ: {diff}")
        # the checkpoint chosen is the newest one at or before v
        if snap.log_segment.checkpoint_version != raw.checkpoint_version:
            mismatches.append(
                f"{ctx}: checkpoint {snap.log_segment.checkpoint_version} used, newest is {raw.checkpoint_version}"
            )
        # app transactions against the raw log and delta-rs
        got_txns = {k: (t.version, t.last_updated) for k, t in snap.set_transactions.items()}
        expected_txns = {k: (t["version"], t.get("lastUpdated")) for k, t in raw.txns.items()}
        if got_txns != expected_txns:
            mismatches.append(f"{ctx}: txns {got_txns} vs raw {expected_txns}")
        dt = DeltaTable(str(p), version=v)
        for app in ("app-a", "app-b", "app-c"):
            if snap.transaction_version(app) != dt.transaction_version(app):
                mismatches.append(
                    f"{ctx}: transaction_version({app}) {snap.transaction_version(app)} vs "
                    f"delta-rs {dt.transaction_version(app)}"
                )
    assert checked >= (1 if table.scenario.log_cleanup else 5), table.describe()
    assert not mismatches, "\n".join(mismatches) + "\n" + table.describe()


def test_latest_after_each_operation(built: Built) -> None:
    """Right after every operation, a fresh load of the latest version matched both oracles (this is
    what checks versions that log cleanup later deletes)."""
    table = built.table
    mismatches = []
    for rec, check in zip(table.ops, built.latest_checks, strict=True):
        ctx = f"after #{rec.index} {rec.op} (v{check.version})"
        if check.error is not None:
            mismatches.append(f"{ctx}: {type(check.error).__name__}: {check.error}")
            continue
        assert check.ours is not None
        if check.ours.version != check.version:
            mismatches.append(f"{ctx}: loaded version {check.ours.version}")
        if files_of(check.ours) != check.deltars_files:
            mismatches.append(f"{ctx}: files {sorted(files_of(check.ours))} != {sorted(check.deltars_files)}")
        expected = {k: (r.get("deletionTimestamp"), r.get("size")) for k, r in check.raw.tombstones.items()}
        if tombstones_of(check.ours) != expected:
            mismatches.append(f"{ctx}: tombstones {tombstones_of(check.ours)} != {expected}")
        txns = {k: t.version for k, t in check.ours.set_transactions.items()}
        if txns != {k: t["version"] for k, t in check.raw.txns.items()}:
            mismatches.append(f"{ctx}: txns {txns} != {check.raw.txns}")
    assert not mismatches, "\n".join(mismatches) + "\n" + table.describe()


def test_raw_log_oracle_checkpoint_agrees_with_json_replay(built: Built) -> None:
    """Guards the oracle: checkpoint + JSON equals JSON-only replay (tombstones too, unless a 0-second
    retention let the checkpoint writer drop them)."""
    table = built.table
    compared = 0
    for v in range(built.latest + 1):
        if not recreatable(table.path, v, use_checkpoint=False):
            continue
        a = raw_log_state(table.path, v)
        b = raw_log_state(table.path, v, use_checkpoint=False)
        compared += 1
        assert a.active == b.active
        assert {k: t["version"] for k, t in a.txns.items()} == {k: t["version"] for k, t in b.txns.items()}
        assert a.metadata is not None and b.metadata is not None and a.metadata["id"] == b.metadata["id"]
        if not table.short_retention:
            assert {k: r.get("deletionTimestamp") for k, r in a.tombstones.items()} == {
                k: r.get("deletionTimestamp") for k, r in b.tombstones.items()
            }
    assert compared or table.scenario.log_cleanup


def test_used_operations(built: Built) -> None:
    """The seeds exercise what they are meant to (checkpoints, removes, txns), so a change of
    seeds or weights cannot silently make the differential test trivial."""
    ops = {r.op for r in built.table.ops}
    assert len(ops) >= 6, built.table.describe()


# -- A.2: incremental update() equals a fresh full load ----------------------------------------------
def _summary(snap: Snapshot) -> dict[str, Any]:
    return {
        "version": snap.version,
        "files": {
            f.path: (f.size, f.modification_time, dict(f.partition_values), f.deletion_vector) for f in snap.all_files()
        },
        "tombstones": tombstones_of(snap),
        "protocol": snap.protocol,
        "metadata": snap.metadata,
        "txns": dict(snap.set_transactions),
        "domains": snap.domain_metadata,
        "num_files": snap.num_files,
        "size_in_bytes": snap.size_in_bytes,
    }


def test_incremental_update_equals_fresh_load(built: Built) -> None:
    table = built.table
    inc = built.incremental
    if inc.error is not None:
        raise inc.error
    assert len(inc.snapshots) == len(table.ops)
    assert [s.version for s in inc.snapshots] == [r.version for r in table.ops], table.describe()
    assert inc.snapshots[-1].version == built.latest
    mismatches = []
    for snap, rec in zip(inc.snapshots, table.ops, strict=True):
        if not recreatable(table.path, snap.version):
            continue  # log cleanup removed it since
        fresh = DeltaLog(str(table.path)).snapshot_at(version=snap.version)
        a, b = _summary(snap), _summary(fresh)
        if table.short_retention:
            # a checkpoint drops expired tombstones, JSON replay keeps them: compare the live ones
            a["tombstones"] = b["tombstones"] = None
        for key in a:
            if a[key] != b[key]:
                mismatches.append(f"after #{rec.index} {rec.op} (v{snap.version}): {key}: {a[key]!r} != {b[key]!r}")
    assert not mismatches, "\n".join(mismatches) + "\n" + table.describe()
    latest_fresh = DeltaLog(str(table.path)).update()
    assert latest_fresh.version == inc.snapshots[-1].version


# -- A.3: random damage: the right state or a typed error, never a raw error or a wrong state --------
DAMAGE_TRIALS = 5


def _commit_versions(path: Path) -> list[int]:
    return sorted(int(p.name[:20]) for p in (path / "_delta_log").glob("*.json") if p.name[:20].isdigit())


def _checkpoint_versions(path: Path) -> list[int]:
    return sorted(int(p.name[:20]) for p in (path / "_delta_log").glob("*.checkpoint.parquet"))


def _truncate_inside_a_line(data: bytes, rng: random.Random) -> bytes:
    """A proper prefix that ends inside a line, before its closing brace: never valid JSON lines."""
    lines = data.rstrip(b"\n").split(b"\n")
    i = rng.randrange(len(lines))
    cut = rng.randrange(0, len(lines[i]) - 1) if len(lines[i]) > 1 else 0
    return b"\n".join([*lines[:i], lines[i][:cut]])


def _damage(path: Path, rng: random.Random) -> tuple[str, set[int], set[int]]:
    """Apply 1..3 random faults; returns (description, unusable commits, unusable checkpoints)."""
    log_dir = path / "_delta_log"
    bad_commits: set[int] = set()
    bad_cps: set[int] = set()
    notes = []
    for _ in range(rng.randint(1, 3)):
        commits = [v for v in _commit_versions(path) if v not in bad_commits]
        cps = [v for v in _checkpoint_versions(path) if v not in bad_cps]
        kinds = ["truncate_commit", "delete_commit", "hint"]
        if cps and len(bad_cps) < 2:  # two unreadable checkpoints at most: the library retries twice
            kinds += ["corrupt_checkpoint", "delete_checkpoint", "zero_checkpoint"]
        kind = rng.choice(kinds)
        if kind in ("truncate_commit", "delete_commit") and commits:
            v = rng.choice(commits)
            f = log_dir / f"{v:020d}.json"
            if kind == "truncate_commit":
                f.write_bytes(_truncate_inside_a_line(f.read_bytes(), rng))
            else:
                f.unlink()
            bad_commits.add(v)
            notes.append(f"{kind} {v}")
        elif kind in ("corrupt_checkpoint", "delete_checkpoint", "zero_checkpoint"):
            v = rng.choice(cps)
            f = log_dir / f"{v:020d}.checkpoint.parquet"
            if kind == "corrupt_checkpoint":
                data = f.read_bytes()
                f.write_bytes(data[: rng.randrange(len(data) // 2)] if rng.random() < 0.5 else data[:-8])
            elif kind == "delete_checkpoint":
                f.unlink()
            else:
                f.write_bytes(b"")
            bad_cps.add(v)
            notes.append(f"{kind} {v}")
        else:
            hint = log_dir / "_last_checkpoint"
            choice = rng.choice([b"", b"\x00garbage", b'{"version": 10', b'{"version": 99999}', b'{"version": 1}'])
            hint.write_bytes(choice)
            notes.append(f"hint {choice!r}")
    return "; ".join(notes), bad_commits, bad_cps


def _loadable(version: int, commits: set[int], cps: set[int]) -> bool:
    """Whether intact files make `version`: an intact checkpoint c <= version (or none) + commits c+1..v."""
    starts = [c + 1 for c in cps if c <= version] + [0]
    return any(all(v in commits for v in range(s, version + 1)) for s in starts)


def test_random_damage_gives_right_state_or_typed_error(built: Built, tmp_path: Path) -> None:
    table = built.table
    oracle = {v: raw_log_state(table.path, v) for v in range(built.latest + 1) if recreatable(table.path, v)}
    problems = []
    for trial in range(DAMAGE_TRIALS):
        rng = random.Random(table.seed * 1000 + trial)
        copy = tmp_path / f"trial{trial}"
        shutil.copytree(table.path, copy)
        what, bad_commits, bad_cps = _damage(copy, rng)
        commits = set(_commit_versions(copy)) - bad_commits
        cps = {
            v
            for v in _checkpoint_versions(copy)
            if (copy / "_delta_log" / f"{v:020d}.checkpoint.parquet").stat().st_size
        }
        cps -= bad_cps
        for v in [None, *sorted(oracle)]:
            ctx = f"trial {trial} [{what}] version {v}"
            try:
                snap = DeltaLog(str(copy)).update() if v is None else DeltaLog(str(copy)).snapshot_at(version=v)
            except DeltaError as exc:
                if str(copy) not in str(exc):
                    problems.append(f"{ctx}: error does not name the table: {exc}")
                if v is not None and _loadable(v, commits, cps):
                    problems.append(f"{ctx}: intact files make this version, yet {type(exc).__name__}: {exc}")
                continue
            except Exception as exc:  # the bug this test exists for
                problems.append(f"{ctx}: raw {type(exc).__name__}: {exc}")
                continue
            if v is not None and snap.version != v:
                problems.append(f"{ctx}: loaded version {snap.version}")
                continue
            expected = oracle.get(snap.version)
            if expected is None:
                continue
            if files_of(snap) != expected.active:
                problems.append(f"{ctx}: WRONG file set at v{snap.version}")
            if not table.short_retention:
                want = {k: (r.get("deletionTimestamp"), r.get("size")) for k, r in expected.tombstones.items()}
                if tombstones_of(snap) != want:
                    problems.append(f"{ctx}: WRONG tombstones at v{snap.version}")
            if {k: t.version for k, t in snap.set_transactions.items()} != {
                k: t["version"] for k, t in expected.txns.items()
            }:
                problems.append(f"{ctx}: WRONG txns at v{snap.version}")
    assert not problems, "\n".join(problems[:40]) + "\n" + table.describe()
