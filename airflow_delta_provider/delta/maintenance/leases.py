"""Version leases: a reader pins a version so that this library's VACUUM and log cleanup never break it.

    lease = add_lease("s3://bucket/orders", version=41, ttl="6h", owner="etl.load_orders")
    ...read version 41, for as long as it takes (up to the lease's end)...
    release_lease("s3://bucket/orders", lease.id)

A lease file (`protocol.leases`) is written with `put_if_absent` under a fresh random id, in
`<table>/_delta_leases/` or a configured folder (then every VACUUM and log cleanup must be given the same
`lease_location`). VACUUM reads the leases when it plans and again when an apply starts its re-validation,
and leaves each leased version's active and DV files out of the plan (both engines); log cleanup keeps the
checkpoint and commits the earliest leased version is read from.

Guarantee: once `add_lease` returns, until the lease ends, every VACUUM apply whose re-validation starts
later and every later log cleanup keeps the version readable. It is not a lock (take the lease before
reading, not during a VACUUM), other engines do not read it, it does not lift Spark >= 4.1's time-travel
guard past `delta.deletedFileRetentionDuration` (`add_lease` warns), and clock skew between the lease taker
and maintenance shifts its end. A Spark plan without its file list cannot be filtered: its apply refuses
while a lease is live.
"""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..delta_log import DeltaLog
from ..errors import InvalidArgumentError, LeaseError, VersionNotFoundError, check_bool, check_int
from ..protocol import leases as rules
from ..protocol.leases import Lease
from ..protocol.table_properties import deleted_file_retention_ms
from ..protocol.vacuum import relative_to_root
from ..read.protected_files import active_set
from ..storage import LogStore, normalize_table_uri, store_for

log = logging.getLogger(__name__)

Clock = Callable[[], int]


@dataclass(frozen=True)
class LeaseFolder:
    """Where a table's lease files are: the store, the folder as the store names it, and its URI."""

    store: LogStore
    directory: str
    uri: str

    def path(self, lease_id: str) -> str:
        return self.store.join(self.directory, rules.lease_file_name(lease_id))


@dataclass
class LeasePins:
    """What the live leases of a table pin, read once: the leases honoured (by version; not those whose
    version the log can no longer make) and their versions' active and DV files (when asked for)."""

    leases: list[Lease] = field(default_factory=list)
    paths: set[str] = field(default_factory=set)

    @property
    def versions(self) -> list[int]:
        return sorted({le.version for le in self.leases})

    def to_dicts(self, now_ms: int) -> list[dict[str, Any]]:
        return [le.to_dict(now_ms) for le in self.leases]


def lease_folder(
    dlog: DeltaLog,
    location: str | os.PathLike[str] | None = None,
    *,
    storage_options: Mapping[str, Any] | None = None,
    partition_columns: Sequence[str] = (),
) -> LeaseFolder:
    """The table's lease folder: `<table>/_delta_leases`, or `location` (inside the table root: hidden from
    VACUUM and outside `_delta_log`, else `InvalidArgumentError`)."""
    root = dlog.table_uri
    if location is None:
        return LeaseFolder(dlog.store, dlog.store.join(root, rules.LEASE_DIR_NAME), f"{root}/{rules.LEASE_DIR_NAME}")
    if not isinstance(location, (str, os.PathLike)) or not str(location).strip():
        raise InvalidArgumentError(f"location must be a path or URI, got {location!r}", argument="location")
    uri = normalize_table_uri(str(location))
    probe = relative_to_root(f"{uri}/probe", root)  # "probe" for the root itself, "x/probe" below it
    relative = None if probe is None else probe[: -len("probe")].rstrip("/")
    problem = rules.location_problem(relative, partition_columns)
    if problem is not None:
        raise InvalidArgumentError(
            f"Lease location {location} cannot hold leases: {problem}", argument="location", table=root
        )
    store = dlog.store if relative is not None else store_for(uri, storage_options)
    return LeaseFolder(store, store.join(uri), uri)


