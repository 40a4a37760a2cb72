"""Conflict rules, commitInfo and write obligations as pure functions: values in, a typed error or nothing out.

One test per check of Delta's `ConflictChecker` (in its order), the isolation level each kind of commit
gets, and the `check_can_write` operations a commit performs.
"""

from __future__ import annotations

import json

import pytest

from airflow_delta_provider.delta.errors import (
    ConcurrentAppendError,
    ConcurrentDeleteDeleteError,
    ConcurrentDeleteReadError,
    ConcurrentTransactionError,
    MetadataChangedError,
    OperationNotAllowedError,
    ProtocolChangedError,
    UnsupportedFeatureError,
)
from airflow_delta_provider.delta.protocol.actions import (
    AddCDCFile,
    AddFile,
    CommitInfo,
    DomainMetadata,
    Metadata,
    Protocol,
    RemoveFile,
    SetTransaction,
    action_from_json,
)
from airflow_delta_provider.delta.protocol.commit_info import (
    SERIALIZABLE,
    SNAPSHOT_ISOLATION,
    WRITE_SERIALIZABLE,
    build_commit_info,
    commit_bytes,
    commit_timestamp,
    encode_operation_parameters,
    in_commit_timestamps_active,
    next_in_commit_timestamp,
    with_ict_enablement,
)
from airflow_delta_provider.delta.protocol.conflicts import (
    CurrentTransactionInfo,
    WinningCommitSummary,
    check_conflicts,
    commit_operations,
    is_blind_append,
    isolation_level,
)
from airflow_delta_provider.delta.protocol.table_features import check_can_write, features_in_use


def _schema(**field_metadata: dict) -> str:
    fields = [{"name": "p", "type": "string", "nullable": True, "metadata": {}}]
    fields += [{"name": n, "type": "long", "nullable": True, "metadata": m} for n, m in field_metadata.items()]
    return json.dumps({"type": "struct", "fields": fields})


META = Metadata(id="t", schema_string=_schema(), partition_columns=("p",))
P12 = Protocol(1, 2)


def add(path: str, *, p: str = "a", data_change: bool = True) -> AddFile:
    return AddFile(path, {"p": p}, 1, 1, data_change=data_change)


def rm(path: str, *, data_change: bool = True) -> RemoveFile:
    return RemoveFile(path, 1, data_change)


def winner(*actions, blind: bool | None = None, version: int = 5, **info) -> WinningCommitSummary:
    raw = {"operation": "WRITE", **info}
    if blind is not None:
        raw["isBlindAppend"] = blind
    return WinningCommitSummary(version, (CommitInfo(raw), *actions), 1_000)


def current(*actions, level: str | None = None, **reads) -> CurrentTransactionInfo:
    return CurrentTransactionInfo(
        table="t",
        read_version=4,
        read_protocol=reads.pop("read_protocol", P12),
        metadata=META,
        actions=actions,
        operations=commit_operations(actions),
        isolation_level=level or isolation_level(actions, {}),
        **reads,
    )


# -- what a commit is: operations, isolation level, blind append ----------------------------------------


def test_commit_operations_name_what_the_commit_does():
    assert commit_operations([]) == {"commit"}
    assert commit_operations([add("a")]) == {"commit", "write"}
    assert commit_operations([rm("a")]) == {"commit", "remove"}
    assert commit_operations([rm("a", data_change=False), add("b", data_change=False)]) == {"commit", "optimize"}
    assert commit_operations([AddCDCFile("c", {}, 1)]) == {"commit", "write"}
    assert commit_operations([SetTransaction("app", 1), META]) == {"commit"}


def test_isolation_level_downgrades_only_commits_that_change_no_data():
    compaction = [rm("a", data_change=False), add("b", data_change=False)]
    assert isolation_level([add("a")], {}) == SERIALIZABLE
    assert isolation_level(compaction, {}) == SNAPSHOT_ISOLATION
    assert isolation_level([], {}) == SNAPSHOT_ISOLATION  # commitInfo only (VACUUM START/END)
    row_tracking = DomainMetadata("delta.rowTracking", '{"rowIdHighWaterMark":9}')
    assert isolation_level([*compaction, row_tracking], {}) == SNAPSHOT_ISOLATION
    assert isolation_level([*compaction, DomainMetadata("user", "{}")], {}) == SERIALIZABLE
    assert isolation_level([*compaction, SetTransaction("app", 1)], {}) == SERIALIZABLE
    assert isolation_level([add("a")], {"delta.isolationLevel": WRITE_SERIALIZABLE}) == WRITE_SERIALIZABLE
    assert isolation_level([add("a")], {"delta.isolationLevel": "bogus"}) == SERIALIZABLE


