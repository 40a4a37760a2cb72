"""Reversible VACUUM: quarantine the files VACUUM would delete, undo it, resume it, purge old quarantines.

    result = vacuum(table, dry_run=False, quarantine=True)        # moved, not deleted
    undo_quarantine(table, result.quarantine_id)                   # every file back: time travel works again
    purge_quarantines(table, older_than="7d")                      # delete quarantines past that age

`vacuum(..., quarantine=True)` (`maintenance.vacuum`) plans and re-validates as always, then moves each
file it would delete to `<table>/_delta_quarantine/<id>/files/<its path>` (`protocol.quarantine` has the
layout, the manifest and the markers) with the store's `move`: one atomic rename on the local store and on
HDFS, a server-side copy and a delete on S3, GCS and Azure (adlfs moves by copy and delete even on ADLS
gen2); the plan and the result state that cost (`quarantine`: method, files, bytes, bytes copied, storage
calls). The folder starts with `_`, so no VACUUM (this library's, Spark's, delta-rs's) lists, plans or
deletes it. The local engine only: the Spark engine's VACUUM executor has no `move`, and `quarantine=True`
on it is refused (`OperationNotAllowedError`) before anything is planned.

Crash safety (kill -9 at any point). Every run writes before it moves, and marks after:

1. VACUUM writes the manifest first (`put_if_absent`: fresh id, immutable), listing every planned move
   with its size and mtime; it then moves file by file; then writes `quarantined.json`. A file is moved
   by one rename (at exactly one of its two paths at every instant) or by a copy then a delete (the copy
   appears whole or not at all, so at worst both copies exist, never a partial one). Killed in between,
   the folder holds a manifest and no completion marker: state `moving`, direction forward.
2. `resume_quarantine` (and every later `vacuum(quarantine=True)`, which first resumes the table's
   `moving` quarantines) settles each file from what storage holds at its two paths
   (`protocol.quarantine.forward_step`): only at its path and unchanged (size, mtime) and still not
   needed by the latest snapshot or a live lease: moved; only quarantined: done; both (copy+delete cut
   off): the original is deleted; anything else is reported and left alone. Then `quarantined.json`.
3. `undo_quarantine` checks every file first (`undo_step`) and refuses, naming them, when something
   else now sits at a path a file must go back to (nothing moved). It then writes `undo.json` (from here
   the direction is back, for any rerun or resume), moves each file back, deletes the quarantined copy
   where both exist after an interrupted copy+delete, and writes `restored.json`. Killed in between,
   a rerun of the same undo continues: files already back are skipped, the rest are moved.
4. `purge_quarantines` writes `purge.json` (undo refuses from then on), deletes the files, the markers
   and the manifest last; a rerun finishes a killed purge. Unfinished quarantines (`moving`, `restoring`)
   are never purged.

So at every instant each file of a quarantine is at its path or in the quarantine, or (copy+delete,
cut off) at both with the markers saying which way to finish; a rerun settles it. Without power loss
guarantees on renames beyond the filesystem's own (no fsync per rename): after a power cut a file is
still at one of its paths (a rename is atomic on journaled filesystems), and the runs above settle the
rest from what storage holds, never from the markers alone.

What it is not: concurrent runs on one quarantine are safe per file (a rename never moves one file
twice; two copies of one object carry the same bytes) but their counts may overlap; an undo of a
quarantine whose VACUUM is still running races with it (undo a killed one, or a finished one). After an
undo the files are again what VACUUM would delete: take a version lease (`maintenance.leases`) or raise
the retention before the next VACUUM. A copy keeps the bytes but not the modification time (object
stores set it to the copy's time), which only makes a restored file look newer to VACUUM.
"""

from __future__ import annotations

import logging
import os
import secrets
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..delta_log import DeltaLog
from ..errors import QuarantineError, UnsupportedStoreError, check_bool
from ..protocol.quarantine import (
    CHANGED,
    CONFLICT,
    DONE,
    FILES_DIR,
    FINISH,
    MANIFEST_NAME,
    MISSING,
    MOVE,
    MOVING,
    PURGE_MARKER,
    PURGING,
    QUARANTINE_DIR_NAME,
    QUARANTINED,
    QUARANTINED_MARKER,
    RESTORED,
    RESTORED_MARKER,
    UNDO_MARKER,
    UNFINISHED,
    Manifest,
    QuarantinedFile,
    Settled,
    check_quarantine_id,
    files_dir,
    forward_step,
    is_quarantine_id,
    marker_bytes,
    new_quarantine_id,
    parse_age_ms,
    parse_manifest,
    purge_skip,
    quarantine_dir,
    quarantined_path,
    state_of,
    undo_step,
)
from ..protocol.vacuum import VacuumPlan, deletable, normalize_relative, partition_of
from ..read.protected_files import partition_columns, protected_set
from ..snapshot import Snapshot
from ..storage import LogStore
from ..storage.batch import remove_empty_dirs, stat_entries
from .leases import in_process_log, lease_pins

