"""Reversible VACUUM: quarantine the files VACUUM would delete, undo it, resume it, purge old quarantines.

    result = vacuum(table, dry_run=False, quarantine=True)        # moved, not deleted
    undo_quarantine(table, result.quarantine_id)                   # every file back: time travel works again
    purge_quarantines(table, older_than="7d")                      # delete quarantines past that age

Files move with the store's `move` (a rename locally and on HDFS, a server-side copy and a delete on object
stores); `protocol.quarantine` has the layout. Crash safety (kill -9 anywhere): every run writes before it
moves and marks after, and settles each file from what storage holds at its two paths, never from the
markers alone:

1. VACUUM writes the manifest (`put_if_absent`, fresh id), moves file by file, writes `quarantined.json`.
   A rename leaves a file at exactly one path; a copy appears whole or not at all, so at worst both exist.
2. `resume_quarantine` (and every `vacuum(quarantine=True)` first) finishes a `moving` quarantine
   (`forward_step`): files unchanged and still unneeded by the latest snapshot and live leases are moved.
3. `undo_quarantine` checks every file first and refuses when something else sits at a path a file goes back
   to; then writes `undo.json` (from here the direction is back), moves back, writes `restored.json`.
4. `purge_quarantines` writes `purge.json` (undo refuses from then on), deletes the files, markers and, last,
   the manifest. Unfinished quarantines are never purged.

Concurrent runs on one quarantine are safe per file but may count a file twice. After an undo the files are
again what VACUUM would delete: lease the version (`maintenance.leases`) or raise the retention first.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..delta_log import DeltaLog
from ..errors import QuarantineError, UnsupportedStoreError, check_bool
from ..progress import report_progress
from ..protocol import quarantine as rules
from ..protocol.quarantine import Manifest, Settled
from ..protocol.vacuum import VacuumPlan, deletable, normalize_relative, partition_of
from ..read.protected_files import partition_columns, protected_set
from ..snapshot import Snapshot
from ..storage import LogStore
from ..storage.batch import remove_empty_dirs, stat_entries
from .leases import in_process_log, lease_pins

log = logging.getLogger(__name__)

#: `purge_quarantines`' progress phase (`delta.progress`): quarantines handled of the table's.
PURGING = "PURGE QUARANTINES: deleting quarantines"

Clock = Callable[[], int]
#: Paths a refusal names at most (the error's `paths`; the message names the first few).
_NAMED = 100
_DELETE_BATCH = 1000


@dataclass(frozen=True)
class QuarantineInfo:
    """A quarantine as stored: its manifest, state and folder URI."""

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


def _path(dlog: DeltaLog, relative: str) -> str:
    """`relative` (to the table root) as the table's store names it."""
    store = dlog.store
    return store.join(store.join(dlog.table_uri).rstrip("/"), *[p for p in relative.split("/") if p])


def _in(dlog: DeltaLog, quarantine_id: str, name: str) -> str:
    return _path(dlog, f"{rules.quarantine_dir(quarantine_id)}/{name}")


def location(dlog: DeltaLog, quarantine_id: str) -> str:
    return f"{dlog.table_uri}/{rules.quarantine_dir(quarantine_id)}"


def _create(store: LogStore, path: str, data: bytes, *, exist_ok: bool = True) -> None:
    """Create a manifest or marker with `put_if_absent` (an existing marker, from an earlier or concurrent
    run, is kept when `exist_ok`); a plain `put` on a store without an atomic create (names are unique)."""
    try:
        store.put_if_absent(path, data)
    except FileExistsError:
        if not exist_ok:
            raise
    except UnsupportedStoreError:
        if getattr(store, "read_only", False):
            raise
        store.put(path, data)


def _mark(dlog: DeltaLog, quarantine_id: str, kind: str, now_ms: int, **counts: Any) -> None:
    _create(dlog.store, _in(dlog, quarantine_id, kind), rules.marker_bytes(kind, quarantine_id, now_ms, **counts))


def quarantine_ids(dlog: DeltaLog) -> list[str]:
    """The ids of the table's quarantine folders, oldest first (one listing of `_delta_quarantine`)."""
    entries = dlog.store.list_level(_path(dlog, rules.QUARANTINE_DIR_NAME))
    return sorted(e.name for e in entries if e.is_dir and rules.is_quarantine_id(e.name))


