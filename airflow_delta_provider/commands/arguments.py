"""One parser per kind of argument, shared by every face: the operators (rendered templates are strings),
the `deltalog` CLI (`cli_type`) and the spark-submit job.

Each parser takes the value and the name the caller knows it by (`dry_run`, `--retention-hours`) and returns
the typed value or raises `InvalidArgumentError` naming it. A flag takes only a `bool` or true/false, yes/no,
on/off: nothing is ever guessed to mean "delete". `optional(parse)` reads `None`, `""`, `"None"` and `"null"`
(what Jinja renders for nothing) as not given. Pure: no I/O, no Airflow import.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import math
import re
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from numbers import Integral, Real
from typing import Any, TypeVar

from ..delta.errors import InvalidArgumentError
from ..delta.protocol.table_properties import parse_duration_ms

_T = TypeVar("_T")

#: The words a flag accepts (compared case-insensitively, whitespace stripped).
FLAG_WORDS: dict[str, bool] = {"true": True, "yes": True, "on": True, "false": False, "no": False, "off": False}
#: How a missing or None value renders in a template: read as "not given" by optional arguments.
ABSENT_WORDS = ("", "None", "null")
#: The largest retention the library takes (about 114 million years).
MAX_HOURS = 1e12
#: The largest size in MiB (2**63 bytes).
MAX_MIB = 2**63 / 2**20
_INTEGER = re.compile(r"\s*[+-]?\d+\s*")


def refuse(argument: str, expected: str, value: Any, *, table: str | None = None) -> InvalidArgumentError:
    """The error for `value` given as `argument`, which must be `expected`."""
    return InvalidArgumentError(f"{argument} must be {expected}, got {value!r}", argument=argument, table=table)


def is_absent(value: Any) -> bool:
    """Whether `value` means "not given": None, or a string rendering of nothing (`ABSENT_WORDS`)."""
    return value is None or (isinstance(value, str) and value.strip() in ABSENT_WORDS)


def is_template(value: Any) -> bool:
    """Whether `value` is a Jinja template still to be rendered (checked at execute time, not before)."""
    return isinstance(value, str) and ("{{" in value or "{%" in value)


def parse_flag(value: Any, argument: str, *, table: str | None = None) -> bool:
    """A flag: a `bool` or one of `FLAG_WORDS`; anything else (None, "", 0, 1, "1", other words) is refused."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in FLAG_WORDS:
        return FLAG_WORDS[value.strip().lower()]
    raise refuse(argument, "a boolean (true/false, yes/no, on/off)", value, table=table)


def parse_number(
    value: Any,
    argument: str,
    *,
    minimum: float = 0.0,
    maximum: float = math.inf,
    above_minimum: bool = False,
    expected: str = "a number",
    table: str | None = None,
) -> float:
    """A finite number in [`minimum`, `maximum`] (`> minimum` with `above_minimum`), or its string."""
    bounds = f"> {minimum:g}" if above_minimum else f">= {minimum:g}"
    if maximum != math.inf:
        bounds += f" and <= {maximum:g}"
    wanted = f"{expected} {bounds}"
    number = math.nan
    if isinstance(value, Real) and not isinstance(value, bool):
        number = float(value)
    elif isinstance(value, str):
        with contextlib.suppress(ValueError):
            number = float(value.strip())
    if not math.isfinite(number) or number > maximum or number < minimum or (above_minimum and number == minimum):
        raise refuse(argument, wanted, value, table=table)
    return number


#: A duration in hours: a finite number >= 0 (at most `MAX_HOURS`).
parse_hours = partial(parse_number, maximum=MAX_HOURS, expected="a finite number of hours")
#: A ratio: a number in [0, 1].
parse_ratio = partial(parse_number, maximum=1.0, expected="a ratio")


def parse_size(
    value: Any, argument: str, *, unit: str = "", maximum: float = math.inf, table: str | None = None
) -> float:
    """A size in `unit` (MiB, bytes: the caller's): a finite number > 0 (a size of 0 makes nothing)."""
    expected = f"a size in {unit}" if unit else "a size"
    return parse_number(value, argument, maximum=maximum, above_minimum=True, expected=expected, table=table)


def _integer(value: Any) -> int | None:
    """An integer, or its decimal string, as an `int`; None for anything else (booleans, fractions)."""
    if isinstance(value, Integral) and not isinstance(value, bool):
        return int(value)
    return int(value) if isinstance(value, str) and _INTEGER.fullmatch(value) else None


def parse_count(value: Any, argument: str, *, minimum: int = 0, table: str | None = None) -> int:
    """An integer >= `minimum`, or its decimal string; booleans and fractions are refused."""
    number = _integer(value)
    if number is None or number < minimum:
        raise refuse(argument, f"an integer >= {minimum}", value, table=table)
    return number


