"""Azure Blob Storage (`abfs://`, `abfss://`, `az://`) through adlfs, with the SDK's retries off.

Create-only Put Blob
(https://learn.microsoft.com/rest/api/storageservices/specifying-conditional-headers-for-blob-service-operations):
`If-None-Match: *` (`upload_blob(overwrite=False)`); 409 BlobAlreadyExists or 412 ConditionNotMet = it exists.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping
from typing import Any

from .base import new_filesystem

log = logging.getLogger(__name__)

SCHEMES = ("abfs", "abfss", "az")
CREATE_KWARGS: Mapping[str, Any] = {"overwrite": False}
EXISTS_CODES = frozenset({"BlobAlreadyExists", "ConditionNotMet", "PathAlreadyExists"})


@functools.cache
def _single_attempt_adlfs() -> type:
    """adlfs's filesystem with the SDK's retry policy (10 retries by default; shared by every client made from
    the service client) set to none."""
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
    return new_filesystem(_single_attempt_adlfs(), uri, options)