def read_quarantine(dlog: DeltaLog, quarantine_id: str) -> QuarantineInfo:
    """The quarantine `quarantine_id` of the table; `QuarantineError` when it has no valid manifest."""
    quarantine_id = rules.check_quarantine_id(quarantine_id)
    names = {info.name for info in dlog.store.list_from(_path(dlog, rules.quarantine_dir(quarantine_id)))}
    where = location(dlog, quarantine_id)
    if rules.MANIFEST_NAME not in names:
        raise QuarantineError(
            f"No quarantine {quarantine_id} at {where} (purged, or never made: the id is in the VACUUM result)",
            quarantine_id=quarantine_id,
            table=dlog.table_uri,
        )
    data = dlog.store.read_bytes(_in(dlog, quarantine_id, rules.MANIFEST_NAME))
    manifest = rules.parse_manifest(data, quarantine_id=quarantine_id, table=dlog.table_uri)
    return QuarantineInfo(manifest, rules.state_of(names), where)


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
    quarantined = stat_entries(dlog.store, dlog.table_uri, [rules.quarantined_path(manifest.id, p) for p in paths])
    return original, quarantined


def _conflicts(manifest: Manifest, steps: Sequence[str]) -> list[str]:
    """The manifest's paths whose step is `CONFLICT`."""
    return [f.path for f, step in zip(manifest.files, steps, strict=True) if step == rules.CONFLICT]


def _refuse_conflicts(manifest: Manifest, conflicts: Sequence[str], what: str, dlog: DeltaLog) -> None:
    """Refuse a run when something is in the way of the files `conflicts` (nothing was moved over them)."""
    if not conflicts:
        return
    shown = ", ".join(conflicts[:5]) + (f" and {len(conflicts) - 5} more" if len(conflicts) > 5 else "")
    raise QuarantineError(
        f"Quarantine {manifest.id}: {what} for {len(conflicts)} files ({shown}): nothing was moved over them. "
        "Move or delete what is there, then run it again",
        quarantine_id=manifest.id,
        paths=list(conflicts[:_NAMED]),
        table=dlog.table_uri,
        file=conflicts[0],
    )


def start_quarantine(
    dlog: DeltaLog,
    snapshot: Snapshot,
    plan: VacuumPlan,
    *,
    now_ms: int,
    audit_version: int | None,
    quarantine_id: str,
) -> Manifest:
    """Write the manifest of a new quarantine of `plan`'s re-validated files (step 1); nothing moved yet."""
    manifest = Manifest(
        id=quarantine_id,
        table=dlog.table_uri,
        table_id=snapshot.metadata.id,
        version=snapshot.version,
        created_ms=now_ms,
        method=getattr(dlog.store, "move_method", "copy+delete"),
        files=tuple(plan.files),
        mode=plan.mode,
        cutoff_ms=plan.cutoff_ms,
        retention_ms=plan.retention_ms,
        audit_version=audit_version,
    )
    _create(dlog.store, _in(dlog, manifest.id, rules.MANIFEST_NAME), manifest.to_bytes(), exist_ok=False)
    return manifest


def finish_quarantine(dlog: DeltaLog, manifest: Manifest, *, now_ms: int, moved: int, moved_bytes: int) -> None:
    """Write the forward completion marker: every move of `manifest` done."""
    _mark(dlog, manifest.id, rules.QUARANTINED_MARKER, now_ms, moved=moved, moved_bytes=moved_bytes)


def resume_quarantine(
    table_or_log: DeltaLog | str | os.PathLike[str],
    quarantine_id: str,
    *,
    storage_options: Mapping[str, Any] | None = None,
    clock: Clock | None = None,
) -> QuarantineRun:
    """Finish a quarantine whose VACUUM was cut off (step 2; any state but `moving`: nothing to do). Files
    needed again by the latest snapshot or a live lease, or changed since, stay (`kept`).

    :raises QuarantineError: no such quarantine, another table's, or something unexpected at both paths
        of a file (`paths`; nothing moved)."""
    dlog = DeltaLog.of(table_or_log, storage_options, clock)
    info = read_quarantine(dlog, quarantine_id)
    now_ms = (clock or dlog.clock)()
    if info.state != rules.MOVING:
        return _run(dlog, info, "resume", info.state, Settled())
    return _resume(dlog, info, now_ms)


