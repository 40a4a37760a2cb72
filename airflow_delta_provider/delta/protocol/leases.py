"""Version leases: a reader pins a table version so that this library's maintenance never breaks it.

Pure rules; `maintenance.leases` does the I/O. A lease is one JSON object in its own file `<id>.json`, by
default in `<table>/_delta_leases/`:

    {"format": "delta-lease/1", "id": "<32 hex digits>", "table": "<table URI>",
     "table_id": "<metaData.id>", "version": 12, "owner": "etl.load_orders",
     "created": <epoch ms>, "expires": <epoch ms>}

Live while `now < expires`, for the table whose `metaData.id` is `table_id` (one recreated at the location
is not pinned). It pins its version's active files and their DV files against VACUUM (PROTOCOL.md "Deletion
Vectors") and the checkpoint and commits the version is read from against log cleanup (PROTOCOL.md "Metadata
Cleanup"). The folder must be hidden from VACUUM (`location_problem`), else its files would be deleted as
untracked. Other engines (Spark, delta-rs) do not read leases.
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
from .table_properties import parse_duration_ms
from .vacuum import PlannedFile, is_hidden, normalize_relative, unprotected

#: The default lease folder, directly under the table root (hidden: a leading `_`).
LEASE_DIR_NAME = "_delta_leases"
LEASE_FORMAT = "delta-lease/1"
#: The longest lease: a lease is a pin with an end, not a retention policy (the table's properties are).
MAX_TTL_MS = 366 * 86_400_000
MAX_OWNER_CHARS = 200
_ID = re.compile(r"[0-9a-f]{32}")
_SUFFIX = ".json"


@dataclass(frozen=True, slots=True)
class Lease:
    """One lease: `id` (32 hex digits, its file name), the pinned `version`, its `owner`, when it was taken
    and ends (epoch ms), and the table it was taken on (URI and `metaData.id`)."""

    id: str
    version: int
    owner: str
    created_ms: int
    expires_ms: int
    table: str = ""
    table_id: str | None = None

    def is_live(self, now_ms: int) -> bool:
        return now_ms < self.expires_ms

    @property
    def file_name(self) -> str:
        return lease_file_name(self.id)

    def to_json(self) -> dict[str, Any]:
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
        out.update(created_at=iso_seconds(self.created_ms), expires_at=iso_seconds(self.expires_ms))
        if now_ms is not None:
            out["live"] = self.is_live(now_ms)
        return out


def iso_seconds(ms: int) -> str:
    """Epoch ms as ISO 8601 UTC to the second (lease and quarantine files)."""
    return (dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(milliseconds=ms)).isoformat(timespec="seconds")


def lease_file_name(lease_id: str) -> str:
    return f"{lease_id}{_SUFFIX}"


def lease_id_of(name: str) -> str | None:
    """The lease id a file named `name` holds, or None (a store's temporary files)."""
    if not name.endswith(_SUFFIX):
        return None
    stem = name[: -len(_SUFFIX)]
    return stem if _ID.fullmatch(stem) else None


def check_lease_id(value: Any) -> str:
    """A lease id (32 hex digits), else `InvalidArgumentError`: an id is a file name (no `/` nor `..`)."""
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
    """A new lease, its arguments checked."""
    if isinstance(version, bool) or not isinstance(version, int) or version < 0:
        raise InvalidArgumentError(f"version must be an integer >= 0, got {version!r}", argument="version")
    if isinstance(ttl_ms, bool) or not isinstance(ttl_ms, int) or ttl_ms <= 0:
        raise InvalidArgumentError(f"ttl must be more than 0 ms, got {ttl_ms!r}", argument="ttl")
    return Lease(check_lease_id(lease_id), version, check_owner(owner), now_ms, now_ms + ttl_ms, table, table_id)


def json_record(data: bytes | str, fmt: str) -> Mapping[str, Any]:
    """The JSON object of a lease or quarantine file of format `fmt`; `ValueError` saying what is wrong."""
    try:
        obj = json.loads(data)
    except ValueError as exc:  # UnicodeDecodeError too
        raise ValueError(f"not JSON: {exc}") from None
    if not isinstance(obj, Mapping):
        raise ValueError("not a JSON object")
    if obj.get("format") != fmt:
        raise ValueError(f"format {obj.get('format')!r}, expected {fmt!r}")
    return obj


def non_negative(obj: Mapping[str, Any], key: str, *, optional: bool = False) -> int | None:
    """`obj[key]`, an integer >= 0 (None when `optional` and absent), else `ValueError`."""
    value = obj.get(key)
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{key} must be an integer >= 0, got {value!r}")
    return value


def parse_lease(data: bytes | str, *, name: str = "", table: str | None = None) -> Lease:
    """The lease in a file named `name`; anything else is a `LeaseError` naming the file (maintenance does
    not guess what a damaged lease pinned)."""
    file_id = lease_id_of(name) if name else None
    try:
        obj = json_record(data, LEASE_FORMAT)
        version, created, expires = (non_negative(obj, key) or 0 for key in ("version", "created", "expires"))
        lease_id, owner, table_id = obj.get("id"), obj.get("owner"), obj.get("table_id")
        if not isinstance(lease_id, str) or _ID.fullmatch(lease_id) is None:
            raise ValueError(f"id {lease_id!r}")
        if file_id is not None and lease_id != file_id:
            raise ValueError(f"id {lease_id} differs from the file name")
        if not isinstance(owner, str) or not owner.strip():
            raise ValueError(f"owner {owner!r}")
        if table_id is not None and not isinstance(table_id, str):
            raise ValueError(f"table_id {table_id!r}")
        if expires <= created:
            raise ValueError("it expires before it was created")
    except ValueError as exc:
        raise LeaseError(
            f"Lease file {name or '?'} is not a valid lease ({exc}); VACUUM and log cleanup refuse to run "
            "while it is there: fix it, or release it (`deltalog lease release`)",
            lease_id=file_id,
            table=table,
            file=name or None,
        ) from None
    return Lease(lease_id, version, owner, created, expires, str(obj.get("table") or ""), table_id)


def for_table(leases: Iterable[Lease], table_id: str | None) -> list[Lease]:
    """The leases of the table whose `metaData.id` is `table_id` (without an id on either side: honoured)."""
    return [le for le in leases if le.table_id is None or table_id is None or le.table_id == table_id]


def live_leases(leases: Iterable[Lease], now_ms: int, table_id: str | None = None) -> list[Lease]:
    """The leases of the table (`for_table`) live at `now_ms`, by version then id."""
    return sorted((le for le in for_table(leases, table_id) if le.is_live(now_ms)), key=lambda le: (le.version, le.id))


def pinned_versions(leases: Iterable[Lease], now_ms: int, table_id: str | None = None) -> list[int]:
    """The versions the table's live leases pin, ascending, each once."""
    return sorted({le.version for le in live_leases(leases, now_ms, table_id)})


def earliest_pinned_version(leases: Iterable[Lease], now_ms: int, table_id: str | None = None) -> int | None:
    """The oldest version a live lease pins (log cleanup keeps it readable)."""
    versions = pinned_versions(leases, now_ms, table_id)
    return versions[0] if versions else None


def location_problem(relative: str | None, partition_columns: Sequence[str] = ()) -> str | None:
    """Why a lease folder at `relative` (under the table root; None: outside it) would lose its leases, or None."""
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
    """VACUUM plan entries split into those no lease needs and those whose normalized path (or DV alias) is
    in `leased` (the leased versions' active and DV files)."""
    keep: list[PlannedFile] = []
    vetoed: list[PlannedFile] = []
    for f in files:
        (keep if not leased or unprotected(normalize_relative(f.path), leased) else vetoed).append(f)
    return keep, vetoed
