"""Repair (FSCK) rules, pure: the commit's metrics and what the plan says of the missing files.

delta-rs `FileSystemCheckMetrics`; `maintenance.repair` finds the files with HEAD requests and commits.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .actions import AddFile
from .optimize import expected_rows as rows_lost  # the rows the table loses with the files

FSCK_OPERATION = "FSCK"


def operation_metrics(removed: Sequence[AddFile]) -> dict[str, Any]:
    """commitInfo.operationMetrics of an FSCK commit (delta-rs `FileSystemCheckMetrics`, plus the count)."""
    return {
        "numFilesRemoved": len(removed),
        "dry_run": "false",
        "files_removed": json.dumps([f.path for f in removed], separators=(",", ":")),
    }


@dataclass
class RepairPlan:
    """The active files of `table` at `read_version` that storage no longer holds."""

    table: str
    read_version: int
    num_files_checked: int = 0
    missing: list[AddFile] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "read_version": self.read_version,
            "num_files_checked": self.num_files_checked,
            "num_missing": len(self.missing),
            "missing_bytes": sum(f.size for f in self.missing),
            "rows_lost": rows_lost(self.missing),
            "files_removed": [f.path for f in self.missing],
        }