def resume_unfinished(
    dlog: DeltaLog, *, now_ms: int, lease_location: str | os.PathLike[str] | None = None
) -> list[dict[str, Any]]:
    """Resume every `moving` quarantine of the table; what each did, or its error (logged: one that cannot be
    resumed is left for `resume_quarantine` or `undo_quarantine` and does not stop the VACUUM)."""
    out = []
    for quarantine_id in quarantine_ids(dlog):
        try:
            info = read_quarantine(dlog, quarantine_id)
            if info.state == rules.MOVING:
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
        step = rules.forward_step(f, here, there, method=manifest.method)
        if step == rules.MOVE and not deletable(normalize_relative(f.path), protected, columns):
            step = rules.CHANGED  # needed again: left where it is
        steps.append(step)
    _refuse_conflicts(manifest, _conflicts(manifest, steps), "files are at both their path and in the quarantine", dlog)
    settled = _settle(dlog, manifest, steps, back=False)
    _refuse_conflicts(manifest, settled.conflicts, "something appeared at the quarantine path", dlog)
    _mark(dlog, manifest.id, rules.QUARANTINED_MARKER, now_ms, resumed=True, **settled.counts())
    remove_empty_dirs(dlog.store, dlog.table_uri, {partition_of(f.path) for f in manifest.files})
    log.info(
        "Resumed quarantine %s of %s: %d moved, %d finished, %d kept",
        manifest.id,
        dlog.table_uri,
        len(settled.moved),
        len(settled.finished),
        len(settled.kept),
    )
    return _run(dlog, info, "resume", rules.QUARANTINED, settled)


def _settle(dlog: DeltaLog, manifest: Manifest, steps: Sequence[str], *, back: bool) -> Settled:
    """Carry out each file's step: moves (forward into the quarantine, or `back`), deletes of the copy left
    behind (`rules.FINISH`), and the outcomes of the others."""
    store = dlog.store
    out = Settled()
    for f, step in zip(manifest.files, steps, strict=True):
        here = _path(dlog, f.path)
        there = _path(dlog, rules.quarantined_path(manifest.id, f.path))
        if step == rules.MOVE:
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
        elif step == rules.FINISH:
            store.delete_many([there if back else here])
            out.finished.append(f.path)
        else:
            outcome = {rules.DONE: out.done, rules.MISSING: out.missing, rules.CHANGED: out.kept}
            outcome.get(step, out.conflicts).append(f.path)
    return out


def _run(dlog: DeltaLog, info: QuarantineInfo, action: str, state: str, settled: Settled) -> QuarantineRun:
    m = info.manifest
    return QuarantineRun(m.id, action, state, dlog.table_uri, info.location, m.num_files, settled, m.summary())


def undo_quarantine(
    table_or_log: DeltaLog | str | os.PathLike[str],
    quarantine_id: str,
    *,
    storage_options: Mapping[str, Any] | None = None,
    clock: Clock | None = None,
) -> QuarantineRun:
    """Put every file of quarantine `quarantine_id` back at its path (step 3), so the versions that read
    them can be read again; a rerun continues an interrupted undo, and a killed VACUUM's moves go back.

    :raises QuarantineError: no such quarantine, another table's, a purge under way, or something else now
        at a path a file must go back to (`paths` names them; nothing was moved)."""
    dlog = DeltaLog.of(table_or_log, storage_options, clock)
    info = read_quarantine(dlog, quarantine_id)
    manifest = info.manifest
    if info.state == rules.PURGING:
        raise QuarantineError(
            f"Quarantine {manifest.id} is being purged (purge.json): its files may be deleted already; nothing "
            "was moved. Finish the purge (`purge_quarantines`)",
            quarantine_id=manifest.id,
            table=dlog.table_uri,
        )
    if info.state == rules.RESTORED:
        return _run(dlog, info, "undo", rules.RESTORED, Settled(done=[f.path for f in manifest.files]))
    now_ms = (clock or dlog.clock)()
    _check_table(manifest, in_process_log(dlog).update(), dlog)
    interrupted = info.state in rules.UNFINISHED
    original, quarantined = _stat(dlog, manifest)
    steps = [
        rules.undo_step(f, here, there, method=manifest.method, interrupted=interrupted)
        for f, here, there in zip(manifest.files, original, quarantined, strict=True)
    ]
    _refuse_conflicts(manifest, _conflicts(manifest, steps), "something else now sits at the path", dlog)
    _mark(dlog, manifest.id, rules.UNDO_MARKER, now_ms, files=manifest.num_files)
    settled = _settle(dlog, manifest, steps, back=True)
    _refuse_conflicts(manifest, settled.conflicts, "something else appeared at the path", dlog)
    if settled.missing:
        log.warning(
            "Undo of quarantine %s of %s: %d files are at neither path (%s...): not restored",
            manifest.id,
            dlog.table_uri,
            len(settled.missing),
            settled.missing[0],
        )
    _mark(dlog, manifest.id, rules.RESTORED_MARKER, now_ms, **settled.counts())
    remove_empty_dirs(
        dlog.store, dlog.table_uri, {partition_of(rules.quarantined_path(manifest.id, f.path)) for f in manifest.files}
    )
    log.info("Undid quarantine %s of %s: %d files back", manifest.id, dlog.table_uri, len(settled.moved))
    return _run(dlog, info, "undo", rules.RESTORED, settled)


