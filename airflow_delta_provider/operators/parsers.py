"""The operators' arguments, derived from the options each action takes (`commands.request.OPTIONS`).

An operator's own keyword arguments are its action's option fields (`action_arguments`), with their defaults,
each read by one parser (`PARSERS`): a flag's (`parse_flag`), else the one the option's metadata gives
`deltalog` and the other faces (made optional where the default is None), else one named here (`_OWN`) for
`DeltaJobOperator`'s own arguments and those whose Python value is more than text (a plan, a list of URIs, a
VACUUM task's XCom).
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable, Mapping
from dataclasses import MISSING, fields
from functools import partial
from typing import Any

from ..commands import arguments as arg
from ..commands.request import ENGINES, OPTIONS
from ..delta.protocol.quarantine import check_quarantine_id
from .leases import parse_lease_ttl

#: Option fields that are no operator's own argument: `DeltaJobOperator`'s (`retention_hours`,
#: `include_files`), those `plan` fills (`plan_uri`) and the one the spark-submit job sets (`plan_dir`).
NOT_OWN = frozenset({"retention_hours", "include_files", "plan_uri", "plan_dir"})


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
    if not text.lstrip().startswith("{"):
        return {"plan_uri": text}
    try:
        return {"plan": json.loads(text)}
    except ValueError:
        raise arg.refuse(argument, "a plan (JSON object) or the path or URI of a dry run's result", text) from None


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


def _columns(value: Any, argument: str) -> str | None:
    """Column names: comma-separated text or a list of names (joined); none: None."""
    if isinstance(value, list | tuple):
        value = ",".join(value)
    return value or None


#: The parsers no option's metadata gives: `DeltaJobOperator`'s own arguments, and option fields taking Python
#: values beyond text (an XCom, a list, a plan) or text the option's metadata does not parse.
_OWN: dict[str, Callable[[Any, str], Any]] = {
    "engine": partial(arg.parse_choice, choices=ENGINES),
    "version": arg.as_version,
    "snapshot_partitions": partial(arg.parse_count, minimum=1),
    "auto_threshold_mb": arg.optional(arg.parse_number),
    "dry_run": arg.parse_flag,
    "submit": arg.parse_flag,
    "ship_library": arg.parse_flag,
    "lease_ttl": parse_lease_ttl,
    "quarantine_id": _quarantine_id,
    "where": lambda value, argument: value or None,
    "zorder_by": _columns,
    "prefixes": _uris,
    "tables": _uris,
    "plan": _plan,
}


def _parsers() -> dict[str, Callable[[Any, str], Any]]:
    """`_OWN`, then each option field's parser from its metadata (an argument means one thing in every action)."""
    out = dict(_OWN)
    for options in OPTIONS.values():
        for f in fields(options):
            parse = f.metadata.get("parse")
            if f.name in out or f.name in ("checks", "plan_uri", "plan_dir"):
                continue
            if isinstance(f.default, bool):
                out[f.name] = arg.parse_flag
            elif parse is not None:
                out[f.name] = arg.optional(parse) if f.default is None else parse
            else:  # pragma: no cover - a new option field needs a parser here
                raise TypeError(f"option {options.__name__}.{f.name} has no operator parser: add one to _OWN")
    return out


#: Each argument's parser, called as `parse(value, name)`: at `__init__` (a bad literal fails the DAG at parse
#: time; a template waits), and again once templates are rendered (`DeltaJobOperator.argument`).
PARSERS: dict[str, Callable[[Any, str], Any]] = _parsers()


def action_arguments(action: str, defaults: Mapping[str, Any]) -> dict[str, inspect.Parameter]:
    """The keyword arguments an operator of `action` takes beyond `DeltaJobOperator`'s: the action's option
    fields with their defaults, `apply` taken as `dry_run` (its negation; default `defaults["dry_run"]`)
    unless `defaults` names `apply`, and `defaults` overriding (`inspect.Parameter.empty`: required).
    Each is annotated with its option's type, or text (a template, or a value as it renders)."""
    out = {}
    for f in fields(OPTIONS[action]):
        if f.name in NOT_OWN:
            continue
        name = "dry_run" if f.name == "apply" and "apply" not in defaults else f.name
        default = f.default if f.default_factory is MISSING else f.default_factory()  # type: ignore[misc]
        default = defaults.get(name, default)
        kinds = str(f.type).split(" | ")
        annotation = " | ".join(dict.fromkeys([*kinds[:1], "str", *kinds[1:]]))  # `int | None` -> `int | str | None`
        out[name] = inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation)
    return out
