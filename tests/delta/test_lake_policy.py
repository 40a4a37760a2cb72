"""The lake policy: defaults from Delta's table properties, per-table/prefix overrides in order, and typed
errors naming the bad key; JSON without PyYAML, YAML with it."""

from __future__ import annotations

import json
import sys

import pytest

from airflow_delta_provider.delta.errors import InvalidArgumentError
from airflow_delta_provider.delta.lake import load_policy, parse_policy, parse_policy_text
from airflow_delta_provider.delta.protocol.lake_policy import defaults_from_properties

DAY = 86_400_000
T = "s3://lake/gold/orders"


def test_defaults_follow_table_properties():
    plain = defaults_from_properties({})
    assert (plain.target_file_size, plain.small_file_bytes) == (100 * 2**20, 50 * 2**20)
    assert (plain.deleted_file_retention_ms, plain.log_retention_ms) == (7 * DAY, 30 * DAY)
    assert plain.checkpoint_interval == 10 and plain.min_small_files == 50
    conf = {
        "delta.targetFileSize": "256mb",
        "delta.deletedFileRetentionDuration": "interval 2 days",
        "delta.logRetentionDuration": "interval 60 days",
        "delta.checkpointInterval": "100",
    }
    p = defaults_from_properties(conf)
    assert (p.target_file_size, p.small_file_bytes) == (256 * 2**20, 128 * 2**20)
    assert (p.deleted_file_retention_ms, p.log_retention_ms, p.checkpoint_interval) == (2 * DAY, 60 * DAY, 100)
    # auto compaction's conventions: a 128 MiB target when the table sets none
    assert defaults_from_properties({"delta.autoOptimize.autoCompact": "true"}).target_file_size == 128 * 2**20


def test_rules_apply_in_order_by_prefix_and_glob():
    policy = parse_policy(
        {
            "defaults": {"min_small_files": 10, "target_file_size": "64mb"},
            "never_unattended": ["vacuum"],
            "tables": [
                {"match": "s3://lake/gold", "min_small_files": 4, "disabled": ["log_cleanup"]},
                {"match": "s3://lake/*/orders", "target_file_size": 1024, "never_unattended": "optimize"},
                {"match": "s3://lake/gol", "skip": True},  # a prefix matches whole folder names only
            ],
            "never_touch": ["s3://lake/raw/*"],
        }
    )
    p = policy.for_table(T, {})
    assert (p.min_small_files, p.target_file_size, p.small_file_bytes) == (4, 1024, 512)
    assert p.never_unattended == {"vacuum", "optimize"} and p.disabled == {"log_cleanup"} and not p.skip
    other = policy.for_table("s3://lake/silver/events", {"delta.targetFileSize": "1g"})
    assert (other.min_small_files, other.target_file_size) == (10, 64 * 2**20)
    assert policy.for_table("s3://lake/raw/clicks", {}).skip


def test_a_policy_never_shortens_the_tables_retention():
    policy = parse_policy({"defaults": {"deleted_file_retention": "1h", "log_retention": "90d"}})
    p = policy.for_table(T, {"delta.deletedFileRetentionDuration": "interval 7 days"})
    assert p.deleted_file_retention_ms == 7 * DAY and p.log_retention_ms == 90 * DAY


@pytest.mark.parametrize(
    ("document", "argument"),
    [
        ({"defaults": {"target_fil_size": 1}}, "policy.defaults.target_fil_size"),
        ({"tables": [{"match": "x", "min_small_files": 0}]}, "policy.tables[0].min_small_files"),
        ({"tables": [{"match": "x", "target_file_size": "big"}]}, "policy.tables[0].target_file_size"),
        ({"tables": [{"min_small_files": 3}]}, "policy.tables[0].match"),
        ({"tables": [{"match": "x", "never_unattended": ["zorder"]}]}, "policy.tables[0].never_unattended"),
        ({"tables": [{"match": "x", "skip": "yes"}]}, "policy.tables[0].skip"),
        ({"tables": [{"match": "x", "max_deleted_rows_ratio": 2}]}, "policy.tables[0].max_deleted_rows_ratio"),
        ({"defaults": {"log_retention": "soon"}}, "policy.defaults.log_retention"),
        ({"tables": {"match": "x"}}, "policy.tables"),
        ({"version": 2}, "policy.version"),
        ({"nevr_touch": []}, "policy.nevr_touch"),
        ([1, 2], "policy"),
    ],
)
def test_bad_documents_name_the_key(document, argument):
    with pytest.raises(InvalidArgumentError) as info:
        parse_policy(document)
    assert info.value.argument == argument or argument in str(info.value)


def test_unknown_key_suggests_the_near_one():
    with pytest.raises(InvalidArgumentError, match="did you mean 'target_file_size'"):
        parse_policy({"defaults": {"target_fil_size": 1}})


DOC = {"defaults": {"min_small_files": 3}, "tables": [{"match": "s3://lake/gold", "skip": True}]}
YAML = """
defaults:
  min_small_files: 3
tables:
  - match: s3://lake/gold
    skip: true
"""


def test_json_and_yaml_files_give_the_same_policy(tmp_path):
    (tmp_path / "p.json").write_text(json.dumps(DOC))
    (tmp_path / "p.yaml").write_text(YAML)
    a, b = load_policy(str(tmp_path / "p.json")), load_policy(str(tmp_path / "p.yaml"))
    assert a == b == parse_policy(DOC)
    assert a.for_table(T, {}).skip and a.for_table("s3://lake/silver/x", {}).min_small_files == 3


def test_json_needs_no_pyyaml(monkeypatch):
    monkeypatch.setitem(sys.modules, "yaml", None)  # import yaml now fails
    assert parse_policy_text(json.dumps(DOC)) == parse_policy(DOC)
    with pytest.raises(InvalidArgumentError, match="PyYAML is not installed"):
        parse_policy_text(YAML)


def test_bad_files(tmp_path):
    with pytest.raises(InvalidArgumentError, match="not found"):
        load_policy(str(tmp_path / "missing.yaml"))
    (tmp_path / "bad.yaml").write_text("defaults: [unclosed")
    with pytest.raises(InvalidArgumentError, match="not JSON or YAML"):
        load_policy(str(tmp_path / "bad.yaml"))
    (tmp_path / "bad.json").write_text("defaults: 1")
    with pytest.raises(InvalidArgumentError, match="not JSON"):
        load_policy(str(tmp_path / "bad.json"))
    assert load_policy(None) == parse_policy(None)
