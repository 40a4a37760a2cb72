"""Google Cloud Storage (`gs://`, `gcs://`) through gcsfs: the single-attempt JSON-API filesystem.

* Create-only upload (https://cloud.google.com/storage/docs/request-preconditions): `ifGenerationMatch=0`;
  412 = it exists. Emulators that ignore the precondition cannot be detected (gcp-storage-emulator does).
* The JSON API only (`gcsfs.core.GCSFileSystem`): recent gcsfs's default class writes to zonal buckets over
  gRPC ignoring `mode="create"` (it would overwrite a commit), and asks the storage-control API for each
  bucket's layout, which emulators and private endpoints do not serve.
"""

from __future__ import annotations

import errno
import functools
from collections.abc import Mapping
from typing import Any

from .base import new_filesystem

SCHEMES = ("gs", "gcs")
#: `mode="create"` adds `ifGenerationMatch=0`; an existing object is answered 412, with no code of its own.
CREATE_KWARGS: Mapping[str, Any] = {"mode": "create"}
EXISTS_CODES: frozenset[str] = frozenset()


@functools.cache
def _single_attempt_gcsfs() -> type:
    """gcsfs's JSON-API filesystem making one attempt per request (`_request.__wrapped__`; the decorated one
    retries 6 times), with the errors gcsfs renders without a status (a 403 as a bare `OSError`, a 502 as
    `ProxyError`, a 400 as `ValueError`) made classifiable."""
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
    return new_filesystem(_single_attempt_gcsfs(), uri, options)