log = logging.getLogger(__name__)

Clock = Callable[[], int]
#: Paths a refusal names at most (the error's `paths`; the message names the first few).
_NAMED = 100
_DELETE_BATCH = 1000


@dataclass(frozen=True)
class QuarantineInfo:
    """A quarantine as stored: its manifest, state (`protocol.quarantine.state_of`) and folder URI."""

    manifest: Manifest
    state: str
    location: str

    @property
    def id(self) -> str:
        return self.manifest.id

    def to_dict(self) -> dict[str, Any]:
        return {**self.manifest.summary(), "state": self.state, "location": self.location}


@dataclass
class QuarantineRun:
    """What a resume or an undo did: the quarantine, its state afterwards, and each file's outcome."""

    quarantine_id: str
    action: str
    state: str
    table: str
    location: str
    num_files: int
    settled: Settled = field(default_factory=Settled)
    manifest: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "quarantine_id": self.quarantine_id,
            "location": self.location,
            "action": self.action,
            "state": self.state,
            "num_files": self.num_files,
            **self.settled.counts(),
            "manifest": dict(self.manifest),
        }


@dataclass
class PurgeResult:
    """The quarantines a purge deleted (or would, in a dry run) and those it left, with why."""

    table: str
    older_than_ms: int
    now_ms: int
    dry_run: bool
    purged: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "older_than_ms": self.older_than_ms,
            "now_ms": self.now_ms,
            "dry_run": self.dry_run,
            "purged": list(self.purged),
            "num_purged": len(self.purged),
            "deleted_files": sum(p["files"] for p in self.purged),
            "deleted_bytes": sum(p["bytes"] for p in self.purged),
            "skipped": list(self.skipped),
        }


# -- paths and reading -------------------------------------------------------------------------------------


def _path(dlog: DeltaLog, relative: str) -> str:
    """`relative` (to the table root) as the table's store names it."""
    store = dlog.store
    return store.join(store.join(dlog.table_uri).rstrip("/"), *[p for p in relative.split("/") if p])


def location(dlog: DeltaLog, quarantine_id: str) -> str:
    """The URI of a quarantine's folder."""
    return f"{dlog.table_uri}/{quarantine_dir(quarantine_id)}"


def _create(store: LogStore, path: str, data: bytes) -> None:
    """Create a manifest or marker: `put_if_absent` (an existing marker was written by an earlier or
    concurrent run: kept); a plain `put` on a store without an atomic create (names are unique per
    quarantine, contents per run)."""
    try:
        store.put_if_absent(path, data)
    except FileExistsError:
        pass
    except UnsupportedStoreError:
        if getattr(store, "read_only", False):
            raise
        store.put(path, data)


def _mark(dlog: DeltaLog, quarantine_id: str, kind: str, now_ms: int, **counts: Any) -> None:
    _create(
        dlog.store,
        _path(dlog, f"{quarantine_dir(quarantine_id)}/{kind}"),
        marker_bytes(kind, quarantine_id, now_ms, **counts),
    )


def quarantine_ids(dlog: DeltaLog) -> list[str]:
    """The ids of the table's quarantine folders, oldest first (one listing of `_delta_quarantine`)."""
    entries = dlog.store.list_level(_path(dlog, QUARANTINE_DIR_NAME))
    return sorted(e.name for e in entries if e.is_dir and is_quarantine_id(e.name))


