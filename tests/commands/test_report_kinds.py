"""Issue 25: each report kind reads its result once (`reports._REPORTS`), so the Markdown and the HTML page of
one result say the same thing: a dry run is a plan in both, an applied run a report. A real VACUUM (LITE) of a
small table, planned then applied; nothing is mocked."""

from __future__ import annotations

import re
from pathlib import Path

from test_reports import _tombstone_table, _vacuum_results

from airflow_delta_provider.commands.reports import render_html, render_markdown


def test_both_formats_give_one_title(tmp_path: Path) -> None:
    plan, applied = _vacuum_results(_tombstone_table(tmp_path))
    for result, title in ((plan, "VACUUM plan: "), (applied, "VACUUM report: ")):
        md, page = render_markdown("vacuum", result), render_html("vacuum", result)
        assert md.startswith(f"# {title}{result['table']}\n")
        (shown,) = re.findall(r"<title>(.*)</title>", page)
        assert shown.startswith(title)
    assert "- Dry run: nothing was deleted. 2 files (6 MiB) would be." in render_markdown("vacuum", plan)