def read_leases(folder: LeaseFolder, *, table: str | None = None) -> list[Lease]:
    """Every lease in `folder` (expired and other tables' too), by id; a damaged one is a `LeaseError`."""
    out: list[Lease] = []
    for info in folder.store.list_from(folder.directory):
        if rules.lease_id_of(info.name) is None:
            continue
        try:
            data = folder.store.read_bytes(info.path)
        except FileNotFoundError:  # released while listing
            continue
        out.append(rules.parse_lease(data, name=info.name, table=table))
    return sorted(out, key=lambda le: le.id)


def in_process_log(dlog: DeltaLog) -> DeltaLog:
    """A log whose snapshots hold their files in this process (the Spark engine's do not)."""
    if getattr(dlog.engine, "in_process", True):
        return dlog
    return DeltaLog(dlog.table_uri, store=dlog.store, clock=dlog.clock)


def lease_pins(
    dlog: DeltaLog,
    *,
    now_ms: int,
    table_id: str | None,
    location: str | os.PathLike[str] | None = None,
    storage_options: Mapping[str, Any] | None = None,
    with_paths: bool = True,
    cache: MutableMapping[int, set[str] | None] | None = None,
) -> LeasePins:
    """The table's live leases at `now_ms` and, `with_paths`, their versions' active and DV files (`cache`:
    version -> paths across one operation's calls: a version's files never change)."""
    folder = lease_folder(dlog, location, storage_options=storage_options)
    live = rules.live_leases(read_leases(folder, table=dlog.table_uri), now_ms, table_id)
    pins = LeasePins()
    if not live:
        return pins
    cache = {} if cache is None else cache
    if with_paths:
        reader = in_process_log(dlog)
        for version in sorted({le.version for le in live}):
            if version not in cache:
                try:
                    cache[version] = active_set(reader.snapshot_at(version), table_root=dlog.table_uri)
                except VersionNotFoundError as exc:
                    log.warning("Lease on version %s of %s: the log cannot make it any more (%s)", version, dlog, exc)
                    cache[version] = None
            pins.paths |= cache[version] or set()
    pins.leases = [le for le in live if not with_paths or cache.get(le.version) is not None]
    return pins


def add_lease(
    table_or_log: DeltaLog | str | os.PathLike[str],
    version: int,
    ttl: Any,
    owner: str,
    *,
    location: str | os.PathLike[str] | None = None,
    storage_options: Mapping[str, Any] | None = None,
    clock: Clock | None = None,
) -> Lease:
    """Pin `version` of the table for `ttl` on behalf of `owner`; the lease, durable when this returns.

    :param ttl: how long: `"6h"`, `"90m"`, `"2d"`, `"1h30m"`, a `timedelta`, or seconds (at most a year).
    :param owner: who holds it (a DAG and task id, a user): shown by `list_leases`.
    :param location: the lease folder (default `<table>/_delta_leases`).
    :param clock: epoch-ms clock (default: the `DeltaLog`'s).
    :raises InvalidArgumentError: a bad version, ttl, owner or location.
    :raises VersionNotFoundError: the log cannot make `version` (nothing is written).
    :raises UnsupportedStoreError: the lease folder's store cannot create a file atomically.
    """
    ttl_ms = rules.parse_ttl_ms(ttl)
    owner = rules.check_owner(owner)
    dlog = DeltaLog.of(table_or_log, storage_options, clock)
    version = check_int(version, "version", minimum=0, table=dlog.table_uri)
    snapshot = in_process_log(dlog).snapshot_at(version)  # refuses a version the log cannot make
    folder = lease_folder(dlog, location, storage_options=storage_options, partition_columns=snapshot.partition_columns)
    now_ms = (clock or dlog.clock)()
    lease = rules.make_lease(
        lease_id=uuid.uuid4().hex,
        version=version,
        owner=owner,
        now_ms=now_ms,
        ttl_ms=ttl_ms,
        table=dlog.table_uri,
        table_id=snapshot.metadata.id,
    )
    folder.store.put_if_absent(folder.path(lease.id), lease.to_bytes())
    guard_ms = snapshot.timestamp + deleted_file_retention_ms(snapshot.metadata.configuration)
    if lease.expires_ms > guard_ms:
        log.warning(
            "Lease %s on version %s of %s lasts past %s ms, when the version becomes older than "
            "delta.deletedFileRetentionDuration: Spark >= 4.1 refuses to time travel to it from then on "
            "(unless it is the latest version); this library and delta-rs still read it",
            lease.id,
            version,
            dlog.table_uri,
            guard_ms,
        )
    log.info("Leased version %s of %s to %s (lease %s, %d ms)", version, dlog.table_uri, owner, lease.id, ttl_ms)
    return lease


