"""Version leases: a reader pins a table version so that this library's maintenance never breaks it.

Pure rules (no I/O): what a lease file holds and whether it is valid, which leases are live at a time,
which versions they pin, where lease files may live, and which planned deletions a lease vetoes.
`maintenance.leases` reads and writes the files; `maintenance.vacuum` and `maintenance.log_cleanup`
honour them.

A lease is one small JSON object in its own file, `<id>.json`, by default in the table's hidden folder
`<table>/_delta_leases/` (or in a folder the user configures, `location`):

    {"format": "delta-lease/1", "id": "<32 hex digits>", "table": "<table URI>",
     "table_id": "<metaData.id>", "version": 12, "owner": "etl.load_orders",
     "created": <epoch ms>, "expires": <epoch ms>}

* **Live** at `now` while `now < expires`. An expired lease pins nothing (its file may be deleted by a
  release or a purge); a lease is never renewed in place: add a new one.
* **For this table** when its `table_id` is the table's `metaData.id` (a lease written for a table that
  was since deleted and re-created at the same location pins nothing of the new one).
* **Pins** its version: VACUUM keeps every file the version's snapshot names as active, and their
  deletion-vector files (PROTOCOL.md "Deletion Vectors": a DV stored as `u` or `p` is a file of the
  table); log cleanup keeps the newest checkpoint at or before the earliest pinned version and every
  later commit (PROTOCOL.md "Metadata Cleanup": a version is read from a checkpoint and the commits after it).
* **Where**: the default folder starts with `_`, so VACUUM never lists nor deletes it (PROTOCOL.md
  "VACUUM"-style hidden paths: `protocol.vacuum.is_hidden`, as Delta Spark's
  `DeltaTableUtils.isHiddenDirectory`; Delta's docs: "VACUUM will skip all directories that begin with an
  underscore"). A configured `location` inside the table root must be hidden too and outside `_delta_log`
  (`location_problem`): a visible folder's lease files would be deleted as untracked files.

Leases are this library's: other engines' VACUUM and log cleanup (Spark, delta-rs) do not read them.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Any

from ..errors import InvalidArgumentError, LeaseError
from .deletion_vectors import DV_FILE_CORE
from .table_properties import parse_duration_ms
from .vacuum import PlannedFile, dv_alias_key, is_hidden, normalize_relative

#: The default lease folder, directly under the table root (hidden: a leading `_`).
LEASE_DIR_NAME = "_delta_leases"
LEASE_FORMAT = "delta-lease/1"
#: The longest lease (a lease is a pin with an end, not a retention policy: set the table's properties
#: for that). A longer `ttl` is refused.
MAX_TTL_MS = 366 * 86_400_000
MAX_OWNER_CHARS = 200
_ID = re.compile(r"[0-9a-f]{32}")
_SUFFIX = ".json"


@dataclass(frozen=True, slots=True)
class Lease:
    """One lease: `id` (32 hex digits, also its file name), the pinned `version`, who holds it (`owner`),
    when it was taken and when it ends (epoch ms), and the table it was taken on (URI and `metaData.id`)."""

    id: str
    version: int
    owner: str
    created_ms: int
    expires_ms: int
    table: str = ""
    table_id: str | None = None

    def is_live(self, now_ms: int) -> bool:
        """True while `now_ms` is before the lease's end."""
        return now_ms < self.expires_ms

    @property
    def file_name(self) -> str:
        return lease_file_name(self.id)

    def to_json(self) -> dict[str, Any]:
        """The lease file's content (`parse_lease` reads it back)."""
        return {
            "format": LEASE_FORMAT,
            "id": self.id,
            "table": self.table,
            "table_id": self.table_id,
            "version": self.version,
            "owner": self.owner,
            "created": self.created_ms,
            "expires": self.expires_ms,
        }

    def to_bytes(self) -> bytes:
        return (json.dumps(self.to_json(), sort_keys=False) + "\n").encode()

    def to_dict(self, now_ms: int | None = None) -> dict[str, Any]:
        """Primitive form for results and the CLI: the file's fields with ISO times, and `live` at `now_ms`."""
        out = {k: v for k, v in self.to_json().items() if k != "format"}
        out.update(created_at=_iso(self.created_ms), expires_at=_iso(self.expires_ms))
        if now_ms is not None:
            out["live"] = self.is_live(now_ms)
        return out


