"""Reports: histograms over real snapshots, Markdown and HTML renderings, and the HTML in a real browser.

Tables are written by `DeltaLogBuilder` (exact sizes and deletion times) and read through the command
layer (`commands.run`), so the reports render the result dicts the operators write. The browser test
opens the pages in Debian's headless Chromium (`.ci/run` installs it): no console errors, every chart
drawn; its screenshots go to `tests/.artifacts/` (ignored by git).
"""

from __future__ import annotations

import itertools
import json
import os
import random
import re
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from airflow_delta_provider.commands import Request, run
from airflow_delta_provider.commands.checks import evaluate_checks
from airflow_delta_provider.commands.command import execute
from airflow_delta_provider.commands.report_data import (
    deletion_age_histogram,
    file_size_histogram,
    size_histogram,
    table_health,
    tombstone_age_histogram,
)
from airflow_delta_provider.commands.reports import REPORT_KINDS, human_bytes, render_html, render_markdown
from airflow_delta_provider.commands.result_store import previous_runs
from airflow_delta_provider.delta import DeltaLog
from airflow_delta_provider.delta.protocol.actions import AddFile
from airflow_delta_provider.delta.read.arrow_build import int_array
from airflow_delta_provider.testing import DeltaLogBuilder

MIB = 1024 * 1024
HOUR = 3_600_000
NOW = 1_800_000_000_000  # the reports' clock: tombstones are placed relative to it
ARTIFACTS = Path(__file__).resolve().parents[1] / ".artifacts"
EVIL = '</svg><script>alert("x")</script>&'


# -- tables ---------------------------------------------------------------------------------------------------
def _tombstone_table(tmp_path: Path) -> DeltaLogBuilder:
    """Three partitions (one with a hostile value); files removed 400 h (past the default 168 h
    retention), 100 h and 1 h before NOW, and one removed without a partition."""
    b = DeltaLogBuilder(
        tmp_path / "tomb",
        schema={"id": "long", "day": "string"},
        partition_columns=["day"],
        start_time_ms=NOW - 1000 * HOUR,
        write_data_files=True,
    )
    b.create()
    for tag, day, n, size in (("a", "2024-01-01", 4, 3 * MIB), ("b", "2024-01-02", 3, 40 * MIB), ("e", EVIL, 2, 512)):
        b.append([f"{tag}-{i}.parquet" for i in range(n)], partition={"day": day}, size=size)
    b.remove(["a-0.parquet", "a-1.parquet"], deletion_timestamp_ms=NOW - 400 * HOUR)
    b.remove(["b-0.parquet"], deletion_timestamp_ms=NOW - 100 * HOUR)
    b.remove([{"path": "ghost.parquet", "size": 7}, "e-0.parquet"], deletion_timestamp_ms=NOW - 1 * HOUR)
    return b


def _replay_table(tmp_path: Path) -> DeltaLogBuilder:
    """Versions 1-4: files of 1 KiB to 64 MiB; version 3 adds a hundred small files, version 4 compacts them."""
    b = DeltaLogBuilder(tmp_path / "replay", schema={"id": "long"})
    b.create()
    b.append([{"path": f"big-{i}.parquet", "size": s} for i, s in enumerate((64 * MIB, 48 * MIB, 33 * MIB))])
    b.append([{"path": "edge.parquet", "size": 32 * MIB}, {"path": "under.parquet", "size": 32 * MIB - 1}])
    b.append([{"path": f"tiny-{i}.parquet", "size": 1024 + i} for i in range(100)])
    b.remove([f"tiny-{i}.parquet" for i in range(100)], operation="OPTIMIZE")
    return b


def _vacuum_results(b: DeltaLogBuilder) -> tuple[dict[str, Any], dict[str, Any]]:
    """A real VACUUM (LITE) of the tombstone table at NOW: its dry-run plan, then the applied result."""
    from airflow_delta_provider.delta.maintenance.vacuum import vacuum

    plan = vacuum(b.uri, mode="lite", clock=lambda: NOW).to_dict()
    applied = vacuum(b.uri, mode="lite", clock=lambda: NOW, dry_run=False, plan=plan).to_dict()
    return plan, applied


def _tombstone_result(b: DeltaLogBuilder) -> dict[str, Any]:
    body = run(Request(b.uri, "tombstones", now_ms=NOW, engine="local")).body
    snap = DeltaLog(b.uri).snapshot_at(version=b.version)
    # what the command layer adds (`tombstone_age_histogram` under "deletion_age_histogram")
    body["deletion_age_histogram"] = tombstone_age_histogram(
        snap, now_ms=body["now_ms"], cutoff_ms=body["retention"]["cutoff_ms"]
    )
    return body