def test_blind_append_means_only_adds_and_nothing_read():
    assert is_blind_append([add("a"), SetTransaction("x", 1)], read_anything=False)
    assert is_blind_append([], read_anything=False)
    assert not is_blind_append([add("a")], read_anything=True)
    assert not is_blind_append([add("a"), rm("b")], read_anything=False)
    assert not is_blind_append([AddCDCFile("c", {}, 1)], read_anything=False)


# -- check 1: protocol ------------------------------------------------------------------------------------


def test_winner_protocol_we_cannot_write_is_refused_naming_the_feature():
    future = Protocol(3, 7, (), ("appendOnly", "invariants", "someFutureFeature"))
    with pytest.raises(UnsupportedFeatureError) as exc:
        check_conflicts(current(add("x")), winner(future))
    assert exc.value.feature == "someFutureFeature" and exc.value.version == 5
    with pytest.raises(OperationNotAllowedError, match="catalog-managed"):
        check_conflicts(current(), winner(Protocol(1, 7, None, ("appendOnly", "invariants", "catalogOwned-preview"))))


def test_winner_protocol_change_conflicts_with_our_protocol_change():
    upgraded = Protocol(1, 7, None, ("appendOnly", "invariants", "deletionVectors"))
    with pytest.raises(ProtocolChangedError):
        check_conflicts(current(upgraded), winner(upgraded))


def test_winner_dropping_a_feature_or_adding_a_binding_one_conflicts():
    with pytest.raises(ProtocolChangedError, match="removed"):
        check_conflicts(current(add("x")), winner(Protocol(1, 1)))
    with pytest.raises(ProtocolChangedError, match="checkConstraints"):
        check_conflicts(current(add("x")), winner(Protocol(1, 3)))


def test_winner_adding_a_feature_that_binds_no_other_writer_rebases():
    check_conflicts(current(add("x")), winner(Protocol(1, 7, None, ("appendOnly", "invariants", "deletionVectors"))))


def test_winner_adding_a_feature_whose_obligations_we_do_not_meet_refuses_writes_only():
    tracked = Protocol(1, 7, None, ("appendOnly", "invariants", "domainMetadata", "rowTracking"))
    with pytest.raises(UnsupportedFeatureError) as exc:
        check_conflicts(current(add("x")), winner(tracked))
    assert exc.value.feature == "rowTracking"
    check_conflicts(current(), winner(tracked))  # a commitInfo-only commit (VACUUM END) still rebases


# -- checks 2-4: metadata, domains, app ids ---------------------------------------------------------------


def test_winner_metadata_is_checked_before_files():
    new_meta = Metadata(id="t", schema_string=_schema(x={}), partition_columns=("p",))
    with pytest.raises(MetadataChangedError):
        check_conflicts(current(add("x")), winner(new_meta, rm("read.parquet")))
    with pytest.raises(MetadataChangedError):
        check_conflicts(current(), winner(new_meta))  # even a commitInfo-only commit


def test_same_domain_in_both_commits_conflicts():
    with pytest.raises(ConcurrentTransactionError, match=r"'user\.domain'"):
        check_conflicts(current(DomainMetadata("user.domain", "{}")), winner(DomainMetadata("user.domain", "{}")))
    check_conflicts(current(DomainMetadata("mine", "{}")), winner(DomainMetadata("theirs", "{}")))


def test_winner_txn_for_an_app_id_we_read_conflicts():
    with pytest.raises(ConcurrentTransactionError, match=r"'dag\.task'"):
        check_conflicts(current(read_app_ids=frozenset({"dag.task"})), winner(SetTransaction("dag.task", 3)))
    check_conflicts(current(read_app_ids=frozenset({"dag.task"})), winner(SetTransaction("other", 3)))


# -- check 6: added files ---------------------------------------------------------------------------------


def test_concurrent_append_conflicts_with_a_whole_table_read_at_serializable():
    with pytest.raises(ConcurrentAppendError) as exc:
        check_conflicts(current(rm("a"), read_whole_table=False, read_predicates=(lambda f: True,)), winner(add("n")))
    assert exc.value.file == "n"
    with pytest.raises(ConcurrentAppendError):
        check_conflicts(current(add("y"), read_whole_table=True), winner(add("n"), blind=True))