def read_quarantine(dlog: DeltaLog, quarantine_id: str) -> QuarantineInfo:
    """The quarantine `quarantine_id` of the table (one listing of its folder, its manifest read).

    :raises QuarantineError: no such quarantine (no manifest), or a manifest that is not valid."""
    quarantine_id = check_quarantine_id(quarantine_id)
    names = {info.name for info in dlog.store.list_from(_path(dlog, quarantine_dir(quarantine_id)))}
    where = location(dlog, quarantine_id)
    if MANIFEST_NAME not in names:
        raise QuarantineError(
            f"No quarantine {quarantine_id} at {where} (purged, or never made: the id is in the VACUUM result)",
            quarantine_id=quarantine_id,
            table=dlog.table_uri,
        )
    data = dlog.store.read_bytes(_path(dlog, f"{quarantine_dir(quarantine_id)}/{MANIFEST_NAME}"))
    manifest = parse_manifest(data, quarantine_id=quarantine_id, table=dlog.table_uri)
    return QuarantineInfo(manifest, state_of(names), where)


def list_quarantines(
    table_or_log: DeltaLog | str | os.PathLike[str], *, storage_options: Mapping[str, Any] | None = None
) -> list[QuarantineInfo]:
    """The table's quarantines, oldest first (a folder without a valid manifest is logged and left out)."""
    dlog = DeltaLog.of(table_or_log, storage_options)
    out = []
    for quarantine_id in quarantine_ids(dlog):
        try:
            out.append(read_quarantine(dlog, quarantine_id))
        except QuarantineError as exc:
            log.warning("Quarantine folder %s of %s: %s", quarantine_id, dlog.table_uri, exc)
    return out


def _check_table(manifest: Manifest, snapshot: Snapshot, dlog: DeltaLog) -> None:
    if manifest.table_id is not None and snapshot.metadata.id != manifest.table_id:
        raise QuarantineError(
            f"Quarantine {manifest.id} was made for table id {manifest.table_id}, but the table at {dlog.table_uri} "
            f"has id {snapshot.metadata.id} (deleted and created again): nothing was moved; its files are still "
            f"at {location(dlog, manifest.id)}",
            quarantine_id=manifest.id,
            table=dlog.table_uri,
        )


def _stat(dlog: DeltaLog, manifest: Manifest) -> tuple[list[Any], list[Any]]:
    """What storage holds at each file's path and at its quarantine path."""
    paths = [f.path for f in manifest.files]
    original = stat_entries(dlog.store, dlog.table_uri, paths)
    quarantined = stat_entries(dlog.store, dlog.table_uri, [quarantined_path(manifest.id, p) for p in paths])
    return original, quarantined


def _conflict_error(manifest: Manifest, conflicts: Sequence[str], what: str, dlog: DeltaLog) -> QuarantineError:
    shown = ", ".join(conflicts[:5]) + (f" and {len(conflicts) - 5} more" if len(conflicts) > 5 else "")
    return QuarantineError(
        f"Quarantine {manifest.id}: {what} for {len(conflicts)} files ({shown}): nothing was moved over them. "
        "Move or delete what is there, then run it again",
        quarantine_id=manifest.id,
        paths=list(conflicts[:_NAMED]),
        table=dlog.table_uri,
        file=conflicts[0],
    )


# -- forward: VACUUM's side ----------------------------------------------------------------------------------


def start_quarantine(
    dlog: DeltaLog,
    snapshot: Snapshot,
    plan: VacuumPlan,
    *,
    now_ms: int,
    audit_version: int | None = None,
    quarantine_id: str | None = None,
) -> Manifest:
    """Write the manifest of a new quarantine of `plan`'s files (re-validated, about to be moved): step 1
    of the module doc. Nothing is moved yet."""
    manifest = Manifest(
        id=quarantine_id or new_quarantine_id(now_ms, secrets.token_hex(4)),
        table=dlog.table_uri,
        table_id=snapshot.metadata.id,
        version=snapshot.version,
        created_ms=now_ms,
        method=getattr(dlog.store, "move_method", "copy+delete"),
        files=tuple(QuarantinedFile(f.path, f.size, f.modification_time) for f in plan.files),
        mode=plan.mode,
        cutoff_ms=plan.cutoff_ms,
        retention_ms=plan.retention_ms,
        audit_version=audit_version,
    )
    path = _path(dlog, f"{quarantine_dir(manifest.id)}/{MANIFEST_NAME}")
    try:
        dlog.store.put_if_absent(path, manifest.to_bytes())
    except UnsupportedStoreError:
        if getattr(dlog.store, "read_only", False):
            raise
        dlog.store.put(path, manifest.to_bytes())  # a fresh random id: no other writer of this name
    return manifest


