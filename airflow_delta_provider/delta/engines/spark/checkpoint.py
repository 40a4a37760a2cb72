"""Checkpoints written from Spark executors (`SparkCheckpointExecutor`): the file list never reaches the driver.

The driver keeps the checks, the plan, the non-file actions, V2's top-level file and the verdict. The
state's file actions are hash-partitioned into ceil(file actions / `actions_per_sidecar`) partitions (Spark's
`checkpoint.partSize` rule) and each `mapInArrow` task writes one file with the local writer's
`checkpoint_parquet`: a V2 sidecar, else part i of n (PROTOCOL.md "Multi-part checkpoint": all n parts,
empty ones too; the non-file actions in part 1); n = 1 is the classic `N.checkpoint.parquet`.

* Atomicity: `put_if_absent`, read back (length, CRC-32), this write's id in each footer; n is raised past
  leftover parts of the version; another writer's part is a `ConcurrentModificationError`; a retried task
  finding its own id keeps the file (Spark's zombie-task rule).
* Verification: the checkpoint alone is loaded again with the Spark engine; non-file actions compare on
  the driver, file actions by count and a sum of 128-bit row hashes (`digest_row`); the adds must number
  the snapshot's files (Spark's `checkpointMismatchWithSnapshot`). On a difference or any failure the
  files this call created are deleted and `CheckpointMismatchError` (or the failure) is raised.
"""

from __future__ import annotations

import hashlib
import json
import uuid
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

import pyarrow as pa
import pyarrow.parquet as pq

from ...errors import CheckpointMismatchError, ConcurrentModificationError, DeltaError, InvalidArgumentError
from ...protocol.actions import Action, action_from_json, action_to_json
from ...protocol.checkpoints import CheckpointPlan, non_file_state, sidecar_name, v2_checkpoint_name
from ...protocol.filenames import (
    SIDECAR_DIR_NAME,
    LogFileKind,
    ParsedLogPath,
    multipart_checkpoint_name,
    parse_log_path,
    version_prefix,
)
from ...protocol.log_segment import CheckpointInstance, LogSegment, complete_checkpoints, parse_listing
from ...read.file_state import ADD_SCHEMA, REMOVE_SCHEMA, empty_table
from ...storage import LogStore, store_for
from ...write.checkpoint_file import (
    CheckpointResult,
    checkpoint_parquet,
    existing_result,
    kept_tombstones,
    stored_digest,
)
from .session import match_session_mode, run_spark
from .state import DistributedFileState, SparkReplay, json_file_tables
from .tasks import ddl

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import SparkSession

    from ...snapshot import Snapshot
    from .. import CheckpointWriter

#: Footer entry naming the write that created a checkpoint file (readers ignore footer entries).
WRITE_ID_KEY = "delta.checkpoint.writeId"
_L, _S = pa.int64(), pa.string()
_DIGEST_FIELDS = [("adds", _L), ("removes", _L), ("add_digest", _S), ("remove_digest", _S)]
_RESULT_FIELDS = [("part", _L), ("path", _S), ("size", _L), ("mtime", _L), ("status", _S), *_DIGEST_FIELDS]
_DIGEST_ARROW, _RESULT_ARROW = pa.schema(_DIGEST_FIELDS), pa.schema(_RESULT_FIELDS)
#: `mapInArrow` outputs: a write task's row per partition, a digest task's (digests: 128-bit sums as text).
RESULT_SCHEMA, DIGEST_SCHEMA = ddl(_RESULT_FIELDS), ddl(_DIGEST_FIELDS)
_MOD = 1 << 128
_ADD_DIGEST = ("path", "partitionValues", "size", "modificationTime", "tags", "deletionVector", "baseRowId")
_ADD_DIGEST += ("defaultRowCommitVersion", "clusteringProvider")
_REMOVE_DIGEST = ("path", "deletionTimestamp", "extendedFileMetadata", "partitionValues", "size", "deletionVector")
_REMOVE_DIGEST += ("baseRowId", "defaultRowCommitVersion")
#: Task outcomes: the file was created (or found from this write's earlier attempt), another writer's
#: file holds the name, or (sidecars) the partition had no rows and wrote nothing.
WRITTEN, EXISTS, EMPTY = "written", "exists", "empty"

