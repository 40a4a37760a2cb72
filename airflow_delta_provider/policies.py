"""What a failed or late Delta task means to Airflow: a retry policy that reads our typed errors (Airflow 3.3
`retry_policy=`) and a `DeadlineAlert` callback for a maintenance run past its window (`maintenance_overran`).

A commit conflict retries soon (the next try plans again on the new version); a failing or throttled store
retries later; what a retry cannot change (an unsupported table feature, a refused argument or plan, a
corrupt log, a retention safety check, a table that is not there) fails at once instead of spending the
task's retries. Errors of a job (spark-submit or in-process) arrive wrapped in `DeltaJobError`; the policy
reads the `DeltaError` inside.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from airflow.sdk import ExceptionRetryPolicy, RetryAction, RetryDecision, RetryRule

from .delta import errors

log = logging.getLogger(__name__)

#: Errors no retry can fix: the table, its log, or the request would have to change first.
PERMANENT: tuple[type[errors.DeltaError], ...] = (
    errors.UnsupportedFeatureError,
    errors.OperationNotAllowedError,
    errors.InvalidArgumentError,
    errors.SchemaMismatchError,
    errors.LogCorruptedError,
    errors.TableNotFoundError,
    errors.VersionNotFoundError,
    errors.TimestampOutOfRangeError,
    errors.TableRecreatedError,
    errors.ResourceLimitError,
    errors.BucketNotFoundError,
    errors.LeaseError,
    errors.QuarantineError,
)


class DeltaRetryPolicy(ExceptionRetryPolicy):
    """`ExceptionRetryPolicy` over the `DeltaError` a task raised, itself or inside `DeltaJobError`."""

    def evaluate(self, exception: BaseException, try_number: int, max_tries: int, context: Any = None) -> RetryDecision:
        inner = getattr(exception, "error", None)
        return super().evaluate(
            inner if isinstance(inner, errors.DeltaError) else exception, try_number, max_tries, context
        )


def delta_retry_policy(
    conflict_delay: timedelta = timedelta(seconds=10), storage_delay: timedelta = timedelta(minutes=2)
) -> DeltaRetryPolicy:
    """The policy for any Delta task: `retry_policy=delta_retry_policy()` (with `retries=` > 0)."""
    return DeltaRetryPolicy(
        rules=[
            RetryRule(
                exception=errors.ConcurrentModificationError,
                action=RetryAction.RETRY,
                retry_delay=conflict_delay,
                reason="another writer committed first: plan again on the new version",
            ),
            RetryRule(exception=list(PERMANENT), action=RetryAction.FAIL, reason="a retry cannot change this"),
            RetryRule(
                exception=errors.StorageError,
                action=RetryAction.RETRY,
                retry_delay=storage_delay,
                reason="the store failed or throttled: try again later",
            ),
        ]
    )


async def maintenance_overran(context: Mapping[str, Any] | None = None, **kwargs: Any) -> str:
    """`DeadlineAlert` callback (an `AsyncCallback`: the triggerer runs it): a maintenance run is still going
    past its deadline, typically waiting for a person's answer. Logs a warning naming the run and returns it
    (Airflow keeps a callback's result as text: the callback's `output`)."""
    run = (context or {}).get("dag_run") or {}
    deadline = (context or {}).get("deadline") or {}
    message = (
        f"Delta maintenance run {run.get('dag_run_id')} of {run.get('dag_id')} (queued at {run.get('queued_at')}, "
        f"{run.get('state')}) is past its deadline {deadline.get('deadline_time')}: is it waiting for an answer?"
    )
    log.warning("%s%s", message, f" {kwargs}" if kwargs else "")
    return message