def finish_quarantine(dlog: DeltaLog, manifest: Manifest, *, now_ms: int, moved: int, moved_bytes: int) -> None:
    """Write the forward completion marker (`quarantined.json`): every move of `manifest` done."""
    _mark(dlog, manifest.id, QUARANTINED_MARKER, now_ms, moved=moved, moved_bytes=moved_bytes)


def resume_quarantine(
    table_or_log: DeltaLog | str | os.PathLike[str],
    quarantine_id: str,
    *,
    storage_options: Mapping[str, Any] | None = None,
    clock: Clock | None = None,
) -> QuarantineRun:
    """Finish a quarantine whose VACUUM was cut off (state `moving`; any other state: nothing to do), as
    step 2 of the module doc says. Files the latest snapshot or a live version lease needs again, or
    changed since, stay where they are (`kept`).

    :raises QuarantineError: no such quarantine, another table's, or something unexpected at both paths
        of a file (`paths`; nothing moved)."""
    dlog = DeltaLog.of(table_or_log, storage_options, clock)
    info = read_quarantine(dlog, quarantine_id)
    now_ms = (clock or dlog.clock)()
    if info.state != MOVING:
        return _run(dlog, info, "resume", info.state, Settled())
    return _resume(dlog, info, now_ms)


def resume_unfinished(
    dlog: DeltaLog, *, now_ms: int, lease_location: str | os.PathLike[str] | None = None
) -> list[dict[str, Any]]:
    """Resume every `moving` quarantine of the table (`vacuum(quarantine=True)` does this first); what
    each did (`QuarantineRun.to_dict`), or its error: an unfinished quarantine that cannot be resumed is
    logged and left for `resume_quarantine` or `undo_quarantine`, it does not stop the VACUUM."""
    out = []
    for quarantine_id in quarantine_ids(dlog):
        try:
            info = read_quarantine(dlog, quarantine_id)
            if info.state == MOVING:
                out.append(_resume(dlog, info, now_ms, lease_location).to_dict())
        except QuarantineError as exc:
            log.warning("VACUUM of %s: unfinished quarantine %s left as it is: %s", dlog.table_uri, quarantine_id, exc)
            out.append({"quarantine_id": quarantine_id, "error": exc.to_dict()})
    return out


def _resume(
    dlog: DeltaLog, info: QuarantineInfo, now_ms: int, lease_location: str | os.PathLike[str] | None = None
) -> QuarantineRun:
    manifest = info.manifest
    snapshot = in_process_log(dlog).update()
    _check_table(manifest, snapshot, dlog)
    protected = protected_set(snapshot, cutoff_ms=manifest.cutoff_ms, table_root=dlog.table_uri)
    protected |= lease_pins(dlog, now_ms=now_ms, table_id=snapshot.metadata.id, location=lease_location).paths
    columns = partition_columns(snapshot)
    original, quarantined = _stat(dlog, manifest)
    steps = []
    for f, here, there in zip(manifest.files, original, quarantined, strict=True):
        step = forward_step(f, here, there, method=manifest.method)
        if step == MOVE and not deletable(normalize_relative(f.path), protected, columns):
            step = CHANGED  # needed again: left where it is
        steps.append(step)
    conflicts = [f.path for f, step in zip(manifest.files, steps, strict=True) if step == CONFLICT]
    if conflicts:
        raise _conflict_error(manifest, conflicts, "files are at both their path and in the quarantine", dlog)
    settled = _settle(dlog, manifest, steps, back=False)
    if settled.conflicts:
        raise _conflict_error(manifest, settled.conflicts, "something appeared at the quarantine path", dlog)
    _mark(dlog, manifest.id, QUARANTINED_MARKER, now_ms, resumed=True, **settled.counts())
    remove_empty_dirs(dlog.store, dlog.table_uri, {partition_of(f.path) for f in manifest.files})
    log.info(
        "Resumed quarantine %s of %s: %d moved, %d finished, %d kept",
        manifest.id,
        dlog.table_uri,
        len(settled.moved),
        len(settled.finished),
        len(settled.kept),
    )
    return _run(dlog, info, "resume", QUARANTINED, settled)