def test_concurrent_append_conflicts_only_where_the_read_predicate_matches():
    reads = {"read_predicates": (lambda f: f.partition_values.get("p") == "a",)}
    with pytest.raises(ConcurrentAppendError):
        check_conflicts(current(rm("a1"), **reads), winner(add("new", p="a")))
    check_conflicts(current(rm("a1"), **reads), winner(add("new", p="b")))


def test_write_serializable_ignores_blind_appends_unless_we_change_metadata():
    reads = {"read_whole_table": True, "level": WRITE_SERIALIZABLE}
    check_conflicts(current(add("y"), **reads), winner(add("n"), blind=True))
    with pytest.raises(ConcurrentAppendError):
        check_conflicts(current(add("y"), **reads), winner(add("n"), blind=False))
    with pytest.raises(ConcurrentAppendError):
        check_conflicts(current(add("y"), META, **reads), winner(add("n"), blind=True))


def test_file_set_reads_and_snapshot_isolation_never_conflict_with_appends():
    check_conflicts(current(rm("a"), read_paths=frozenset({"a"})), winner(add("n")))
    compaction = current(rm("a", data_change=False), add("c", data_change=False), read_whole_table=False)
    assert compaction.isolation_level == SNAPSHOT_ISOLATION
    check_conflicts(compaction, winner(add("n"), blind=True))


# -- checks 7 and 8: removed files --------------------------------------------------------------------------


def test_winner_removing_a_file_we_read_conflicts():
    compaction = current(rm("a", data_change=False), add("c", data_change=False), read_paths=frozenset({"a"}))
    with pytest.raises(ConcurrentDeleteReadError) as exc:
        check_conflicts(compaction, winner(rm("a")))
    assert exc.value.file == "a" and exc.value.version == 5
    check_conflicts(compaction, winner(rm("other")))


def test_paths_are_compared_canonically():
    with pytest.raises(ConcurrentDeleteReadError):
        check_conflicts(
            current(read_paths=frozenset({"file:/data/t/a.parquet"})), winner(rm("file:///data/t/a.parquet"))
        )


def test_winner_removing_anything_conflicts_with_a_whole_table_read():
    with pytest.raises(ConcurrentDeleteReadError):
        check_conflicts(current(add("y"), read_whole_table=True), winner(rm("anything")))


def test_winner_removing_a_file_we_remove_conflicts():
    with pytest.raises(ConcurrentDeleteDeleteError) as exc:
        check_conflicts(current(rm("a")), winner(rm("a"), rm("b")))
    assert exc.value.file == "a"


def test_blind_appends_and_commit_info_only_commits_rebase_over_file_changes():
    check_conflicts(current(add("mine")), winner(add("theirs"), blind=True))
    check_conflicts(current(add("mine")), winner(rm("theirs"), add("theirs2")))
    check_conflicts(current(), winner(rm("x"), add("y")))  # VACUUM END over a DELETE


# -- winners' timestamps, commitInfo ------------------------------------------------------------------------


def test_winner_timestamp_is_its_ict_or_its_file_time():
    assert winner(inCommitTimestamp=77).timestamp == 77
    assert winner().timestamp == 1_000
    assert commit_timestamp(None, 5) == 5
    assert winner(txnId="abc").txn_id == "abc" and winner().txn_id is None


def test_next_in_commit_timestamp_is_strictly_after_the_previous_commit():
    assert next_in_commit_timestamp(100, 50) == 100
    assert next_in_commit_timestamp(100, 100) == 101
    assert next_in_commit_timestamp(100, 500) == 501  # clock behind the log: still monotonic


def test_in_commit_timestamps_need_the_feature_and_the_property():
    on = Metadata(id="t", schema_string=_schema(), configuration={"delta.enableInCommitTimestamps": "true"})
    ict = Protocol(1, 7, None, ("inCommitTimestamp",))
    assert in_commit_timestamps_active(ict, on)
    assert not in_commit_timestamps_active(ict, META)
    assert not in_commit_timestamps_active(P12, on)


def test_enabling_ict_on_an_existing_table_records_version_and_timestamp():
    on = Metadata(id="t", schema_string=_schema(), configuration={"delta.enableInCommitTimestamps": "true"})
    updated = with_ict_enablement(on, META, version=7, in_commit_timestamp=1234)
    assert updated.configuration["delta.inCommitTimestampEnablementVersion"] == "7"
    assert updated.configuration["delta.inCommitTimestampEnablementTimestamp"] == "1234"
    assert with_ict_enablement(on, on, version=7, in_commit_timestamp=1234) is on  # already on: unchanged


