"""`--where` expressions: `col OP value [AND ...]` as filter tuples for `Snapshot.files`."""

from __future__ import annotations

import re
from typing import Any

_COND_RE = re.compile(
    r"^\s*(?P<col>[A-Za-z_][\w.]*|`[^`]+`)\s*"
    r"(?:(?P<null>is\s+not\s+null|is\s+null)|(?P<op>>=|<=|!=|<>|==|=|<|>|not\s+in|in)\s*(?P<val>.+?))\s*$",
    re.IGNORECASE,
)


def _value(text: str) -> Any:
    t = text.strip()
    if len(t) >= 2 and t[0] == t[-1] and t[0] in "'\"":
        return t[1:-1]
    if re.fullmatch(r"-?\d+", t):
        return int(t)
    if re.fullmatch(r"-?\d+\.\d*(e-?\d+)?", t, re.IGNORECASE):
        return float(t)
    if t.lower() in ("true", "false"):
        return t.lower() == "true"
    return t


def parse_where(expr: str) -> list[tuple[str, str, Any]]:
    """`a = 1 AND b IN ('x', 'y') AND c IS NULL` as filter tuples (AND only)."""
    out: list[tuple[str, str, Any]] = []
    for part in re.split(r"\s+and\s+", expr.strip(), flags=re.IGNORECASE):
        m = _COND_RE.match(part)
        if not m:
            raise ValueError(f"cannot parse condition {part!r} (use: col OP value [AND ...])")
        col = m["col"].strip("`")
        if m["null"]:
            out.append((col, " ".join(m["null"].lower().split()), None))
            continue
        op = " ".join(m["op"].lower().split())
        op = "!=" if op == "<>" else op
        val = m["val"].strip()
        if op in ("in", "not in"):
            if not (val.startswith("(") and val.endswith(")")):
                raise ValueError(f"{op.upper()} needs a parenthesised list, got {val!r}")
            out.append((col, op, [_value(v) for v in val[1:-1].split(",") if v.strip()]))
        else:
            out.append((col, op, _value(val)))
    return out