def purge_quarantines(
    table_or_log: DeltaLog | str | os.PathLike[str],
    *,
    older_than: Any,
    dry_run: bool = False,
    storage_options: Mapping[str, Any] | None = None,
    clock: Clock | None = None,
) -> PurgeResult:
    """Delete the table's quarantines made at least `older_than` ago (step 4); unfinished ones are reported.

    :param older_than: an age: `"7d"`, `"36h"`, `"0"` (all), a `timedelta`, or seconds.
    :param dry_run: report what would be purged; nothing deleted.
    :param clock: epoch-ms clock (default: the `DeltaLog`'s), against the manifest's `created`."""
    older_than_ms = rules.parse_age_ms(older_than)
    check_bool(dry_run, "dry_run")
    dlog = DeltaLog.of(table_or_log, storage_options, clock)
    now_ms = (clock or dlog.clock)()
    result = PurgeResult(dlog.table_uri, older_than_ms, now_ms, dry_run)
    ids = list(quarantine_ids(dlog))
    for done, quarantine_id in enumerate(ids):
        report_progress(PURGING, done, len(ids))  # the ones before it handled (purged or skipped)
        try:
            info = read_quarantine(dlog, quarantine_id)
        except QuarantineError as exc:
            leftovers = list(dlog.store.list_recursive(_path(dlog, rules.quarantine_dir(quarantine_id))))
            if not leftovers and not dry_run:  # what a purge killed after its manifest's delete leaves
                remove_empty_dirs(
                    dlog.store, dlog.table_uri, {f"{rules.quarantine_dir(quarantine_id)}/{rules.FILES_DIR}"}
                )
                continue
            result.skipped.append({"quarantine_id": quarantine_id, "reason": exc.message})
            continue
        why = rules.purge_skip(info.manifest, info.state, now_ms=now_ms, older_than_ms=older_than_ms)
        if why is not None:
            result.skipped.append({"quarantine_id": quarantine_id, "state": info.state, "reason": why})
            continue
        files, size = (0, 0) if dry_run else _purge(dlog, info, now_ms)
        if dry_run:
            files = info.manifest.num_files if info.state in (rules.QUARANTINED, rules.PURGING) else 0
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
    report_progress(PURGING, len(ids), len(ids))
    return result


def _purge(dlog: DeltaLog, info: QuarantineInfo, now_ms: int) -> tuple[int, int]:
    """Delete one quarantine: `purge.json`, its files, its markers, the manifest last; data files and bytes."""
    store = dlog.store
    quarantine_id = info.id
    _mark(dlog, quarantine_id, rules.PURGE_MARKER, now_ms)
    root = store.join(dlog.table_uri).rstrip("/")
    folder = _path(dlog, rules.quarantine_dir(quarantine_id))
    manifest_path = _in(dlog, quarantine_id, rules.MANIFEST_NAME)
    data_prefix = _path(dlog, rules.files_dir(quarantine_id)).rstrip("/") + "/"
    found = list(store.list_recursive(folder))
    data = [i for i in found if i.path.startswith(data_prefix)]
    rest = [i.path for i in found if not i.path.startswith(data_prefix) and i.path != manifest_path]
    data.sort(key=lambda i: i.path)
    for start in range(0, len(data), _DELETE_BATCH):
        store.delete_many([i.path for i in data[start : start + _DELETE_BATCH]])
    rest.sort(key=lambda p: p.endswith(rules.PURGE_MARKER))  # purge.json last of the markers
    if rest:
        store.delete_many(rest)
    store.delete_many([manifest_path])
    dirs = {partition_of(i.path[len(root) + 1 :]) for i in data if i.path.startswith(root + "/")}
    remove_empty_dirs(store, dlog.table_uri, dirs | {rules.files_dir(quarantine_id)})
    log.info("Purged quarantine %s of %s: %d files deleted", quarantine_id, dlog.table_uri, len(data))
    return len(data), sum(i.size for i in data)
