"""Azure Blob Storage (`abfs://`, `abfss://`, `az://`) through adlfs: the single-attempt filesystem and the
create-only Put Blob. What Azure guarantees:

* **Create-only Put Blob**
  (https://learn.microsoft.com/rest/api/storageservices/specifying-conditional-headers-for-blob-service-operations):
  `If-None-Match: *` (adlfs `pipe_file(overwrite=False)`, i.e. `upload_blob(overwrite=False)`) writes only
  if the blob is absent; 409 BlobAlreadyExists or 412 ConditionNotMet = it exists. An adlfs too old to take
  `overwrite` leaves `atomic_put_if_absent` False.
* **Retries**: the Azure SDK's retry count is 0 (the store's `RetryPolicy` is the only layer).
* The account may be in the URI (`abfs://container@account.dfs.core.windows.net/table`); listed names keep
  the root's spelling.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping
from typing import Any

from .base import filesystem_kwargs

log = logging.getLogger(__name__)

SCHEMES = ("abfs", "abfss", "az")
#: The create-only Put Blob: `overwrite=False` makes `upload_blob` send `If-None-Match: *`; a blob (or ADLS
#: path) that exists is answered with one of these codes (409, or 412 ConditionNotMet).
CREATE_KWARGS: Mapping[str, Any] = {"overwrite": False}
EXISTS_CODES = frozenset({"BlobAlreadyExists", "ConditionNotMet", "PathAlreadyExists"})


@functools.cache
def _single_attempt_adlfs() -> type:
    """adlfs's filesystem with the Azure SDK's retry policy (10 retries by default) set to none.

    The SDK's `StorageRetryPolicy` instance sits in the service client's pipeline (`_config.retry_policy`),
    shared by every blob and container client made from it.
    """
    import adlfs

    class SingleAttemptAzureBlobFileSystem(adlfs.AzureBlobFileSystem):  # type: ignore[misc]
        def do_connect(self) -> None:
            super().do_connect()
            policy = getattr(getattr(self.service_client, "_config", None), "retry_policy", None)
            if policy is not None and hasattr(policy, "total_retries"):
                policy.total_retries = 0
            else:  # an SDK laid out differently: its retries stay, stacked under ours
                log.debug("adlfs: no retry policy found on the service client; the SDK's retries stay on")

    return SingleAttemptAzureBlobFileSystem


def filesystem(uri: str, options: Mapping[str, Any] | None) -> Any:
    """The single-attempt adlfs filesystem for `uri` (its account, when the URI names one) and the options."""
    cls = _single_attempt_adlfs()
    return cls(**filesystem_kwargs(cls, uri, options))