def _snapshot_result(b: DeltaLogBuilder, **request: Any) -> dict[str, Any]:
    checks = {"max_small_file_ratio": 0.5, "small_file_mb": 32, "min_files": 1, "max_files": 50}
    body = run(Request.make(table=b.uri, action="snapshot", checks=checks, engine="local", **request)).body
    snap = DeltaLog(b.uri).snapshot_at(version=body["version"])
    # what the command layer adds (`file_size_histogram` under "file_size_histogram")
    body["file_size_histogram"] = file_size_histogram(snap, body["file_summary"]["small_file_bytes"])
    return body


# -- sizes in words -------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("n", "text"),
    [(None, "-"), (0, "0 B"), (1023, "1023 B"), (1536, "1.5 KiB"), (32 * MIB, "32 MiB"),
     (33 * MIB + MIB // 2, "33.5 MiB"), (5 * 1024**4, "5 TiB"), (3 * 1024**6, "3072 PiB")],
)  # fmt: skip
def test_human_bytes(n: int | None, text: str) -> None:
    assert human_bytes(n) == text


def test_the_small_file_check_names_its_threshold_in_words(tmp_path: Path) -> None:
    b = _replay_table(tmp_path)
    snap = DeltaLog(b.uri).snapshot_at(version=3)
    [result] = evaluate_checks({"max_small_file_ratio": 0.3, "small_file_mb": 32}, snap)
    assert not result.passed
    assert result.message.startswith("101 of 105 files are under 32 MiB (ratio 0.962")
    assert "33554432" not in result.message


# -- histograms -----------------------------------------------------------------------------------------------
def test_size_histogram_splits_exactly_at_the_small_file_threshold(tmp_path: Path) -> None:
    b = _replay_table(tmp_path)
    snap = DeltaLog(b.uri).snapshot_at(version=3)
    threshold = 32 * MIB
    hist = file_size_histogram(snap, threshold)
    buckets = hist["buckets"]
    assert sum(x["count"] for x in buckets) == hist["num_files"] == snap.num_files == 105
    assert sum(x["bytes"] for x in buckets) == snap.size_in_bytes
    # the same small-file count as the check's summary: under the threshold is small, at it is not
    summary = snap.file_summary(threshold)
    assert sum(x["count"] for x in buckets if x["small"]) == summary.small_files == 101
    at = next(x for x in buckets if x["min_bytes"] == threshold)
    assert not at["small"] and at["count"] == 3  # 32, 33 and 48 MiB
    below = next(x for x in buckets if x["max_bytes"] == threshold)
    assert below["small"] and below["count"] == 1 and below["bytes"] == threshold - 1
    assert buckets[0]["min_bytes"] == 1024 and buckets[-1]["max_bytes"] == 128 * MIB  # empty ends trimmed
    for lo, hi in itertools.pairwise(buckets):
        assert lo["max_bytes"] == hi["min_bytes"]


def test_size_histogram_keeps_an_odd_threshold_in_view_and_handles_no_files() -> None:
    hist = size_histogram(int_array([10, 20, None]), 100 * MIB)  # tiny files, a threshold far above them
    edges = [x["min_bytes"] for x in hist["buckets"]]
    assert 100 * MIB in edges  # the threshold stays a visible edge, however far from the files
    assert hist["buckets"][0] == {"min_bytes": 0, "max_bytes": 1024, "count": 3, "bytes": 30, "small": True}
    empty = size_histogram(int_array([]), 32 * MIB)
    assert empty["num_files"] == 0 and all(x["count"] == 0 for x in empty["buckets"])


def test_deletion_age_histogram_agrees_with_the_tombstone_report(tmp_path: Path) -> None:
    report = _tombstone_result(_tombstone_table(tmp_path))
    hist = report["deletion_age_histogram"]
    assert hist["retention_hours"] == 168 and hist["cutoff_ms"] == report["retention"]["cutoff_ms"]
    expired = [x for x in hist["buckets"] if x["expired"]]
    retained = [x for x in hist["buckets"] if not x["expired"]]
    assert sum(x["count"] for x in expired) == report["expired"] == 2
    assert sum(x["bytes"] for x in expired) == report["reclaimable_bytes"] == 6 * MIB
    assert sum(x["count"] for x in retained) == report["retained"] == 3
    assert sum(x["bytes"] for x in retained) == report["retained_bytes"] == 40 * MIB + 7 + 512
    assert [x["min_hours"] for x in hist["buckets"] if x["count"]] == [1, 72, 336]
    assert min(x["min_hours"] for x in expired) == 168  # the cutoff is a bucket edge


def test_deletion_age_histogram_edges_and_missing_values() -> None:
    now, cutoff = 10_000 * HOUR, 10_000 * HOUR - 24 * HOUR  # a one-day retention
    stamps = int_array([cutoff, cutoff + 1, now + HOUR, None, now - 5 * HOUR])
    sizes = int_array([1, 2, 4, 8, None])
    hist = deletion_age_histogram(stamps, sizes, now_ms=now, cutoff_ms=cutoff)
    by_start = {x["min_hours"]: x for x in hist["buckets"]}
    assert by_start[24]["count"] == 1 and by_start[24]["expired"]  # deleted at the cutoff: past retention
    assert by_start[6]["count"] == 1 and by_start[6]["bytes"] == 2 and not by_start[6]["expired"]  # one ms later
    assert by_start[0]["count"] == 1 and by_start[0]["bytes"] == 4  # from the future: age 0
    assert by_start[1]["count"] == 1 and by_start[1]["bytes"] == 0  # no size: 0 bytes
    assert hist["without_timestamp"] == {"count": 1, "bytes": 8}
    assert hist["num_tombstones"] == 5
    none = deletion_age_histogram(int_array([]), int_array([]), now_ms=now, cutoff_ms=cutoff)
    assert none["buckets"] == [] and none["num_tombstones"] == 0


# -- Markdown -------------------------------------------------------------------------------------------------
def test_markdown_reports(tmp_path: Path) -> None:
    tomb = render_markdown("tombstones", _tombstone_result(_tombstone_table(tmp_path)))
    assert "- Past retention, safe for VACUUM: 2 (6 MiB)" in tomb
    assert "- Retention: 7 d (default); cutoff " in tomb
    assert "| day=2024-01-01 | 0 | 0 B | 2 | 6 MiB |" in tomb
    assert EVIL.replace("|", "\\|") in tomb  # Markdown is text: shown as is, pipes escaped

    snap = render_markdown("snapshot", _snapshot_result(_replay_table(tmp_path), since_version=1))
    assert "- Small files (under 32 MiB): 1 (20.0 %); sizes 32 MiB to 64 MiB" in snap
    v3_size = human_bytes(209 * MIB - 1 + 100 * 1024 + 4950)
    assert f"| 3 | WRITE | 105 | {v3_size} | 101 | max_files, max_small_file_ratio |" in snap
    assert "| 4 | OPTIMIZE | 5 | 209 MiB | 1 | passed |" in snap
    assert "## Failures" in snap and "first failing version 3" in snap
    with pytest.raises(ValueError, match=r"no report for 'files'; reports exist for \['tombstones', 'snapshot', "):
        render_markdown("files", {})


def test_vacuum_markdown(tmp_path: Path) -> None:
    plan, applied = _vacuum_results(_tombstone_table(tmp_path))
    dry = render_markdown("vacuum", plan)
    assert "- Dry run: nothing was deleted. 2 files (6 MiB) would be." in dry
    assert "- Retention: 7 d; cutoff " in dry
    assert "| day=2024-01-01 | 2 | 6 MiB |" in dry
    assert "- Deleted: 2 files (6 MiB), " in render_markdown("vacuum", applied)


# -- HTML -----------------------------------------------------------------------------------------------------
def _charts(page: str) -> list[str]:
    return re.findall(r'<figure class="chart" id="([^"]+)">', page)


def _assert_self_contained(page: str) -> None:
    assert "<script" not in page.lower()
    assert "Content-Security-Policy" in page and "default-src 'none'" in page
    refs = re.findall(r'\b(?:src|href|xlink:href)="([^"]*)"', page)
    assert all(r.startswith("#") for r in refs), refs  # only references inside the page
    assert "@import" not in page
    assert all(u.startswith("#") for u in re.findall(r"url\(([^)]*)\)", page))  # clip paths inside the page


def test_tombstone_html_page(tmp_path: Path) -> None:
    page = render_html("tombstones", _tombstone_result(_tombstone_table(tmp_path)))
    _assert_self_contained(page)
    assert _charts(page) == ["chart-partitions", "chart-deletion-ages"]
    assert page.count("<svg") == 2
    assert "&lt;/svg&gt;&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;&amp;" in page  # the table cell, escaped
    # header, then numbers, then charts, then the table
    order = [
        page.index(s)
        for s in ("<h1>Tombstone report", "reclaimable by VACUUM", "chart-partitions", "<h2>Per partition")
    ]
    assert order == sorted(order)
    assert '>6 MiB</div><div class="label">reclaimable by VACUUM' in page
    assert "7 d (default); cutoff" in page
    # largest reclaimable first in the table
    rows = re.findall(r'<tr><td class="key">([^<]*)</td>', page)
    assert rows[:2] == ["day=2024-01-01", "day=2024-01-02"]
    assert "retention 7 d" in page  # the cutoff line in the age chart


def test_snapshot_html_page_with_checks_over_versions(tmp_path: Path) -> None:
    page = render_html("snapshot", _snapshot_result(_replay_table(tmp_path), since_version=1))
    _assert_self_contained(page)
    assert _charts(page) == ["chart-versions", "chart-file-sizes", "chart-checks"]
    assert "small-file threshold 32 MiB" in page
    assert '<div class="status status-failed" role="status"><strong>Checks failed</strong>' in page
    assert "2 failed checks at 1 of 3 checked versions, first at version 3 (max_files, max_small_file_ratio)" in page
    assert "<h2>Per version</h2>" in page and "<h2>Failures</h2>" in page
    assert "33554432" not in page


def test_snapshot_html_page_of_one_version_and_without_histogram(tmp_path: Path) -> None:
    result = _snapshot_result(_replay_table(tmp_path), version=1)
    page = render_html("snapshot", result)
    assert _charts(page) == ["chart-versions", "chart-file-sizes"]  # no range: no per-version check chart
    assert "All checks passed." in page and "<h2>Checks at version 1</h2>" in page
    del result["file_size_histogram"]  # a result from before the histogram: that chart is left out
    assert _charts(render_html("snapshot", result)) == ["chart-versions"]


def test_vacuum_html_pages(tmp_path: Path) -> None:
    plan, applied = _vacuum_results(_tombstone_table(tmp_path))
    page = render_html("vacuum", plan)
    _assert_self_contained(page)
    assert _charts(page) == ["chart-vacuum"] and "<title>VACUUM plan: " in page
    assert "Dry run: nothing was deleted." in page and "2 files" in page
    done = render_html("vacuum", applied)
    assert "<title>VACUUM report: " in done and "VACUUM deleted 2 files (6 MiB)" in done


def test_every_kind_renders_both_formats_and_unknown_kinds_are_refused(tmp_path: Path) -> None:
    results = {
        "vacuum": _vacuum_results(_tombstone_table(tmp_path / "v"))[1],
        "tombstones": _tombstone_result(_tombstone_table(tmp_path)),
        "snapshot": _snapshot_result(_replay_table(tmp_path)),
        **{kind: result for kind, (result, _) in _maintenance_results(tmp_path / "m").items()},
    }
    assert set(results) == set(REPORT_KINDS)
    for kind, result in results.items():
        assert render_html(kind, result).startswith("<!doctype html>")
        assert render_markdown(kind, result).startswith("# ")
    with pytest.raises(ValueError, match="no report for 'files'"):
        render_html("files", {})


# -- maintenance reports: real operations on delta-rs tables, through `commands.execute` -------------------
HOSTILE_DIR = 'lake<&"x>'  # the table's path is shown in the page: it must come out escaped


def _small_appends(path: Path, n: int = 8, *, partitioned: bool = True, seed: int = 7) -> Path:
    """`n` appends by delta-rs of 10 rows with scattered ids (partitions p0/p1 alternating): all small files."""
    from deltalake import write_deltalake

    rng = random.Random(seed)
    for i in range(n):
        ids = rng.sample(range(1000), 10)
        batch = pa.table({"id": ids, "v": [float(x) for x in ids], "part": [f"p{i % 2}"] * 10})
        write_deltalake(str(path), batch, partition_by=["part"] if partitioned else None, mode="append")
    return path


def _execute(table: Path, action: str, result_uri: Path, **options: Any) -> dict[str, Any]:
    request = Request.make(table=str(table), action=action, engine="local", **options)
    code, result = execute(request, result_uri=str(result_uri), report_formats=["md", "html"])
    assert code == 0, result
    assert set(result.get("report_errors") or ()) <= {"health"}, result["report_errors"]
    return result


def _pages(result: dict[str, Any]) -> tuple[str, str]:
    return Path(result["reports"]["md"]).read_text(), Path(result["reports"]["html"]).read_text()


def _deltars_rows(table: Path) -> int:
    """Rows delta-rs reads (through DataFusion: its `to_pyarrow_table` refuses deletion vectors)."""
    from deltalake import DeltaTable, QueryBuilder

    reader = QueryBuilder().register("t", DeltaTable(str(table))).execute("SELECT count(*) AS n FROM t")
    return pa.table(reader.read_all()).column("n")[0].as_py()


def _maintenance_results(tmp_path: Path) -> dict[str, tuple[dict[str, Any], Path]]:
    """One real result of each maintenance kind (applied where it changes the table), with its table."""
    from conftest import copy_table

    table = _small_appends(tmp_path / "t")
    results = tmp_path / "results"
    out = {"optimize": (_execute(table, "optimize", results / "optimize" / "run.json", apply=True), table)}
    out["checkpoint"] = (_execute(table, "checkpoint", results / "checkpoint" / "run.json"), table)
    later = NOW + 1000 * HOUR  # every commit is past a zero retention then
    cleanup = _execute(table, "cleanup_log", results / "cleanup" / "run.json", retention_hours=0, now_ms=later)
    out["cleanup_log"] = (cleanup, table)
    dv = copy_table("delta-golden/dv-partitioned-with-checkpoint", tmp_path / "dv")
    out["purge"] = (_execute(dv, "purge", results / "purge" / "run.json", apply=True), dv)
    out["restore"] = (_execute(table, "restore", results / "restore" / "run.json", version=3, apply=True), table)
    out["repair"] = (_execute(table, "repair", results / "repair" / "run.json"), table)
    return out


def test_optimize_report_rows_partition_health_changes_and_runs(tmp_path: Path) -> None:
    table = _small_appends(tmp_path / HOSTILE_DIR / "t")
    folder = tmp_path / "results" / "dag" / "optimize"
    plan = _execute(table, "optimize", folder / "run-1.json")
    md, page = _pages(plan)
    assert plan["health"]["before"]["totals"] == {
        "files": 8, "bytes": plan["bytes_removed"], "small_files": 8, "rows": 80, "small_file_ratio": 1.0,
    }  # fmt: skip
    assert "after" not in plan["health"] and plan["runs"] == []
    assert "- Rows (from stats): 80" in md
    assert "- Since the previous run: first run (no earlier result of this task beside this one)" in md
    assert "| part=p0 | 4 | " in md and "| 4 | 100.0 % small | 40 |" in md  # four files one bin may join
    assert "<title>OPTIMIZE plan: " in page and "Dry run: nothing was written." in page

    done = _execute(table, "optimize", folder / "run-2.json", apply=True)
    assert _deltars_rows(table) == 80  # delta-rs reads the rewrite: the same rows
    health = done["health"]
    assert health["before"]["version"] == 7 and health["after"]["version"] == done["version"] == 8
    assert health["before"]["totals"]["rows"] == health["after"]["totals"]["rows"] == 80
    assert {k: p["files"] for k, p in health["after"]["partitions"].items()} == {"part=p0": 1, "part=p1": 1}
    assert all(p["compacted"] and p["small_file_ratio"] == 1.0 for p in health["after"]["partitions"].values())
    assert [(r["version"], r["files"], r["dry_run"]) for r in done["runs"]] == [(7, 8, True)]
    md, page = _pages(done)
    assert "- Rows before: 80; after: 80 (equal: a rewrite changes no data)" in md
    assert "- Since the previous run: version 7 -> 8: files -6, bytes -" in md and "small files -6, rows ±0" in md
    assert "| part=p0 | 4 | 1 | " in md and "compacted as far as the target allows" in md
    assert "100.0 %" not in md and "100.0 %" not in page  # only small files left, but nothing more to compact
    _assert_self_contained(page)
    assert _charts(page) == ["chart-health", "chart-runs"]
    assert "after each of the last 2 runs of this task" in page
    assert ">80 → 80</div>" in page and "equal: a rewrite changes no data" in page
    assert f"{tmp_path}/lake&lt;&amp;&#34;x&gt;/t" in page and HOSTILE_DIR not in page  # escaped, never raw


def test_zorder_report_shows_the_overlap_before_and_after(tmp_path: Path) -> None:
    table = _small_appends(tmp_path / "z", 6, partitioned=False)
    done = _execute(table, "optimize", tmp_path / "r" / "z.json", apply=True, zorder_by="id,v")
    overlap = done["zorder_overlap"]
    assert overlap["id"]["before"] > 0 and overlap["id"]["after"] == 0  # six scattered files into one
    assert _deltars_rows(table) == 60
    md, page = _pages(done)
    assert md.startswith("# OPTIMIZE ZORDER BY (id, v) report: ")
    assert f"- Z-ORDER overlap on id: {overlap['id']['before']} before, 0 after" in md
    assert _charts(page) == ["chart-zorder", "chart-health", "chart-runs"]
    assert "<h2>Z-ORDER overlap</h2>" in page and "<dt>Z-ORDER by</dt><dd>id, v</dd>" in page


def test_checkpoint_and_log_cleanup_reports(tmp_path: Path) -> None:
    table = _small_appends(tmp_path / "t", 4)
    folder = tmp_path / "results"
    first = _execute(table, "checkpoint", folder / "checkpoint" / "1.json")
    md, page = _pages(first)
    assert f"- Actions: {first['num_actions']} (4 files, 0 tombstones); " in md
    assert "- Rows (from stats): 40" in md and "first run" in md
    assert "| part=p0 | 2 | " in md and "| 2 | 100.0 % small | 20 |" in md
    assert _charts(page) == ["chart-health", "chart-runs"] and "First run: one point" in page
    _small_appends(tmp_path / "t", 1, seed=9)  # one more file in p0 before the next run
    second = _execute(table, "checkpoint", folder / "checkpoint" / "2.json")
    md, _ = _pages(second)
    assert "- Since the previous run: version 3 -> 4: files +1, bytes +" in md and "rows +10" in md

    later = NOW + 1000 * HOUR
    cleanup = _execute(table, "cleanup_log", folder / "cleanup" / "1.json", retention_hours=0, now_ms=later)
    assert cleanup["dry_run"] and cleanup["num_files"] > 0
    md, page = _pages(cleanup)
    assert f"- Dry run: nothing was deleted. {cleanup['num_files']} log files (" in md
    assert f"- Earliest version the log keeps: {cleanup['earliest_readable_version']} (its data" in md
    assert "- Rows (from stats): 50" in md
    assert "<h2>Log files to delete</h2>" in page and all(f in page for f in cleanup["files"])
    assert (table / "_delta_log" / "00000000000000000000.json").exists()  # a dry run: nothing deleted
    assert _deltars_rows(table) == 50


def test_purge_report_on_a_corpus_table_with_deletion_vectors(tmp_path: Path) -> None:
    from conftest import copy_table

    table = copy_table("delta-golden/dv-partitioned-with-checkpoint", tmp_path)
    rows = _deltars_rows(table)
    done = _execute(table, "purge", tmp_path / "r" / "purge.json", apply=True)
    assert _deltars_rows(table) == rows
    before, after = done["health"]["before"]["totals"], done["health"]["after"]["totals"]
    assert before["rows"] == after["rows"] == rows  # numRecords less the vectors' rows, before and after
    md, page = _pages(done)
    assert md.startswith("# PURGE report: ")
    assert f"- Rows before: {rows}; after: {rows} (equal: a rewrite changes no data)" in md
    assert f"- Deleted rows purged: {done['num_deleted_rows_purged']}" in md and done["num_deleted_rows_purged"] > 0
    assert "<title>PURGE report: " in page and "deleted rows purged" in page


def test_restore_report_plan_then_apply(tmp_path: Path) -> None:
    from deltalake import DeltaTable

    table = _small_appends(tmp_path / "t", 4)
    DeltaTable(str(table)).delete("part = 'p1'")  # version 4: 20 rows left
    folder = tmp_path / "results" / "restore"
    plan = _execute(table, "restore", folder / "1.json", version=3)
    md, page = _pages(plan)
    assert plan["health"]["before"]["totals"]["rows"] == 20 and plan["health"]["after"]["totals"]["rows"] == 40
    assert "- Read version: 4; restore to version 3" in md
    assert "- Dry run: nothing was written. It would restore 2 files (" in md and "and remove 0 files (0 B)." in md
    assert "- Rows (from stats): 20 at version 4, 40 at version 3" in md and "first run" in md
    assert "<title>RESTORE plan: " in page and ">20 → 40</div>" in page

    done = _execute(table, "restore", folder / "2.json", version=3, apply=True)
    assert _deltars_rows(table) == 40 and done["version"] == 5
    md, page = _pages(done)
    assert "- Committed version 5: restored 2 files (" in md and "- Rows (from stats): 20 at version 4, 40 after" in md
    # the plan's point is the table as it stood (version 4), not the state it showed
    assert [(r["version"], r["rows"]) for r in done["runs"]] == [(4, 20)]
    assert "- Since the previous run: version 4 -> 5: files +2, bytes +" in md and "small files +2, rows +20" in md
    assert "| part=p1 | 0 | 2 | " in md  # the partition the delete emptied is back
    assert _charts(page) == ["chart-health", "chart-runs"] and "<h2>Files restored</h2>" in page


def test_snapshot_report_of_one_version_charts_the_runs_and_the_change(tmp_path: Path) -> None:
    table = _small_appends(tmp_path / "t", 2)
    folder = tmp_path / "results" / "replay"
    checks = {"min_files": 1}
    first = _execute(table, "snapshot", folder / "1.json", checks=checks)
    assert first["runs"] == [] and "first run (no earlier result" in _pages(first)[1]
    _small_appends(tmp_path / "t", 1, seed=3)
    second = _execute(table, "snapshot", folder / "2.json", checks=checks)
    _, page = _pages(second)
    assert [(r["version"], r["files"]) for r in second["runs"]] == [(1, 2)]
    assert _charts(page) == ["chart-runs", "chart-file-sizes"]  # not a one-point line over versions
    assert "<dt>Since the previous run</dt><dd>version 1 -&gt; 2: files +1, bytes +" in page


def test_repair_report_names_the_missing_files_and_the_rows_lost(tmp_path: Path) -> None:
    from deltalake import DeltaTable

    table = _small_appends(tmp_path / "t", 4)
    lost = sorted(DeltaTable(str(table)).file_uris())[0]
    os.remove(lost)
    folder = tmp_path / "results" / "repair"
    plan = _execute(table, "repair", folder / "1.json")
    md, page = _pages(plan)
    assert plan["num_missing"] == 1 and plan["rows_lost"] == 10
    assert "- Missing from storage: 1 of 4 files (" in md and "rows lost: 10" in md
    assert "<title>Repair (FSCK) plan: " in page and "1 active files are missing from storage" in page
    assert os.path.basename(lost) in page
    done = _execute(table, "repair", folder / "2.json", apply=True)
    assert _deltars_rows(table) == 30  # delta-rs reads the repaired table
    md, page = _pages(done)
    assert f"- Committed version {done['version']}: the missing files removed from the log" in md
    assert "- Rows (from stats): 40 before, 30 after" in md
    assert "- Since the previous run: version 3 -> 4: files -1, bytes -" in md and "rows -10" in md
    assert _charts(page) == ["chart-health", "chart-runs"]


def test_table_health_counts_rows_and_names_compacted_partitions() -> None:
    def add(path: str, part: str, size: int, rows: int | None) -> AddFile:
        stats = None if rows is None else json.dumps({"numRecords": rows})
        return AddFile(path=path, partition_values={"p": part}, size=size, modification_time=0, stats=stats)

    files = [add("a", "a", 10, 5), *(add(f"b{i}", "b", 10, 1) for i in range(3)), add("c0", "c", 50, 2),
             add("c1", "c", 60, None)]  # fmt: skip
    health = table_health(files, ["p"], small_file_bytes=20, target_bytes=100)
    a, b, c = (health["partitions"][f"p={k}"] for k in "abc")
    assert (a["small_files"], a["compacted"], a["rows"]) == (1, True, 5)  # one small file: nothing to pack
    assert (b["small_files"], b["compacted"], b["rows"]) == (3, False, 3)
    assert (c["small_files"], c["compacted"], c["rows"]) == (0, False, None)  # two files one bin may join
    assert health["totals"] == {"files": 6, "bytes": 150, "small_files": 4, "rows": None, "small_file_ratio": 4 / 6}


def test_previous_runs_are_this_tasks_successes_on_this_table_oldest_first(tmp_path: Path) -> None:
    folder = tmp_path / "runs"
    folder.mkdir()
    health = {"after": {"version": 3, "totals": {"files": 4, "bytes": 40, "small_files": 4, "rows": 9}}}
    base = {"status": "success", "action": "optimize", "table": "/t", "health": health, "dry_run": False}
    entries = {
        "b.json": base,
        "a.json": {**base, "table": "file:///t"},  # the same table, as a URI
        "other-action.json": {**base, "action": "checkpoint"},
        "other-table.json": {**base, "table": "/u"},
        "failed.json": {**base, "status": "error"},
        "no-health.json": {k: v for k, v in base.items() if k != "health"},
        "broken.json": "{not json",
        "report.html": "<html>",
        "self.json": base,
    }
    for i, (name, body) in enumerate(entries.items()):
        (folder / name).write_text(body if isinstance(body, str) else json.dumps(body))
        os.utime(folder / name, (1_000 + i, 1_000 + i))
    points = previous_runs(str(folder / "self.json"), "optimize", "/t")
    assert [p["name"] for p in points] == ["b.json", "a.json"]  # by time written, not by name
    assert points[0] == {"name": "b.json", "finished_ms": 1_000_000, "version": 3, "dry_run": False,
                         "files": 4, "bytes": 40, "small_files": 4, "rows": 9}  # fmt: skip
    assert previous_runs(str(tmp_path / "missing" / "x.json"), "optimize", "/t") == []


# -- in a real browser ----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def browser():
    from support.browser import Browser, find_chromium

    if find_chromium() is None:
        message = "Chromium is not installed (.ci/run installs it: apt-get install chromium-headless-shell)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        pytest.skip(message)
    with Browser() as b:
        yield b


_INSPECT = """Array.from(document.querySelectorAll('figure.chart')).map(f => {
  const svg = f.querySelector('svg'); const box = svg.getBoundingClientRect();
  return {id: f.id, title: svg.querySelector('title').textContent, width: box.width, height: box.height,
          marks: svg.querySelectorAll('path, use, rect').length, text: svg.querySelectorAll('text').length};
})"""


def test_reports_in_a_browser(tmp_path: Path, browser) -> None:
    pages = {
        "tombstones": render_html("tombstones", _tombstone_result(_tombstone_table(tmp_path))),
        "snapshot": render_html("snapshot", _snapshot_result(_replay_table(tmp_path), since_version=1)),
        "vacuum": render_html("vacuum", _vacuum_results(_tombstone_table(tmp_path / "v"))[0]),
    }
    expected = {
        "tombstones": ["Reclaimable bytes per partition", "Deletion age against the retention cutoff"],
        "snapshot": ["Files and bytes over versions", "File sizes", "Check results per version"],
        "vacuum": ["Files to delete per directory"],
    }
    for kind, page in pages.items():
        path = tmp_path / f"{kind}.html"
        path.write_text(page, encoding="utf-8")
        shot = ARTIFACTS / f"report-{kind}.png"
        loaded = browser.load(path, inspect=_INSPECT, screenshot=shot)
        assert loaded.console_errors == [], kind
        assert [c["title"] for c in loaded.dom] == expected[kind]
        for chart in loaded.dom:
            assert chart["width"] > 300 and chart["height"] > 100, chart  # laid out, not collapsed
            assert chart["marks"] > 10 and chart["text"] > 3, chart  # bars/lines and their labels drawn
        assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000


def test_the_browser_check_sees_console_errors(tmp_path: Path, browser) -> None:
    """The control: a page that logs an error, throws, and loads a missing file is not reported clean."""
    bad = tmp_path / "bad.html"
    bad.write_text(
        '<!doctype html><img src="missing.png"><script>console.error("boom"); null.x;</script>', encoding="utf-8"
    )
    errors = browser.load(bad).console_errors
    assert any("boom" in e for e in errors), errors
    assert any("TypeError" in e for e in errors), errors
    assert any("missing.png" in e or "ERR_FILE_NOT_FOUND" in e for e in errors), errors


def test_maintenance_reports_in_a_browser(tmp_path: Path, browser) -> None:
    charts = ["Files per partition", "Files and bytes across runs"]
    results = _maintenance_results(tmp_path)
    assert set(results) == set(REPORT_KINDS) - {"tombstones", "snapshot", "vacuum"}
    for kind, (result, _) in results.items():
        shot = ARTIFACTS / f"report-{kind}.png"
        loaded = browser.load(Path(result["reports"]["html"]), inspect=_INSPECT, screenshot=shot)
        assert loaded.console_errors == [], kind
        assert [c["title"] for c in loaded.dom] == charts, kind
        for chart in loaded.dom:
            assert chart["width"] > 300 and chart["height"] > 100, chart
            assert chart["marks"] > 10 and chart["text"] > 3, chart
        assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000


def test_a_failed_health_read_leaves_the_operation_and_its_report_standing(tmp_path: Path, monkeypatch) -> None:
    from airflow_delta_provider.commands import command

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise OSError("stats unreadable")

    monkeypatch.setattr(command, "snapshot_health", broken)
    table = _small_appends(tmp_path / "t", 4)
    done = _execute(table, "optimize", tmp_path / "r" / "o.json", apply=True)
    assert done["report_errors"] == {"health": "OSError: stats unreadable"}
    assert done["status"] == "success" and done["version"] == 4 and _deltars_rows(table) == 40
    md, page = _pages(done)
    assert "Since the previous run: unknown (no table health in this result)" in md and "<svg" not in page