def _settle(dlog: DeltaLog, manifest: Manifest, steps: Sequence[str], *, back: bool) -> Settled:
    """Carry out each file's step: moves (forward into the quarantine, or `back`), deletes of the copy left
    behind (`FINISH`), and the outcomes of the others."""
    store = dlog.store
    out = Settled()
    for f, step in zip(manifest.files, steps, strict=True):
        here = _path(dlog, f.path)
        there = _path(dlog, quarantined_path(manifest.id, f.path))
        if step == MOVE:
            try:
                store.move(there, here) if back else store.move(here, there)
            except FileNotFoundError:  # moved or removed by a concurrent run
                out.missing.append(f.path)
                continue
            except FileExistsError:
                out.conflicts.append(f.path)
                continue
            out.moved.append(f.path)
            out.moved_bytes += f.size
        elif step == FINISH:
            store.delete_many([there if back else here])
            out.finished.append(f.path)
        elif step == DONE:
            out.done.append(f.path)
        elif step == MISSING:
            out.missing.append(f.path)
        elif step == CHANGED:
            out.kept.append(f.path)
        else:
            out.conflicts.append(f.path)
    return out


def _run(dlog: DeltaLog, info: QuarantineInfo, action: str, state: str, settled: Settled) -> QuarantineRun:
    return QuarantineRun(
        info.id,
        action,
        state,
        dlog.table_uri,
        info.location,
        info.manifest.num_files,
        settled,
        info.manifest.summary(),
    )


# -- undo ----------------------------------------------------------------------------------------------------


def undo_quarantine(
    table_or_log: DeltaLog | str | os.PathLike[str],
    quarantine_id: str,
    *,
    storage_options: Mapping[str, Any] | None = None,
    clock: Clock | None = None,
) -> QuarantineRun:
    """Put every file of quarantine `quarantine_id` back at its path (step 3 of the module doc): the
    versions that read them can be read again. A rerun of an interrupted undo continues it; an undone
    quarantine is left as it is (nothing moved). An unfinished quarantine (its VACUUM killed) is rolled
    back: what was moved goes back. Files at neither path are reported (`missing`), not invented.

    :raises QuarantineError: no such quarantine, another table's, a purge under way, or something else now
        at a path a file must go back to (`paths` names them; nothing was moved)."""
    dlog = DeltaLog.of(table_or_log, storage_options, clock)
    info = read_quarantine(dlog, quarantine_id)
    manifest = info.manifest
    if info.state == PURGING:
        raise QuarantineError(
            f"Quarantine {manifest.id} is being purged (purge.json): its files may be deleted already; nothing "
            "was moved. Finish the purge (`purge_quarantines`)",
            quarantine_id=manifest.id,
            table=dlog.table_uri,
        )
    if info.state == RESTORED:
        return _run(dlog, info, "undo", RESTORED, Settled(done=[f.path for f in manifest.files]))
    now_ms = (clock or dlog.clock)()
    _check_table(manifest, in_process_log(dlog).update(), dlog)
    interrupted = info.state in UNFINISHED
    original, quarantined = _stat(dlog, manifest)
    steps = [
        undo_step(f, here, there, method=manifest.method, interrupted=interrupted)
        for f, here, there in zip(manifest.files, original, quarantined, strict=True)
    ]
    conflicts = [f.path for f, step in zip(manifest.files, steps, strict=True) if step == CONFLICT]
    if conflicts:
        raise _conflict_error(manifest, conflicts, "something else now sits at the path", dlog)
    _mark(dlog, manifest.id, UNDO_MARKER, now_ms, files=manifest.num_files)
    settled = _settle(dlog, manifest, steps, back=True)
    if settled.conflicts:
        raise _conflict_error(manifest, settled.conflicts, "something else appeared at the path", dlog)
    if settled.missing:
        log.warning(
            "Undo of quarantine %s of %s: %d files are at neither path (%s...): not restored",
            manifest.id,
            dlog.table_uri,
            len(settled.missing),
            settled.missing[0],
        )
    _mark(dlog, manifest.id, RESTORED_MARKER, now_ms, **settled.counts())
    remove_empty_dirs(
        dlog.store, dlog.table_uri, {partition_of(quarantined_path(manifest.id, f.path)) for f in manifest.files}
    )
    log.info("Undid quarantine %s of %s: %d files back", manifest.id, dlog.table_uri, len(settled.moved))
    return _run(dlog, info, "undo", RESTORED, settled)


# -- purge ---------------------------------------------------------------------------------------------------