def _iso(ms: int) -> str:
    return (dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(milliseconds=ms)).isoformat(timespec="seconds")


def lease_file_name(lease_id: str) -> str:
    return f"{lease_id}{_SUFFIX}"


def lease_id_of(name: str) -> str | None:
    """The lease id a file named `name` holds, or None for any other name (a store's temporary files)."""
    if not name.endswith(_SUFFIX):
        return None
    stem = name[: -len(_SUFFIX)]
    return stem if _ID.fullmatch(stem) else None


def check_lease_id(value: Any) -> str:
    """A lease id as `add_lease` makes them (32 lowercase hex digits), else `InvalidArgumentError`: an id
    is a file name, so nothing else (no `/`, no `..`) may reach the store."""
    if not isinstance(value, str) or _ID.fullmatch(value.strip().lower()) is None:
        raise InvalidArgumentError(f"lease_id must be 32 hex digits, got {value!r}", argument="lease_id")
    return value.strip().lower()


def check_owner(value: Any) -> str:
    """Who holds a lease: a non-empty single-line text of at most `MAX_OWNER_CHARS` characters."""
    if not isinstance(value, str) or not value.strip():
        raise InvalidArgumentError(f"owner must be a non-empty text, got {value!r}", argument="owner")
    owner = value.strip()
    if len(owner) > MAX_OWNER_CHARS or any(ord(c) < 32 or ord(c) == 127 for c in owner):
        raise InvalidArgumentError(
            f"owner must be one line of at most {MAX_OWNER_CHARS} characters, got {value!r}", argument="owner"
        )
    return owner


def parse_ttl_ms(value: Any, argument: str = "ttl") -> int:
    """A lease's time to live in ms (`table_properties.parse_duration_ms`): more than 0, at most `MAX_TTL_MS`."""
    return parse_duration_ms(value, argument, allow_minimum=False, maximum_ms=MAX_TTL_MS)


def make_lease(
    *, lease_id: str, version: int, owner: str, now_ms: int, ttl_ms: int, table: str, table_id: str | None
) -> Lease:
    """A new lease (arguments checked: `check_lease_id`, `check_owner`, a version >= 0, a ttl > 0)."""
    if isinstance(version, bool) or not isinstance(version, int) or version < 0:
        raise InvalidArgumentError(f"version must be an integer >= 0, got {version!r}", argument="version")
    if isinstance(ttl_ms, bool) or not isinstance(ttl_ms, int) or ttl_ms <= 0:
        raise InvalidArgumentError(f"ttl must be more than 0 ms, got {ttl_ms!r}", argument="ttl")
    return Lease(check_lease_id(lease_id), version, check_owner(owner), now_ms, now_ms + ttl_ms, table, table_id)


def parse_lease(data: bytes | str, *, name: str = "", table: str | None = None) -> Lease:
    """The lease in a file's content; `name` is the file name (its id must be the lease's). Anything
    else (not JSON, a field missing or of the wrong type, an end before the start) is a `LeaseError`
    naming the file: maintenance does not guess what a damaged lease pinned."""
    file_id = lease_id_of(name) if name else None

    def bad(why: str) -> LeaseError:
        return LeaseError(
            f"Lease file {name or '?'} is not a valid lease ({why}); VACUUM and log cleanup refuse to run "
            "while it is there: fix it, or release it (`deltalog lease release`)",
            lease_id=file_id,
            table=table,
            file=name or None,
        )

    try:
        obj = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise bad(f"not JSON: {exc}") from None
    if not isinstance(obj, Mapping):
        raise bad("not a JSON object")
    if obj.get("format") != LEASE_FORMAT:
        raise bad(f"format {obj.get('format')!r}, expected {LEASE_FORMAT!r}")
    ints = {}
    for key in ("version", "created", "expires"):
        value = obj.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise bad(f"{key} must be an integer >= 0, got {value!r}")
        ints[key] = value
    lease_id, owner, table_id = obj.get("id"), obj.get("owner"), obj.get("table_id")
    if not isinstance(lease_id, str) or _ID.fullmatch(lease_id) is None:
        raise bad(f"id {lease_id!r}")
    if file_id is not None and lease_id != file_id:
        raise bad(f"id {lease_id} differs from the file name")
    if not isinstance(owner, str) or not owner.strip():
        raise bad(f"owner {owner!r}")
    if table_id is not None and not isinstance(table_id, str):
        raise bad(f"table_id {table_id!r}")
    if ints["expires"] <= ints["created"]:
        raise bad("it expires before it was created")
    return Lease(
        lease_id, ints["version"], owner, ints["created"], ints["expires"], str(obj.get("table") or ""), table_id
    )


