"""The lake plan at scale (issue 26, "What must be shown"): a generated lake of 205 tables, 200 on disk and 5 on the
loopback S3 server (`support.lake_gen`: healthy, small files in some partitions only, deletion-vector heavy,
tombstone heavy, long logs without a checkpoint, expired log files, refused protocols, corrupt logs), an empty
prefix on each store and a missing bucket. The plan picks exactly the expected tables, partitions and operations,
none with a nil gain; what is refused or skipped is reported per table; a budget that fits half the work picks
the most valuable half. The lake is built once for the module (templates copied with `cp -rp`)."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest

pytest.importorskip("deltalake")

from support.lake_gen import COUNTS, KINDS, POLICY, Lake, build_lake

from airflow_delta_provider.delta.lake import Budget, discover, parse_policy, plan, scan
from airflow_delta_provider.delta.protocol.lake_plan import rank

DAY = 86_400_000
#: Kinds also put on the loopback S3 server (one table each).
S3_KINDS = ("small_two", "tombstones", "healthy", "corrupt", "expired_log")


BUCKET = f"lake-scale-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def s3(moto_s3):
    """The session's moto server, with this module's bucket."""
    pytest.importorskip("s3fs")
    from support.s3_server import create_bucket

    create_bucket(moto_s3, BUCKET)
    return moto_s3


def _put_table(fs, src: Path, dst: str, *, spaced: bool) -> None:
    """Upload a table as its writer made it: data first, then the log in version order; `spaced`: a second
    between commits, as S3 times objects to the second (a commit written before the one under it would make
    the log's times non-monotonic, and log cleanup then keeps everything)."""
    files = sorted(p for p in src.rglob("*") if p.is_file())
    log = [p for p in files if p.parent.name == "_delta_log"]
    for p in [*(p for p in files if p not in log), *log]:
        if spaced and p.suffix == ".json" and p.name[0].isdigit() and p.name != log[0].name:
            time.sleep(1.05)
        fs.put_file(str(p), f"{dst}/{p.relative_to(src).as_posix()}")


@pytest.fixture(scope="module")
def lake(tmp_path_factory, s3) -> tuple[Lake, dict[str, object], list[str]]:
    """The local lake, the S3 storage options, and the prefixes: the lake, an empty folder, the S3 lake, an
    empty S3 prefix and a bucket that does not exist."""
    import s3fs
    from support.s3_server import s3_storage_options

    root = tmp_path_factory.mktemp("scale")
    built = build_lake(root / "lake")
    (root / "empty").mkdir()
    options = s3_storage_options(s3)
    fs = s3fs.S3FileSystem(**options)
    key = f"s3lake-{uuid.uuid4().hex[:8]}"
    for name in S3_KINDS:
        folder = "/".join(x for x in (key, KINDS[name].folder, f"{name}_s3") if x)
        uri = f"s3://{BUCKET}/{folder}"
        _put_table(fs, built.templates[name], f"{BUCKET}/{folder}", spaced=name == "expired_log")
        built.tables[uri] = KINDS[name]
    prefixes = [
        str(root / "lake"),
        str(root / "empty"),
        f"s3://{BUCKET}/{key}",
        f"s3://{BUCKET}/empty-{key}",
        f"s3://no-such-bucket-{key}/lake",
    ]
    return built, options, prefixes


def test_the_lake_has_every_kind(lake):
    built, _, _ = lake
    assert len(built.tables) == sum(COUNTS.values()) + len(S3_KINDS) >= 200
    assert {k.name for k in built.tables.values()} == set(KINDS)


def test_the_plan_picks_exactly_the_expected_work(lake):
    built, options, prefixes = lake
    found = discover(prefixes, storage_options=options)
    assert set(found.tables) == set(built.tables) and found.truncated == []
    # the empty folder and the empty S3 prefix are no error; the missing bucket is, and stops nothing else
    assert [(e["prefix"], e["error_class"]) for e in found.errors] == [(prefixes[-1], "BucketNotFoundError")]

    now = int(time.time() * 1000) + 8 * DAY  # tombstones and expired log files past retention
    result = scan(found.tables, policy=parse_policy(POLICY), storage_options=options, now_ms=now)
    assert {(e["table"], e["error_class"]) for e in result.errors} == built.expected_errors()
    assert len(result.healths) == len(built.tables) - len(built.expected_errors())
    # from the log alone: a listing, `_last_checkpoint` and the log's files; no data file is read
    assert all(h.requests.get("list", 0) == 1 for h in result.healths)

    lake_plan = plan(result.healths, errors=[*found.errors, *result.errors])
    got = {(t.table, t.operation, t.partitions) for t in lake_plan.tasks}
    assert got == built.expected_tasks()
    assert all(t.gain.value > 0 and t.cost.total_requests > 0 for t in lake_plan.tasks)
    # no checkpoint for a handful of commits, no log cleanup with nothing to clean
    for t in lake_plan.tasks:
        health = next(h for h in result.healths if h.table == t.table)
        if t.operation == "checkpoint":
            assert health.commits_since_checkpoint >= health.policy.checkpoint_interval
        if t.operation == "log_cleanup":
            assert t.gain.log_files_removed == health.log_files_past_retention > 0
    skipped = {(s["table"], s.get("operation"), s.get("error_class")) for s in lake_plan.skipped}
    assert skipped == built.expected_skipped()
    assert {t.table for t in lake_plan.tasks if t.needs_approval} == {
        t for t, k in built.tables.items() if ("vacuum", ()) in k.expected
    }
    assert len(lake_plan.errors) == len(built.expected_errors()) + 1  # and the missing bucket

    # a budget that fits half the work picks the most valuable half and defers the rest
    ranked = rank(lake_plan.tasks)
    half = len(ranked) // 2
    budget = Budget(requests=sum(t.cost.total_requests for t in ranked[:half]))
    halved = plan(result.healths, budget)
    assert halved.tasks == ranked[:half] and halved.deferred == ranked[half:]
    assert min(t.value for t in halved.tasks) >= max(t.value for t in halved.deferred)


def test_the_lake_files_are_untouched_by_planning(lake):
    """Scanning and planning write nothing: the local lake's files are the templates' files."""
    built, _, _ = lake
    for table, kind in list(built.tables.items())[::20]:
        if not table.startswith("file://"):
            continue
        path = Path(table.removeprefix("file://"))
        template = built.templates[kind.name]
        assert sorted(p.relative_to(path) for p in path.rglob("*")) == sorted(
            p.relative_to(template) for p in template.rglob("*")
        )