ArrowTask = Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]
LayoutKind = Literal["single", "parts", "sidecars"]


# -- rows and digests (executor side) ----------------------------------------------------------------------


def file_tables(batches: Iterable[pa.RecordBatch]) -> tuple[pa.Table, pa.Table]:
    """The ADD_SCHEMA and REMOVE_SCHEMA tables of batches of JSON file-action rows."""
    return json_file_tables(text for batch in batches for text in batch.column(0).to_pylist())


def _canonical(value: Any) -> Any:
    """Maps (lists of pairs from Arrow) as dicts, so their order does not count."""
    return dict(value) if isinstance(value, list) else value


def _sum_of_hashes(table: pa.Table, columns: Sequence[str]) -> int:
    total = 0
    for batch in table.select(list(columns)).to_batches(max_chunksize=65_536):
        for row in batch.to_pylist():
            text = json.dumps([_canonical(row[c]) for c in columns], separators=(",", ":"), sort_keys=True)
            total += int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=16).digest(), "big")
    return total % _MOD


def digest_row(adds: pa.Table, removes: pa.Table, plan: CheckpointPlan) -> dict[str, Any]:
    """Counts and sums of 128-bit row hashes (`_DIGEST_FIELDS`): equal for equal sets of rows in any order.

    A row's hash covers what a checkpoint keeps of it: path and DV (the file key), size, partition
    values, times, row tracking, tags and clustering (adds), `extendedFileMetadata` (tombstones) and the
    JSON stats when the table writes them; not `dataChange`, which a checkpoint always writes false.
    """
    add_columns = (*_ADD_DIGEST, "stats") if plan.stats_as_json else _ADD_DIGEST
    add_sum, remove_sum = _sum_of_hashes(adds, add_columns), _sum_of_hashes(removes, _REMOVE_DIGEST)
    return {
        "adds": adds.num_rows,
        "removes": removes.num_rows,
        "add_digest": str(add_sum),
        "remove_digest": str(remove_sum),
    }


def digest_task(plan: CheckpointPlan) -> ArrowTask:
    """`mapInArrow` function: one `DIGEST_SCHEMA` row per partition of JSON file-action rows."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        yield pa.RecordBatch.from_pylist([digest_row(*file_tables(batches), plan)], schema=_DIGEST_ARROW)

    return run


class _Totals(NamedTuple):
    """Counts and row-hash sums of a checkpoint's file actions (as written or as read back)."""

    adds: int
    add_digest: int
    removes: int
    remove_digest: int

    @classmethod
    def of(cls, rows: Iterable[Any]) -> _Totals:
        rows = list(rows)
        return cls(*(sum(int(r[k]) for r in rows) % _MOD for k in cls._fields))

    def differences(self, written: _Totals) -> list[str]:
        """What the checkpoint read back (`self`) says differently from what was `written`."""
        problems = []
        for name, count, digest in (("add", 0, 1), ("remove", 2, 3)):
            if self[count] != written[count]:
                problems.append(f"{name} count ({self[count]} read, {written[count]} written)")
            elif self[digest] != written[digest]:
                problems.append(f"{name} rows")
        return problems


# -- layout ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Layout:
    """The files of one checkpoint: `names[i]` is what partition i writes, relative to `_delta_log`
    (`_sidecars/...` for sidecars); `top` the V2 file the driver writes after the sidecars."""

    kind: LayoutKind
    names: tuple[str, ...]
    top: str | None = None

    @property
    def num_partitions(self) -> int:
        return len(self.names)

    def path(self, store: LogStore, log_dir: str, part: int) -> str:
        return store.join(log_dir, *self.names[part].split("/"))


