"""The operators' argument parsers (`commands.arguments`), one per argument name (`PARSERS`)."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

from ..commands import arguments as arg
from ..commands.request import ENGINES, VACUUM_MODES
from ..delta.protocol.quarantine import check_quarantine_id
from .leases import parse_lease_ttl, parse_location


def _quarantine_id(value: Any, argument: str) -> str:
    """A quarantine id, or a VACUUM task's XCom (its `quarantine_id`, natively rendered)."""
    return check_quarantine_id(value.get("quarantine_id") if isinstance(value, Mapping) else value)


def _plan(plan: Mapping[str, Any] | str | None, argument: str) -> dict[str, Any]:
    """A plan to apply: a dict or its JSON (`plan`), or the path/URI of a dry run's result (`plan_uri`,
    read where the job runs: a big plan never goes on a command line)."""
    if plan is None or plan == "":
        return {}
    if isinstance(plan, Mapping):
        return {"plan": plan}
    text = str(plan)
    return {"plan": json.loads(text)} if text.lstrip().startswith("{") else {"plan_uri": text}


def _uris(value: Any, argument: str) -> tuple[str, ...]:
    """A list of paths or URIs: a list, one URI, or a list's JSON (a template rendered as text); none: ()."""
    if arg.is_absent(value):
        return ()
    if isinstance(value, str) and value.lstrip().startswith("["):
        try:
            value = json.loads(value)
        except ValueError:
            raise arg.refuse(argument, "a list of paths or URIs", value) from None
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list | tuple) or not all(isinstance(v, str) and v.strip() for v in items):
        raise arg.refuse(argument, "a list of paths or URIs", value)
    return tuple(v.strip() for v in items)


#: Each argument's parser (`commands.arguments`), called as `parse(value, name)`: at `__init__` (a bad literal
#: fails the DAG at parse time; a template waits), and again once templates are rendered (`argument`).
PARSERS: dict[str, Callable[[Any, str], Any]] = {
    "engine": partial(arg.parse_choice, choices=ENGINES),
    "mode": partial(arg.parse_choice, choices=VACUUM_MODES),
    "version": arg.as_version,
    "since_version": arg.as_version,
    "snapshot_partitions": partial(arg.parse_count, minimum=1),
    "min_num_files": partial(arg.parse_count, minimum=1),
    "target_size": partial(arg.optional(arg.parse_count), minimum=1),
    "max_commit_bytes": partial(arg.optional(arg.parse_count), minimum=1),
    "auto_threshold_mb": arg.optional(arg.parse_number),
    "retention_hours": arg.optional(arg.parse_hours),
    "untracked_grace_hours": arg.optional(arg.parse_hours),
    "older_than_hours": arg.parse_hours,
    "lease_ttl": parse_lease_ttl,
    "lease_location": parse_location,
    "quarantine_id": _quarantine_id,
    "min_small_file_ratio": arg.optional(arg.parse_ratio),
    "small_file_mb": partial(arg.parse_size, unit="MiB"),
    "where": lambda value, argument: value or None,
    "zorder_by": lambda value, argument: value or None,
    "min_deleted_ratio": arg.parse_ratio,
    "max_files": partial(arg.optional(arg.parse_count), minimum=1),
    "files_per_commit": partial(arg.optional(arg.parse_count), minimum=1),
    "max_bytes": arg.optional(arg.parse_bytes),
    "prefixes": _uris,
    "tables": _uris,
    "policy": parse_location,
    "max_depth": arg.parse_count,
    "budget_bytes": arg.optional(arg.parse_bytes),
    "budget_requests": arg.optional(arg.parse_count),
    "budget_seconds": arg.optional(arg.parse_number),
    "plan": _plan,
    **dict.fromkeys(("submit", "ship_library", "include_files", "fail_on_data_loss", "apply"), arg.parse_flag),
    **dict.fromkeys(("write_checkpoint_first", "dry_run", "enforce_retention_duration"), arg.parse_flag),
    **dict.fromkeys(("allow_partial", "quarantine", "tighten"), arg.parse_flag),
}
