"""Issue 25: each operator's own arguments come from its action's options (`operators.parsers.action_arguments`),
not written out per operator. Shown here: the public signatures are the ones the operators had when written by
hand, Airflow sees them (`default_args`, `expand`, unknown and missing arguments), and every action argument is
templated. Real operators and a real DAG; nothing runs a job.
"""

from __future__ import annotations

import datetime as dt
import inspect

import pytest

pytest.importorskip("airflow")

from airflow.sdk import DAG

from airflow_delta_provider.delta.protocol.lake_policy import DEFAULT_MAX_DEPTH
from airflow_delta_provider.delta.protocol.optimize import DEFAULT_MIN_NUM_FILES, DEFAULT_SMALL_FILE_MB
from airflow_delta_provider.operators import delta as ops

pytestmark = pytest.mark.airflow
REQUIRED = inspect.Parameter.empty
#: Each operator's own keyword arguments and defaults, as its hand-written `__init__` had them.
SIGNATURES = {
    "DeltaLogCleanupOperator": {"apply": False, "write_checkpoint_first": False, "lease_location": None},
    "DeltaVacuumOperator": {
        **{"dry_run": True, "mode": "full", "enforce_retention_duration": True, "untracked_grace_hours": None},
        **{"plan": None, "quarantine": False, "lease_location": None},
    },
    "DeltaVacuumUndoOperator": {"quarantine_id": REQUIRED},
    "DeltaVacuumPurgeOperator": {"older_than_hours": 168.0, "dry_run": True},
    "DeltaOptimizeOperator": {
        **{"dry_run": False, "zorder_by": None, "target_size": None, "min_num_files": DEFAULT_MIN_NUM_FILES},
        **{"where": None, "min_small_file_ratio": None, "small_file_mb": DEFAULT_SMALL_FILE_MB},
        **{"max_commit_bytes": None, "max_files": None, "max_bytes": None},
    },
    "DeltaRestoreOperator": {"dry_run": True, "allow_partial": False, "plan": None},
    "DeltaRepairOperator": {"dry_run": True},
    "DeltaPurgeOperator": {
        **{"dry_run": True, "min_deleted_ratio": 0.0, "where": None, "max_files": None, "max_bytes": None},
        **{"target_size": None, "max_commit_bytes": None, "plan": None},
    },
    "DeltaStatsBackfillOperator": {
        **{"dry_run": True, "where": None, "max_files": None, "max_bytes": None, "tighten": False},
        "files_per_commit": None,
    },
    "DeltaLakeScanOperator": {"prefixes": (), "tables": (), "policy": None, "max_depth": DEFAULT_MAX_DEPTH},
    "DeltaLakePlanOperator": {"budget_bytes": None, "budget_requests": None, "budget_seconds": None},
    "TombstoneReportOperator": {},  # beyond `DeltaJobOperator`'s, as for the checkpoint
    "DeltaCheckpointOperator": {},
}


@pytest.mark.parametrize("name", sorted(SIGNATURES))
def test_each_operator_keeps_its_public_signature(name: str) -> None:
    cls = getattr(ops, name)
    params = inspect.signature(cls.__init__).parameters
    if not SIGNATURES[name]:
        assert cls.__init__ is ops.DeltaJobOperator.__init__
        return
    own = {p.name: p.default for p in params.values() if p.kind is p.KEYWORD_ONLY}
    assert own == SIGNATURES[name]
    assert [p.kind for p in params.values()][-1] is inspect.Parameter.VAR_KEYWORD  # the base's, Airflow's
    assert set(SIGNATURES[name]) <= set(cls.template_fields)  # every action argument is templated


def test_airflow_sees_the_arguments() -> None:
    """`default_args` fill an action argument; a missing required one and an unknown one are refused."""
    with DAG("args", schedule=None, start_date=dt.datetime(2024, 1, 1), default_args={"dry_run": False}):
        vacuum = ops.DeltaVacuumOperator(task_id="v", table_uri="/nowhere/t")
        repair = ops.DeltaRepairOperator(task_id="r", table_uri="/nowhere/t", dry_run=True)
    assert vacuum.build_request({}).options.apply is True
    assert repair.build_request({}).options.apply is False  # given beats default_args
    with pytest.raises(TypeError, match="quarantine_id"):
        ops.DeltaVacuumUndoOperator(task_id="u", table_uri="/nowhere/t")
    with pytest.raises(TypeError, match="dry_rnu"):
        ops.DeltaRepairOperator(task_id="r", table_uri="/nowhere/t", dry_rnu=False)


def test_an_action_argument_maps_and_renders() -> None:
    """`expand` takes an action argument by name; a template in one renders and is parsed once rendered."""
    with DAG("map", schedule=None, start_date=dt.datetime(2024, 1, 1)):
        mapped = ops.DeltaOptimizeOperator.partial(task_id="o", table_uri="/nowhere/t").expand(max_files=[1, 2])
    assert mapped.expand_input.value == {"max_files": [1, 2]}
    op = ops.DeltaVacuumOperator(
        task_id="v", table_uri="/nowhere/t", mode="{{ params.mode }}", dry_run="{{ params.d }}"
    )
    op.render_template_fields({"params": {"mode": "LITE", "d": "no"}})
    options = op.build_request({}).options
    assert (options.mode, options.apply) == ("lite", True)