def for_table(leases: Iterable[Lease], table_id: str | None) -> list[Lease]:
    """The leases taken on the table whose `metaData.id` is `table_id` (a lease or a table without an id
    matches: it is honoured rather than ignored)."""
    return [le for le in leases if le.table_id is None or table_id is None or le.table_id == table_id]


def live_leases(leases: Iterable[Lease], now_ms: int, table_id: str | None = None) -> list[Lease]:
    """The leases of the table (`for_table`) live at `now_ms`, by version then id."""
    return sorted((le for le in for_table(leases, table_id) if le.is_live(now_ms)), key=lambda le: (le.version, le.id))


def pinned_versions(leases: Iterable[Lease], now_ms: int, table_id: str | None = None) -> list[int]:
    """The versions the table's live leases pin, ascending, each once."""
    return sorted({le.version for le in live_leases(leases, now_ms, table_id)})


def earliest_pinned_version(leases: Iterable[Lease], now_ms: int, table_id: str | None = None) -> int | None:
    """The oldest version a live lease pins (log cleanup keeps it and every later version readable)."""
    versions = pinned_versions(leases, now_ms, table_id)
    return versions[0] if versions else None


def location_problem(relative: str | None, partition_columns: Sequence[str] = ()) -> str | None:
    """Why a lease folder at `relative` (its path under the table root, None when outside the root) would
    not keep its leases, or None: the root itself, `_delta_log` (Delta's, and log cleanup lists it), or
    a folder VACUUM lists (no hidden component: its lease files would be deleted as untracked)."""
    if relative is None:
        return None
    rel = normalize_relative(relative)
    if not rel:
        return "it is the table root"
    if rel == "_delta_log" or rel.startswith("_delta_log/"):
        return "it is inside _delta_log"
    if not is_hidden(rel, partition_columns):
        return "VACUUM lists it and would delete its lease files: use a folder whose name starts with '_'"
    return None


def split_leased(files: Sequence[PlannedFile], leased: AbstractSet[str]) -> tuple[list[PlannedFile], list[PlannedFile]]:
    """`files` (a VACUUM plan's entries) split into those no lease needs and those one does: the entry's
    normalized relative path, or its DV alias (`protocol.vacuum.dv_alias_key`), is in `leased` (the
    normalized relative paths of the leased versions' active files and DV files)."""
    if not leased:
        return list(files), []
    keep: list[PlannedFile] = []
    vetoed: list[PlannedFile] = []
    for f in files:
        rel = normalize_relative(f.path)
        alias = dv_alias_key(rel) if DV_FILE_CORE in rel else None
        (vetoed if rel in leased or (alias is not None and alias in leased) else keep).append(f)
    return keep, vetoed


__all__ = [
    "LEASE_DIR_NAME",
    "LEASE_FORMAT",
    "MAX_TTL_MS",
    "Lease",
    "check_lease_id",
    "check_owner",
    "earliest_pinned_version",
    "for_table",
    "lease_file_name",
    "lease_id_of",
    "live_leases",
    "location_problem",
    "make_lease",
    "parse_lease",
    "parse_ttl_ms",
    "pinned_versions",
    "split_leased",
]