def list_leases(
    table_or_log: DeltaLog | str | os.PathLike[str],
    *,
    location: str | os.PathLike[str] | None = None,
    include_expired: bool = False,
    storage_options: Mapping[str, Any] | None = None,
    clock: Clock | None = None,
) -> list[Lease]:
    """The table's live leases by version (`include_expired`: every lease of this table); `LeaseError` on
    a damaged lease file."""
    check_bool(include_expired, "include_expired")
    dlog = DeltaLog.of(table_or_log, storage_options, clock)
    folder = lease_folder(dlog, location, storage_options=storage_options)
    leases = read_leases(folder, table=dlog.table_uri)
    table_id = dlog.update().metadata.id
    if include_expired:
        return sorted(_mine(leases, table_id), key=lambda le: (le.version, le.id))
    return rules.live_leases(leases, (clock or dlog.clock)(), table_id)


def release_lease(
    table_or_log: DeltaLog | str | os.PathLike[str],
    lease_id: str,
    *,
    location: str | os.PathLike[str] | None = None,
    missing_ok: bool = False,
    storage_options: Mapping[str, Any] | None = None,
) -> Lease | None:
    """Delete lease `lease_id`; the lease it was (None for a damaged file: releasing is how one is removed).

    :raises LeaseError: no such lease (unless `missing_ok`, then None).
    :raises InvalidArgumentError: `lease_id` is not a lease id.
    """
    lease_id = rules.check_lease_id(lease_id)
    check_bool(missing_ok, "missing_ok")
    dlog = DeltaLog.of(table_or_log, storage_options)
    folder = lease_folder(dlog, location, storage_options=storage_options)
    path = folder.path(lease_id)
    try:
        data = folder.store.read_bytes(path)
    except FileNotFoundError:
        if missing_ok:
            return None
        raise LeaseError(
            f"No lease {lease_id} in {folder.uri} (released already, purged after it expired, or another table's)",
            lease_id=lease_id,
            table=dlog.table_uri,
        ) from None
    try:
        lease: Lease | None = rules.parse_lease(data, name=rules.lease_file_name(lease_id), table=dlog.table_uri)
    except LeaseError as exc:
        log.warning("Releasing lease file %s, which is not a valid lease: %s", lease_id, exc)
        lease = None
    folder.store.delete_many([path])
    log.info("Released lease %s of %s", lease_id, dlog.table_uri)
    return lease


def _mine(leases: list[Lease], table_id: str) -> list[Lease]:
    return [le for le in leases if le.table_id is None or le.table_id == table_id]


def purge_expired_leases(
    table_or_log: DeltaLog | str | os.PathLike[str],
    *,
    location: str | os.PathLike[str] | None = None,
    storage_options: Mapping[str, Any] | None = None,
    clock: Clock | None = None,
) -> list[Lease]:
    """Delete the lease files of this table whose lease has ended; the leases deleted."""
    dlog = DeltaLog.of(table_or_log, storage_options, clock)
    folder = lease_folder(dlog, location, storage_options=storage_options)
    now_ms = (clock or dlog.clock)()
    table_id = dlog.update().metadata.id
    done = [le for le in _mine(read_leases(folder, table=dlog.table_uri), table_id) if not le.is_live(now_ms)]
    if done:
        folder.store.delete_many([folder.path(le.id) for le in done])
    return done