def purge_quarantines(
    table_or_log: DeltaLog | str | os.PathLike[str],
    *,
    older_than: Any,
    dry_run: bool = False,
    storage_options: Mapping[str, Any] | None = None,
    clock: Clock | None = None,
) -> PurgeResult:
    """Delete the table's quarantines made at least `older_than` ago (step 4 of the module doc): their
    files for good, then their folder. Unfinished ones (`moving`, `restoring`) are left and reported.

    :param older_than: an age: `"7d"`, `"36h"`, `"0"` (all), a `timedelta`, or seconds
        (`protocol.quarantine.parse_age_ms`).
    :param dry_run: report what would be purged; nothing deleted.
    :param clock: epoch-ms clock (default: the `DeltaLog`'s); a quarantine's age counts from its manifest's
        `created` (the VACUUM's clock)."""
    older_than_ms = parse_age_ms(older_than)
    check_bool(dry_run, "dry_run")
    dlog = DeltaLog.of(table_or_log, storage_options, clock)
    now_ms = (clock or dlog.clock)()
    result = PurgeResult(dlog.table_uri, older_than_ms, now_ms, dry_run)
    for quarantine_id in quarantine_ids(dlog):
        try:
            info = read_quarantine(dlog, quarantine_id)
        except QuarantineError as exc:
            leftovers = list(dlog.store.list_recursive(_path(dlog, quarantine_dir(quarantine_id))))
            if not leftovers and not dry_run:  # what a purge killed after its manifest's delete leaves
                remove_empty_dirs(dlog.store, dlog.table_uri, {f"{quarantine_dir(quarantine_id)}/{FILES_DIR}"})
                continue
            result.skipped.append({"quarantine_id": quarantine_id, "reason": exc.message})
            continue
        why = purge_skip(info.manifest, info.state, now_ms=now_ms, older_than_ms=older_than_ms)
        if why is not None:
            result.skipped.append({"quarantine_id": quarantine_id, "state": info.state, "reason": why})
            continue
        files, size = (0, 0) if dry_run else _purge(dlog, info, now_ms)
        if dry_run:
            files = info.manifest.num_files if info.state in (QUARANTINED, PURGING) else 0
            size = info.manifest.num_bytes if files else 0
        m = info.manifest
        result.purged.append(
            {
                "quarantine_id": quarantine_id,
                "state": info.state,
                "created": m.created_ms,
                "created_at": m.summary()["created_at"],
                "version": m.version,
                "num_files": m.num_files,
                "files": files,
                "bytes": size,
            }
        )
    return result


def _purge(dlog: DeltaLog, info: QuarantineInfo, now_ms: int) -> tuple[int, int]:
    """Delete one quarantine: `purge.json`, its files, its markers, the manifest last. Files and bytes of
    the table's data deleted (markers and manifest not counted)."""
    store = dlog.store
    quarantine_id = info.id
    _mark(dlog, quarantine_id, PURGE_MARKER, now_ms)
    root = store.join(dlog.table_uri).rstrip("/")
    folder = _path(dlog, quarantine_dir(quarantine_id))
    manifest_path = _path(dlog, f"{quarantine_dir(quarantine_id)}/{MANIFEST_NAME}")
    data_prefix = _path(dlog, files_dir(quarantine_id)).rstrip("/") + "/"
    found = list(store.list_recursive(folder))
    data = [i for i in found if i.path.startswith(data_prefix)]
    rest = [i.path for i in found if not i.path.startswith(data_prefix) and i.path != manifest_path]
    data.sort(key=lambda i: i.path)
    for start in range(0, len(data), _DELETE_BATCH):
        store.delete_many([i.path for i in data[start : start + _DELETE_BATCH]])
    rest.sort(key=lambda p: p.endswith(PURGE_MARKER))  # purge.json last of the markers
    if rest:
        store.delete_many(rest)
    store.delete_many([manifest_path])
    dirs = {partition_of(i.path[len(root) + 1 :]) for i in data if i.path.startswith(root + "/")}
    remove_empty_dirs(store, dlog.table_uri, dirs | {files_dir(quarantine_id)})
    log.info("Purged quarantine %s of %s: %d files deleted", quarantine_id, dlog.table_uri, len(data))
    return len(data), sum(i.size for i in data)


__all__ = [
    "PurgeResult",
    "QuarantineInfo",
    "QuarantineRun",
    "finish_quarantine",
    "list_quarantines",
    "location",
    "purge_quarantines",
    "quarantine_ids",
    "read_quarantine",
    "resume_quarantine",
    "resume_unfinished",
    "start_quarantine",
    "undo_quarantine",
]
