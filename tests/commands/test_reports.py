"""Reports: histograms over real snapshots, Markdown and HTML renderings, and the HTML in a real browser.

Tables are written by `DeltaLogBuilder` (exact sizes and deletion times) and read through the command
layer (`commands.run`), so the reports render the result dicts the operators write. The browser test
opens the pages in Debian's headless Chromium (`.ci/run` installs it): no console errors, every chart
drawn; its screenshots go to `tests/.artifacts/` (ignored by git).
"""

from __future__ import annotations

import itertools
import os
import re
from pathlib import Path
from typing import Any

import pytest

from airflow_delta_provider.commands import Request, run
from airflow_delta_provider.commands.checks import evaluate_checks
from airflow_delta_provider.commands.reports import (
    REPORT_KINDS,
    deletion_age_histogram,
    file_size_histogram,
    human_bytes,
    render_html,
    render_markdown,
    size_histogram,
    tombstone_age_histogram,
)
from airflow_delta_provider.delta import DeltaLog
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
    with pytest.raises(
        ValueError, match=r"no report for 'files'; reports exist for \['tombstones', 'snapshot', 'vacuum'\]"
    ):
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
    }
    assert set(results) == set(REPORT_KINDS)
    for kind, result in results.items():
        assert render_html(kind, result).startswith("<!doctype html>")
        assert render_markdown(kind, result).startswith("# ")
    with pytest.raises(ValueError, match="no report for 'optimize'"):
        render_html("optimize", {})


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
