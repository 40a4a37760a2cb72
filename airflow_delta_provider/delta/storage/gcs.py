"""Google Cloud Storage (`gs://`, `gcs://`) through gcsfs: the single-attempt JSON-API filesystem and the
create-only upload. What GCS guarantees:

* **Create-only upload** (https://cloud.google.com/storage/docs/request-preconditions): `ifGenerationMatch=0`
  (gcsfs `pipe_file(mode="create")`) uploads only if no live object has the name; 412 = it exists. A gcsfs
  too old to take `mode` leaves `atomic_put_if_absent` False. Servers that ignore the precondition silently
  cannot be detected (gcp-storage-emulator does: test against fake-gcs-server).
* **The JSON API only**: `gcsfs.core.GCSFileSystem`, not the class `gcsfs.GCSFileSystem` names in recent
  gcsfs (`ExtendedGcsFileSystem`, its experimental zonal/HNS support): that class writes to zonal buckets
  over gRPC, ignoring `mode="create"` (it would overwrite a commit), and asks the storage-control API for
  each bucket's layout, which emulators and private endpoints do not serve (minutes of timeouts). A zonal
  bucket that refuses JSON-API writes is then a `StorageError`, never a silent overwrite.
* **Retries**: gcsfs's request loop is bypassed (the store's `RetryPolicy` is the only layer).
"""

from __future__ import annotations

import errno
import functools
from collections.abc import Mapping
from typing import Any

from .base import filesystem_kwargs

SCHEMES = ("gs", "gcs")
#: The create-only upload: `mode="create"` adds `ifGenerationMatch=0`; an object that exists is answered 412
#: (and by no code of its own).
CREATE_KWARGS: Mapping[str, Any] = {"mode": "create"}
EXISTS_CODES: frozenset[str] = frozenset()


@functools.cache
def _single_attempt_gcsfs() -> type:
    """gcsfs's JSON-API filesystem with its own request retry loop off and its errors made classifiable.

    `gcsfs.core.GCSFileSystem._request` retries up to 6 times (sleeps of up to 32 s); its undecorated
    function (`__wrapped__`) makes one attempt. gcsfs turns a 403 into a bare `OSError("Forbidden...")`, a
    502 into `requests.exceptions.ProxyError` and a 400 mentioning "invalid" into `ValueError`: they become
    `PermissionError` and gcsfs `HttpError`s with the status, which `classify_error` reads.
    """
    import gcsfs.core
    import requests.exceptions
    from gcsfs.retry import HttpError

    base = gcsfs.core.GCSFileSystem
    request_once = getattr(base._request, "__wrapped__", None)

    class SingleAttemptGCSFileSystem(base):  # type: ignore[misc,valid-type]
        async def _request(self, method: str, path: str, *args: Any, **kwargs: Any) -> Any:
            try:
                if request_once is None:  # a gcsfs without the decorator: its own retries stay
                    return await super()._request(method, path, *args, **kwargs)
                return await request_once(self, method, path, *args, **kwargs)
            except (FileExistsError, FileNotFoundError):
                raise
            except requests.exceptions.ProxyError:  # gcsfs's rendering of a 502 answer
                raise HttpError({"code": 502, "message": "Bad Gateway"}) from None
            except ValueError as exc:
                if str(exc).startswith("Bad Request"):
                    raise HttpError({"code": 400, "message": str(exc)}) from None
                raise
            except OSError as exc:
                if type(exc) is OSError and str(exc).startswith("Forbidden"):
                    raise PermissionError(errno.EACCES, str(exc)) from None
                raise

    return SingleAttemptGCSFileSystem


def filesystem(uri: str, options: Mapping[str, Any] | None) -> Any:
    """The single-attempt JSON-API filesystem for `uri` and the storage options."""
    cls = _single_attempt_gcsfs()
    return cls(**filesystem_kwargs(cls, uri, options))