#: The units `parse_bytes` reads (case-insensitive): decimal (kB, MB, ...) and binary (KiB, MiB, ...).
BYTE_UNITS: dict[str, int] = {
    "": 1,
    "b": 1,
    **{f"{p}b": 1000 ** (i + 1) for i, p in enumerate("kmgtp")},
    **{f"{p}ib": 1024 ** (i + 1) for i, p in enumerate("kmgtp")},
}
_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([a-z]*)\s*", re.IGNORECASE)


def parse_bytes(value: Any, argument: str, *, table: str | None = None) -> int:
    """A number of bytes >= 1: an integer, or a text with a unit (`500MB`, `10GiB`, `1.5TB`)."""
    if isinstance(value, Integral) and not isinstance(value, bool):
        number = int(value)
    else:
        found = _SIZE.fullmatch(value) if isinstance(value, str) else None
        unit = BYTE_UNITS.get(found[2].lower()) if found else None
        if found is None or unit is None:
            raise refuse(argument, "a number of bytes, e.g. 1048576, 500MB or 10GiB", value, table=table)
        number = int(float(found[1]) * unit)
    if number < 1:
        raise refuse(argument, "a number of bytes >= 1", value, table=table)
    return number


def optional(parse: Callable[..., _T]) -> Callable[..., _T | None]:
    """`parse` for an optional argument: None for a value meaning "not given" (`is_absent`), else `parse`'s."""

    def parse_optional(value: Any, argument: str, **options: Any) -> _T | None:
        return None if is_absent(value) else parse(value, argument, **options)

    return parse_optional


def parse_choice(value: Any, argument: str, choices: Sequence[str], *, table: str | None = None) -> str:
    """One of `choices` (case-insensitive, whitespace stripped), returned as spelled in `choices`."""
    if isinstance(value, str):
        for choice in choices:
            if value.strip().lower() == choice.lower():
                return choice
    raise refuse(argument, "one of " + ", ".join(choices), value, table=table)


def last_version(pulled: Any, table_uri: str | None = None) -> int | None:
    """The version of the latest result among XCom results (None, one dict, an int, or on Airflow 3 a list
    in no set order), optionally only those of `table_uri`. Latest is by commit time (`timestamp_ms`), then
    version: a table dropped and recreated restarts at a lower version. A macro for
    `newer_than="{{ last_version(ti.xcom_pull(task_ids='replay', include_prior_dates=True)) }}"`."""
    from ..delta.storage import normalize_table_uri

    items = pulled if isinstance(pulled, list | tuple) else [pulled]
    wanted = normalize_table_uri(table_uri) if table_uri else None
    found: list[tuple[bool, int, int]] = []  # (has a commit time, commit time, version)
    for item in items:
        if isinstance(item, bool) or item is None:
            continue
        if isinstance(item, int):
            found.append((False, 0, item))
        elif isinstance(item, Mapping) and isinstance(item.get("version"), int):
            uri = item.get("table_uri")
            if wanted is None or (isinstance(uri, str) and normalize_table_uri(uri) == wanted):
                ts = item.get("timestamp_ms")
                timed = isinstance(ts, int) and not isinstance(ts, bool)
                found.append((timed, ts if timed else 0, item["version"]))
    return max(found)[2] if found else None


def as_version(value: Any, name: str) -> int | None:
    """A version argument: an integer (or its text), None when absent, or XCom results' `last_version`."""
    if is_absent(value):
        return None
    if isinstance(value, Mapping | list | tuple):
        return last_version(value)
    number = _integer(value)
    if number is None:
        raise refuse(name, "an integer version", value)
    return number


def parse_duration(
    value: Any, argument: str, *, positive: bool = False, maximum_ms: float | None = None, table: str | None = None
) -> dt.timedelta:
    """A duration: a `timedelta`, seconds (a number or its text), or a text such as `6h`, `90m`, `1h30m`;
    more than 0 when `positive`, else at least 0; at most `maximum_ms`."""
    if isinstance(value, str):
        with contextlib.suppress(ValueError):
            value = float(value.strip())
    ms = parse_duration_ms(value, argument, allow_minimum=not positive, maximum_ms=maximum_ms)
    return dt.timedelta(milliseconds=ms)


def parse_location(value: Any, argument: str, *, table: str | None = None) -> str | None:
    """A folder path or URI, or None when not given."""
    if is_absent(value):
        return None
    if not isinstance(value, str):
        raise refuse(argument, "a path or URI", value, table=table)
    return value.strip()


def cli_type(parse: Callable[..., Any], flag: str, **options: Any) -> Callable[[str], Any]:
    """An argparse `type=` for `flag` calling `parse(text, flag, **options)`; a refusal names the flag."""

    def convert(text: str) -> Any:
        try:
            return parse(text, flag, **options)
        except InvalidArgumentError as exc:
            raise argparse.ArgumentTypeError(exc.message.removeprefix(f"{flag} ")) from None

    convert.__name__ = getattr(parse, "__name__", "value")
    return convert