def test_operation_parameters_are_encoded_as_spark_writes_them():
    params = {"mode": "Append", "partitionBy": ["p"], "auto": True, "batchId": "0", "description": None, "n": 3}
    assert encode_operation_parameters(params) == {
        "mode": "Append",
        "partitionBy": '["p"]',
        "auto": True,
        "batchId": "0",
        "description": None,
        "n": 3,
    }
    assert encode_operation_parameters({"properties": {"a": "1"}}) == {"properties": '{"a":"1"}'}


def test_commit_info_fields_and_order():
    info = build_commit_info(
        timestamp=10,
        operation="VACUUM END",
        parameters={"status": "COMPLETED"},
        read_version=4,
        isolation_level=SNAPSHOT_ISOLATION,
        is_blind_append=True,
        txn_id="id-1",
        engine_info="airflow-delta-provider/9",
        in_commit_timestamp=11,
        operation_metrics={"numDeletedFiles": 3},
    )
    assert list(info.raw) == [
        "inCommitTimestamp",
        "timestamp",
        "operation",
        "operationParameters",
        "readVersion",
        "isolationLevel",
        "isBlindAppend",
        "operationMetrics",
        "engineInfo",
        "txnId",
    ]
    assert info.raw["operationMetrics"] == {"numDeletedFiles": "3"}
    line = commit_bytes([info]).decode()
    assert line.endswith("\n") and action_from_json(json.loads(line)) == info


# -- write obligations (table_features) ---------------------------------------------------------------------


def test_legacy_column_features_count_only_where_the_schema_uses_them():
    assert "invariants" not in features_in_use(P12, META)
    check_can_write(P12, META, ["write"])  # a plain writer-2 table takes appends
    uses = Metadata(id="t", schema_string=_schema(x={"delta.invariants": '{"expression":{"expression":"x>0"}}'}))
    assert "invariants" in features_in_use(P12, uses)
    with pytest.raises(UnsupportedFeatureError) as exc:
        check_can_write(P12, uses, ["write"])
    assert exc.value.feature == "invariants"
    check_can_write(P12, uses, ["optimize", "commit"])  # compaction copies values, evaluates nothing


@pytest.mark.parametrize(
    ("protocol", "metadata", "feature"),
    [
        (
            Protocol(1, 3),
            Metadata(id="t", schema_string=_schema(), configuration={"delta.constraints.c": "x>0"}),
            "checkConstraints",
        ),
        (
            Protocol(1, 4),
            Metadata(id="t", schema_string=_schema(g={"delta.generationExpression": "1"})),
            "generatedColumns",
        ),
        (Protocol(1, 6), Metadata(id="t", schema_string=_schema(i={"delta.identity.start": 1})), "identityColumns"),
        (Protocol(1, 7, None, ("domainMetadata", "rowTracking")), META, "rowTracking"),
        (Protocol(1, 7, None, ("icebergCompatV2", "columnMapping")), META, "icebergCompatV2"),
    ],
)
def test_write_is_refused_where_the_table_needs_what_we_do_not_write(protocol, metadata, feature):
    with pytest.raises(UnsupportedFeatureError) as exc:
        check_can_write(protocol, metadata, ["commit", "write"])
    assert exc.value.feature == feature
    check_can_write(protocol, metadata, ["commit"])  # a commitInfo-only commit is still fine


def test_optimize_refuses_clustering_and_row_tracking_but_write_appends_to_clustered_tables():
    clustered = Protocol(1, 7, None, ("domainMetadata", "clustering"))
    check_can_write(clustered, META, ["write"])
    with pytest.raises(UnsupportedFeatureError, match="clustering"):
        check_can_write(clustered, META, ["optimize"])
    check_can_write(Protocol(3, 7, ("deletionVectors",), ("deletionVectors",)), META, ["optimize", "remove"])


def test_commit_refuses_unknown_writer_features_and_catalog_managed_tables():
    with pytest.raises(UnsupportedFeatureError) as exc:
        check_can_write(Protocol(1, 7, None, ("someFutureFeature",)), META, ["commit"])
    assert exc.value.feature == "someFutureFeature"
    with pytest.raises(OperationNotAllowedError, match="catalog-managed"):
        check_can_write(Protocol(1, 7, None, ("catalogManaged",)), META, ["commit"])