def _planned_layout(
    store: LogStore, log_dir: str, plan: CheckpointPlan, num_file_actions: int
) -> tuple[Layout, list[ParsedLogPath] | None]:
    """Where this checkpoint goes, and, for a multi-part one, the complete checkpoint of that version already
    there (classic names only: a UUID-named V2 checkpoint is always new), else None."""
    per = plan.actions_per_sidecar
    stamp = str(uuid.uuid4())
    if plan.kind == "v2" and not plan.classic_name:
        n = plan.num_sidecars(num_file_actions)
        top = v2_checkpoint_name(plan.version, stamp)
        if n == 0:
            return Layout("single", (top,)), None
        names = tuple(f"{SIDECAR_DIR_NAME}/{sidecar_name(plan.version, i, n, stamp)}" for i in range(1, n + 1))
        return Layout("sidecars", names, top), None
    n = 1 if plan.kind == "v2" else max(1, -(-num_file_actions // per))
    if n == 1:  # as the local writer: only a file of this name is "there" (`write` looks); a multi-part
        # checkpoint of the version beside it is not (corpus `delta-golden/multi-part-checkpoint`)
        assert plan.name is not None
        return Layout("single", (plan.name,)), None
    listed = [
        f
        for f in parse_listing(store.list_from(log_dir, version_prefix(plan.version)))
        if f.version == plan.version and f.kind.is_checkpoint
    ]
    complete = [c for c in complete_checkpoints(listed) if c.kind is not LogFileKind.CHECKPOINT_UUID]
    if complete:
        return Layout("single", ()), list(complete[0].files)
    taken = {f.num_parts for f in listed if f.kind is LogFileKind.CHECKPOINT_MULTIPART}
    while n in taken:  # leftovers of an earlier attempt with n parts: never mix them with ours
        n += 1
    return Layout("parts", tuple(multipart_checkpoint_name(plan.version, i, n) for i in range(1, n + 1))), None


# -- the write task (executor side) ----------------------------------------------------------------------


def _write_id(store: LogStore, path: str) -> str | None:
    """The write id in a checkpoint file's footer (None when absent or unreadable)."""
    try:
        with store.open(path) as fh:
            meta = pq.read_metadata(fh).metadata or {}
    except (OSError, ValueError, pa.ArrowException):
        return None
    value = meta.get(WRITE_ID_KEY.encode())
    return value.decode() if value is not None else None


def _check_stored(store: LogStore, path: str, data: bytes, message: str, table: str, plan: CheckpointPlan) -> None:
    """`CheckpointMismatchError` unless the file at `path` has the length and CRC-32 of `data`."""
    if stored_digest(store, path) != (len(data), zlib.crc32(data)):
        raise CheckpointMismatchError(message, table=table, version=plan.version, file=path.rsplit("/", 1)[-1])


def _result_batch(rows: list[dict[str, Any]]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist(rows, schema=_RESULT_ARROW)


def write_task(
    table_uri: str,
    storage_options: Mapping[str, Any],
    log_dir: str,
    plan: CheckpointPlan,
    layout: Layout,
    actions: Sequence[Mapping[str, Any]],
    write_id: str,
) -> ArrowTask:
    """The `mapInArrow` function writing partition i's file of `layout` (`RESULT_SCHEMA`, one row).

    `actions` (JSON) are the non-file rows that partition 0 writes into a single file or part 1.
    """
    options = dict(storage_options)

    def run(batches: Iterable[pa.RecordBatch], part: int | None = None) -> Iterator[pa.RecordBatch]:
        """In a task, its partition's file; `part` given: that partition's file written here (`_write_files`)."""
        if part is None:
            from pyspark import TaskContext

            context = TaskContext.get()
            part = context.partitionId() if context is not None else 0
        adds, removes = file_tables(batches)
        removes = kept_tombstones(removes, plan)
        row = {"part": part, "size": 0, "mtime": 0, "path": None, **digest_row(adds, removes, plan)}
        sidecar = layout.kind == "sidecars"
        if sidecar and not row["adds"] + row["removes"]:
            yield _result_batch([{**row, "status": EMPTY}])
            return
        non_file = [action_from_json(a) for a in actions] if part == 0 and not sidecar else None
        data = checkpoint_parquet(
            plan, adds, removes, actions=non_file, sidecar_file=sidecar, key_value_metadata={WRITE_ID_KEY: write_id}
        )
        store = store_for(table_uri, options)
        path = layout.path(store, log_dir, part)
        row["path"] = path
        try:
            store.put_if_absent(path, data)
            created = True
        except FileExistsError:
            if _write_id(store, path) != write_id:
                yield _result_batch([{**row, "status": EXISTS}])
                return
            created = False  # this write's earlier attempt of the task: same rows, kept as it is
        try:
            if created:
                _check_stored(
                    store, path, data, "The checkpoint file stored differs from the one written", table_uri, plan
                )
            info = store.head(path)
        except BaseException:
            if created:
                store.delete_many([path])
            raise
        size, mtime = (info.size, info.modification_time) if info is not None else (len(data), 0)
        yield _result_batch([{**row, "status": WRITTEN, "size": size, "mtime": mtime}])

    return run


# -- the driver ------------------------------------------------------------------------------------------


class SparkCheckpointExecutor:
    """A `maintenance.checkpoint.CheckpointExecutor` on Spark executors (see the module doc).

    :param spark: the session the snapshot was loaded with (`SparkEngine`).
    :param storage_options: the table's storage options, for the stores the executors build.
    :param driver_writer: writes the checkpoint of a state replayed on the driver (`SparkEngine`'s small
        logs); without it such a state is refused.
    """

    def __init__(
        self,
        spark: SparkSession,
        *,
        storage_options: Mapping[str, Any] | None = None,
        driver_writer: CheckpointWriter | None = None,
    ) -> None:
        match_session_mode(spark)
        self.spark = spark
        self.storage_options = dict(storage_options or {})
        self.driver_writer = driver_writer
        #: file actions each partition of the last write held (after retention), in partition order
        self.partition_rows: tuple[int, ...] = ()

    def write(self, snapshot: Snapshot, plan: CheckpointPlan, actions: list[Action]) -> CheckpointResult:
        files = snapshot.state.files
        if not isinstance(files, DistributedFileState):
            if self.driver_writer is None:
                raise InvalidArgumentError(
                    "SparkCheckpointExecutor writes snapshots loaded with the Spark engine "
                    "(DeltaLog(..., engine=SparkEngine(spark)))",
                    argument="snapshot",
                    table=snapshot.table,
                )
            self.partition_rows = ()
            return self.driver_writer.write(snapshot, plan, actions)
        store, log_dir = snapshot.store, snapshot.log_dir
        num_files = snapshot.num_files
        num_tombstones = files.count_tombstones_after(plan.min_file_retention_timestamp)
        layout, existing = _planned_layout(store, log_dir, plan, num_files + num_tombstones)
        if existing is not None:
            parts = tuple(f.file.path for f in existing) if len(existing) > 1 else ()
            size = sum(f.file.size for f in existing)
            return existing_result(snapshot, plan, actions, existing[0].file.path, size, parts)
        if layout.kind == "single" and plan.name:
            found = store.head(store.join(log_dir, plan.name))
            if found is not None:
                return existing_result(snapshot, plan, actions, found.path, found.size)
        write_id = uuid.uuid4().hex
        created: list[str] | None = None  # known once the executors report
        top_path: str | None = None
        try:
            rows = self._write_files(snapshot, plan, actions, layout, write_id)
            files_written = [r for r in rows if r["status"] == WRITTEN]
            created = [r["path"] for r in files_written]
            if any(r["status"] == EXISTS for r in rows):
                store.delete_many(created)
                created = []
                return self._lost_race(snapshot, plan, actions, layout)
            written = _Totals.of(rows)
            self._check_counts(snapshot, plan, layout, rows, written, num_files, num_tombstones)
            sidecars = files_written if layout.kind == "sidecars" else []
            top_size = 0
            if layout.top is not None:
                top_path = store.join(log_dir, layout.top)  # UUID-named: if it exists, this call made it
                top_size = self._write_top(snapshot, plan, actions, top_path, sidecars)
            self._verify(snapshot, plan, actions, layout, top_path, written)
        except BaseException:
            self._clean_up(store, log_dir, layout, write_id, created, top_path)
            raise
        size = sum(r["size"] for r in files_written) + top_size
        num_actions = len(actions) + written.adds + written.removes
        num_actions += (1 + len(sidecars)) if plan.kind == "v2" else 0
        path = top_path or files_written[0]["path"]
        return CheckpointResult(
            version=plan.version,
            kind=plan.kind,
            path=path,
            sidecars=tuple(r["path"] for r in sidecars),
            num_actions=num_actions,
            num_add_files=written.adds,
            num_tombstones=written.removes,
            size_in_bytes=size,
            last_checkpoint_updated=False,
            parts=tuple(r["path"] for r in files_written) if layout.kind == "parts" else (),
        )

    # -- steps -----------------------------------------------------------------------------------------------
    def _write_files(
        self, snapshot: Snapshot, plan: CheckpointPlan, actions: list[Action], layout: Layout, write_id: str
    ) -> list[dict[str, Any]]:
        """Run the write tasks: one row per partition, in partition order."""
        from pyspark.sql import functions as F

        assert isinstance(snapshot.state.files, DistributedFileState)
        frame = snapshot.state.files.json_frame()
        n = layout.num_partitions
        frame = frame.repartition(n, F.col("json")) if n > 1 else frame.repartition(1)
        task = write_task(
            snapshot.table,
            self.storage_options,
            snapshot.log_dir,
            plan,
            layout,
            [action_to_json(a) for a in actions],
            write_id,
        )
        out = run_spark(
            lambda: frame.mapInArrow(task, RESULT_SCHEMA).collect(), table=snapshot.table, version=plan.version
        )
        rows = sorted((r.asDict() for r in out), key=lambda r: r["part"])
        if not rows:  # no file actions at all: Spark ran no task (AQE drops an empty shuffle's partitions)
            rows = [row for part in range(n) for batch in task((), part) for row in batch.to_pylist()]
        self.partition_rows = tuple(r["adds"] + r["removes"] for r in rows)
        return rows

    def _lost_race(
        self, snapshot: Snapshot, plan: CheckpointPlan, actions: list[Action], layout: Layout
    ) -> CheckpointResult:
        """Another writer created one of our names first: its classic checkpoint stands (as in the local
        writer); a part of a multi-part checkpoint cannot be mixed with ours."""
        store = snapshot.store
        if layout.kind == "single" and plan.name:
            info = store.head(store.join(snapshot.log_dir, plan.name))
            return existing_result(snapshot, plan, actions, info.path if info else plan.name, info.size if info else 0)
        raise ConcurrentModificationError(
            f"Another writer created files of a {layout.num_partitions}-file checkpoint of this version "
            "first; the files this write created were deleted",
            table=snapshot.table,
            version=plan.version,
        )

    @staticmethod
    def _check_counts(
        snapshot: Snapshot,
        plan: CheckpointPlan,
        layout: Layout,
        rows: list[dict[str, Any]],
        written: _Totals,
        num_files: int,
        num_tombstones: int,
    ) -> None:
        """Every partition reported, each part exists, and the rows written number the snapshot's."""
        problems = []
        if [r["part"] for r in rows] != list(range(layout.num_partitions)):
            problems.append(f"{len(rows)} of {layout.num_partitions} partitions reported")
        if layout.kind != "sidecars" and any(r["status"] != WRITTEN for r in rows):
            problems.append("a part was not written")
        if written.adds != num_files:
            problems.append(f"{written.adds} adds written, the snapshot has {num_files} files")
        if written.removes != num_tombstones:
            problems.append(f"{written.removes} tombstones written, the snapshot keeps {num_tombstones}")
        if problems:
            raise CheckpointMismatchError(
                f"The executors' checkpoint files differ from the snapshot ({'; '.join(problems)}); they were deleted",
                table=snapshot.table,
                version=plan.version,
            )

    @staticmethod
    def _write_top(
        snapshot: Snapshot, plan: CheckpointPlan, actions: list[Action], path: str, sidecars: list[dict[str, Any]]
    ) -> int:
        """The V2 top-level file over the sidecars, written here as the local writer writes it; checked
        back by length and CRC-32. Its size."""
        store = snapshot.store
        entries = [
            {"path": r["path"].rsplit("/", 1)[-1], "sizeInBytes": r["size"], "modificationTime": r["mtime"]}
            for r in sidecars
        ]
        data = checkpoint_parquet(
            plan, empty_table(ADD_SCHEMA), empty_table(REMOVE_SCHEMA), actions=actions, sidecars=entries
        )
        store.put_if_absent(path, data)
        why = "The checkpoint stored differs from the one written; it was deleted"
        _check_stored(store, path, data, why, snapshot.table, plan)
        return len(data)

    def _verify(
        self,
        snapshot: Snapshot,
        plan: CheckpointPlan,
        actions: list[Action],
        layout: Layout,
        top_path: str | None,
        written: _Totals,
    ) -> None:
        """Load the written checkpoint alone with the Spark engine and compare it with what was written:
        non-file actions here, file actions by counts and digests computed on the executors."""
        store, log_dir, table = snapshot.store, snapshot.log_dir, snapshot.table
        instance = _instance(store, log_dir, plan.version, layout, top_path)
        name = instance.files[0].name
        segment = LogSegment(table, plan.version, instance, ())
        # no commits to replay: one (empty) partition for them; the checkpoint's files are read as they lie
        engine = SparkReplay(self.spark, snapshot_partitions=1, prefetch_digest=False)
        try:
            state = engine.reconstruct(table, log_dir, store, segment)
        except DeltaError as exc:
            raise CheckpointMismatchError(
                f"The checkpoint cannot be read back ({exc.message}); it was deleted",
                table=table,
                version=plan.version,
                file=name,
            ) from exc
        files = state.files
        assert isinstance(files, DistributedFileState)
        try:
            got = {
                "protocol": state.protocol,
                "metadata": state.metadata,
                "txns": dict(state.transactions),
                "domains": dict(state.domain_metadata),
            }
            want = non_file_state(actions)
            problems = [key for key in want if got[key] != want[key]]
            frame = files.json_frame()
            read = _Totals.of(
                run_spark(
                    lambda: frame.mapInArrow(digest_task(plan), DIGEST_SCHEMA).collect(),
                    table=table,
                    version=plan.version,
                )
            )
        finally:
            files.uncache()
        problems += read.differences(written)
        if problems:
            raise CheckpointMismatchError(
                f"The checkpoint read back differs from the replayed state in {', '.join(problems)}; it was deleted",
                table=table,
                version=plan.version,
                file=name,
            )

    def _clean_up(
        self,
        store: LogStore,
        log_dir: str,
        layout: Layout,
        write_id: str,
        created: list[str] | None,
        top_path: str | None,
    ) -> None:
        """Delete what this call created: the files the executors reported, or, when their job failed
        before reporting, the planned files whose footer carries this write's id."""
        if created is None:
            paths = [layout.path(store, log_dir, i) for i in range(layout.num_partitions)]
            created = [p for p in paths if store.head(p) is not None and _write_id(store, p) == write_id]
        doomed = [*created, *([top_path] if top_path and top_path not in created else [])]
        if doomed:
            store.delete_many(doomed[::-1])


def _instance(store: LogStore, log_dir: str, version: int, layout: Layout, top_path: str | None) -> CheckpointInstance:
    """The checkpoint just written, as a reader's log segment names it."""
    paths = [top_path] if top_path else [layout.path(store, log_dir, i) for i in range(layout.num_partitions)]
    parsed = []
    for path in paths:
        found = store.head(path)
        if found is None:
            name = path.rsplit("/", 1)[-1]
            raise CheckpointMismatchError("A checkpoint file written is missing", version=version, file=name)
        parsed.append(parse_log_path(found))
    return CheckpointInstance(version, parsed[0].kind, tuple(parsed))
