"""Version leases: a reader pins a version so that this library's VACUUM and log cleanup never break it.

    lease = add_lease("s3://bucket/orders", version=41, ttl="6h", owner="etl.load_orders")
    ...read version 41, for as long as it takes (up to the lease's end)...
    release_lease("s3://bucket/orders", lease.id)

A lease is a small JSON file (`protocol.leases` has its fields and rules) written with the store's
`put_if_absent` under a fresh random id, in `<table>/_delta_leases/` (hidden: VACUUM never lists it) or
in a folder the caller configures (`location=`; then every VACUUM and log cleanup of the table must be
given the same `lease_location`). `list_leases` reads them, `release_lease` deletes one,
`purge_expired_leases` deletes those past their end. An expired lease pins nothing.

How maintenance honours them:

* **VACUUM** (`maintenance.vacuum`): reads the leases when it plans, and again when an apply starts its
  re-validation. Each live leased version's snapshot is loaded (`DeltaLog.snapshot_at(version=...)`, on
  the driver, in this process) and its active files and their deletion-vector files are taken out of the
  plan before the engine re-validates and deletes (`protocol.leases.split_leased`), so the local and the
  Spark executor both honour them; the plan and the result name the leases honoured (`leases`: id,
  version, owner, ...) and count the files they kept (`lease_kept_files`, `lease_kept_bytes`; at apply,
  dropped entries with reason `leased`).
* **Log cleanup** (`maintenance.log_cleanup`): the earliest live leased version bounds the checkpoint it
  keeps: that checkpoint and every later commit stay, so the version can still be made from the log.

The guarantee, precisely. Once `add_lease` has returned, until the lease expires or is released, the
leased version stays readable through this library's maintenance (either engine): every VACUUM apply
whose re-validation starts after `add_lease` returned keeps the version's data and DV files, whatever
plan it applies (a plan made before the lease existed included); every log cleanup that starts after it
keeps the checkpoint and commits the version is made from. The lease read is the first step of an
apply's re-validation, after the apply loaded the table's latest snapshot.

What it is not:

* Not a lock. A VACUUM apply that read the leases before the lease file existed may still delete the
  version's files (it is already re-validating or deleting); so take the lease before reading the
  version, not during a VACUUM. Readers then fail loudly (a missing file), never read wrong data.
* Not seen by other engines: Spark's and delta-rs's VACUUM and log cleanup do not read lease files.
  Nor does it lift Spark >= 4.1's time-travel guard (a version older than
  `delta.deletedFileRetentionDuration` is refused by Spark readers; this library and delta-rs read it):
  `add_lease` logs a warning when a lease outlives that window.
* Not a check of the data: `add_lease` refuses a version the log cannot make (log cleanup removed its
  commits), but does not look for its data files (an earlier VACUUM may already have removed files of a
  version older than the retention).
* Time is the maintenance process's clock against the end the lease taker's clock wrote: clock skew
  between them lengthens or shortens a lease by the skew. A lease whose holder still reads after its end
  protects nothing.
* A Spark VACUUM plan too big to carry its file list (`files_inline` false) cannot be filtered here:
  its apply refuses, deleting nothing, while a live lease exists (plan with the local engine, or with a
  plan small enough to carry its files).

Better than delta-rs's `vacuum(keep_versions=[...])`: a lease expires on its own (a forgotten pin does
not keep files forever), names its owner, protects the DV files and the log too, and lives in storage,
so every process and scheduler running maintenance on the table sees it.
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
from ..protocol.leases import (
    LEASE_DIR_NAME,
    Lease,
    check_lease_id,
    check_owner,
    lease_file_name,
    lease_id_of,
    live_leases,
    location_problem,
    make_lease,
    parse_lease,
    parse_ttl_ms,
)
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
        return self.store.join(self.directory, lease_file_name(lease_id))


@dataclass
class LeasePins:
    """What the live leases of a table pin, read once: the leases honoured (by version), the normalized
    relative paths of their versions' active and DV files (VACUUM's; empty when not asked for), and the
    live leases whose version the log can no longer make (they pin nothing that can be read)."""

    leases: list[Lease] = field(default_factory=list)
    paths: set[str] = field(default_factory=set)
    unreadable: list[Lease] = field(default_factory=list)

    @property
    def versions(self) -> list[int]:
        return sorted({le.version for le in self.leases})

    @property
    def earliest_version(self) -> int | None:
        versions = self.versions
        return versions[0] if versions else None

    def to_dicts(self, now_ms: int) -> list[dict[str, Any]]:
        """The honoured leases as results name them (`Lease.to_dict`)."""
        return [le.to_dict(now_ms) for le in self.leases]


def lease_folder(
    dlog: DeltaLog,
    location: str | os.PathLike[str] | None = None,
    *,
    storage_options: Mapping[str, Any] | None = None,
    partition_columns: Sequence[str] = (),
) -> LeaseFolder:
    """The table's lease folder: `<table>/_delta_leases` (through the table's store), or `location`.
    A `location` inside the table root must be hidden from VACUUM and outside `_delta_log`
    (`protocol.leases.location_problem`), else `InvalidArgumentError`."""
    root = dlog.table_uri
    if location is None:
        return LeaseFolder(dlog.store, dlog.store.join(root, LEASE_DIR_NAME), f"{root}/{LEASE_DIR_NAME}")
    if not isinstance(location, (str, os.PathLike)) or not str(location).strip():
        raise InvalidArgumentError(f"location must be a path or URI, got {location!r}", argument="location")
    uri = normalize_table_uri(str(location))
    probe = relative_to_root(f"{uri}/probe", root)  # "probe" for the root itself, "x/probe" below it
    relative = None if probe is None else probe[: -len("probe")].rstrip("/")
    problem = location_problem(relative, partition_columns)
    if problem is not None:
        raise InvalidArgumentError(
            f"Lease location {location} cannot hold leases: {problem}", argument="location", table=root
        )
    store = dlog.store if relative is not None else store_for(uri, storage_options)
    return LeaseFolder(store, store.join(uri), uri)


def read_leases(folder: LeaseFolder, *, table: str | None = None) -> list[Lease]:
    """Every lease file in `folder` (expired ones and other tables' included), by id. A file that is not
    a valid lease is a `LeaseError` naming it (`protocol.leases.parse_lease`); other names are skipped."""
    out: list[Lease] = []
    for info in folder.store.list_from(folder.directory):
        if lease_id_of(info.name) is None:
            continue
        try:
            data = folder.store.read_bytes(info.path)
        except FileNotFoundError:  # released while listing
            continue
        out.append(parse_lease(data, name=info.name, table=table))
    return sorted(out, key=lambda le: le.id)


def in_process_log(dlog: DeltaLog) -> DeltaLog:
    """A log whose snapshots hold their files in this process (the Spark engine's do not): leased
    versions (and a quarantine's resume) are loaded on the driver."""
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
    """Read the table's leases now and what the live ones pin at `now_ms` (`table_id`: the table's
    `metaData.id`; another table's leases are left out). With `with_paths`, each leased version's
    snapshot is loaded and its active and DV files collected (`cache`: version -> paths, kept across the
    calls of one operation: a version's files never change). A malformed lease file is a `LeaseError`."""
    folder = lease_folder(dlog, location, storage_options=storage_options)
    live = live_leases(read_leases(folder, table=dlog.table_uri), now_ms, table_id)
    pins = LeasePins()
    if not live:
        return pins
    found: dict[int, set[str] | None] = {}
    if with_paths:
        reader = in_process_log(dlog)
        for version in sorted({le.version for le in live}):
            if cache is not None and version in cache:
                paths = cache[version]
            else:
                try:
                    paths = active_set(reader.snapshot_at(version), table_root=dlog.table_uri)
                except VersionNotFoundError as exc:
                    log.warning("Lease on version %s of %s: the log cannot make it any more (%s)", version, dlog, exc)
                    paths = None
                if cache is not None:
                    cache[version] = paths
            found[version] = paths
            if paths:
                pins.paths |= paths
    for le in live:
        (pins.unreadable if with_paths and found.get(le.version) is None else pins.leases).append(le)
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

    :param ttl: how long: `"6h"`, `"90m"`, `"2d"`, `"1h30m"`, a `timedelta`, or seconds
        (`protocol.leases.parse_ttl_ms`; at most `MAX_TTL_MS`).
    :param owner: who holds it (a DAG and task id, a user): shown by `list_leases`.
    :param location: the lease folder (default `<table>/_delta_leases`).
    :param clock: epoch-ms clock (default: the `DeltaLog`'s).
    :raises InvalidArgumentError: a bad version, ttl, owner or location.
    :raises VersionNotFoundError: the log cannot make `version` (nothing is written).
    :raises UnsupportedStoreError: the lease folder's store cannot create a file atomically.
    """
    ttl_ms = parse_ttl_ms(ttl)
    owner = check_owner(owner)
    dlog = DeltaLog.of(table_or_log, storage_options, clock)
    version = check_int(version, "version", minimum=0, table=dlog.table_uri)
    snapshot = in_process_log(dlog).snapshot_at(version)  # refuses a version the log cannot make
    folder = lease_folder(dlog, location, storage_options=storage_options, partition_columns=snapshot.partition_columns)
    now_ms = (clock or dlog.clock)()
    lease = make_lease(
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
    """The table's leases (live ones, by version; with `include_expired`, every lease file in the folder
    whose table is this one). A malformed lease file is a `LeaseError` naming it."""
    check_bool(include_expired, "include_expired")
    dlog = DeltaLog.of(table_or_log, storage_options, clock)
    folder = lease_folder(dlog, location, storage_options=storage_options)
    leases = read_leases(folder, table=dlog.table_uri)
    table_id = dlog.update().metadata.id
    if include_expired:
        mine = [le for le in leases if le.table_id is None or le.table_id == table_id]
        return sorted(mine, key=lambda le: (le.version, le.id))
    return live_leases(leases, (clock or dlog.clock)(), table_id)


def release_lease(
    table_or_log: DeltaLog | str | os.PathLike[str],
    lease_id: str,
    *,
    location: str | os.PathLike[str] | None = None,
    missing_ok: bool = False,
    storage_options: Mapping[str, Any] | None = None,
) -> Lease | None:
    """Delete lease `lease_id`; the lease it was (None when the file was not a valid lease: releasing is
    how a damaged lease file is removed). From then on the next VACUUM may delete the version's files.

    :raises LeaseError: no such lease (unless `missing_ok`, then None).
    :raises InvalidArgumentError: `lease_id` is not a lease id.
    """
    lease_id = check_lease_id(lease_id)
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
        lease: Lease | None = parse_lease(data, name=lease_file_name(lease_id), table=dlog.table_uri)
    except LeaseError as exc:
        log.warning("Releasing lease file %s, which is not a valid lease: %s", lease_id, exc)
        lease = None
    folder.store.delete_many([path])
    log.info("Released lease %s of %s", lease_id, dlog.table_uri)
    return lease


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
    done = [
        le
        for le in read_leases(folder, table=dlog.table_uri)
        if not le.is_live(now_ms) and (le.table_id is None or le.table_id == table_id)
    ]
    if done:
        folder.store.delete_many([folder.path(le.id) for le in done])
    return done


__all__ = [
    "LeaseFolder",
    "LeasePins",
    "add_lease",
    "lease_folder",
    "lease_pins",
    "list_leases",
    "purge_expired_leases",
    "read_leases",
    "release_lease",
]
