"""JDK class-data sharing (dynamic AppCDS) for the spark-submit driver JVM: option composition and promotion.

A driver JVM started with `-XX:ArchiveClassesAtExit=F` writes the classes it loaded to `F` when it exits;
later JVMs started with `-XX:SharedArchiveFile=F` map them instead of loading and verifying each class
(seconds of a Spark driver's start-up). Measured with JDK 17.0.15 (`-Xshare:auto`, the default):

* an archive recorded with another classpath is refused with a warning on stdout
  (`[cds,dynamic] Unable to use shared archive`) and the JVM runs without it (the JDK's header check
  does the same for another JVM build; not tried here, one JDK);
* a file that is not an archive (garbage, empty) is ignored silently, but then even the JDK's default
  CDS archive is off; with `-Xlog:cds` such a file crashes the JVM (SIGSEGV);
* a truncated archive crashes the JVM (SIGBUS, exit 134) before `main`.

Hence an archive is never recorded in place: each recording run writes a unique temp file beside the
final path, and only a run that succeeded gets it renamed into place (`os.replace`, atomic), so a
reader sees either no archive or a complete one. A JVM that cannot write the archive at exit (its
directory missing) exits 1, so callers create the directory first. Standard library only.
"""

from __future__ import annotations

import os
import re
import uuid

#: Options that already decide class-data sharing: when present, the user's choice stands.
USER_CDS_OPTIONS = ("-XX:SharedArchiveFile", "-XX:ArchiveClassesAtExit", "-Xshare:off", "-XX:-UseSharedSpaces")
#: Spark splits extraJavaOptions on whitespace and interprets quotes and backslashes.
_UNSAFE = re.compile(r"[\s'\"\\]")


def check_path(archive: str) -> str:
    """`archive` unchanged, or ValueError when it cannot travel in `spark.driver.extraJavaOptions`."""
    if not archive:
        raise ValueError("class_archive must be a non-empty path")
    if _UNSAFE.search(archive):
        raise ValueError(
            f"class_archive {archive!r} contains whitespace, a quote or a backslash: Spark splits "
            "spark.driver.extraJavaOptions on whitespace and parses quotes, so choose a path without them"
        )
    return archive


def has_user_cds_option(java_options: str | None) -> bool:
    """Whether the options already set class-data sharing (an archive to use or record, or sharing off)."""
    return any(token.startswith(USER_CDS_OPTIONS) for token in (java_options or "").split())


def temp_path(archive: str) -> str:
    """A unique path beside `archive` for one recording run (same directory, so `os.replace` is atomic)."""
    return f"{archive}.{os.getpid()}-{uuid.uuid4().hex[:12]}.tmp"


def java_options(archive: str, current: str | None, *, recorded: bool) -> tuple[str | None, str | None]:
    """(new `spark.driver.extraJavaOptions`, temp path the JVM writes at exit or None).

    `recorded`: the archive exists (see `is_recorded`), so the JVM uses it; else this run records it into
    a fresh temp path, to `promote` after the run succeeded. Options that already set class-data sharing
    are returned unchanged with nothing to promote.
    """
    check_path(archive)
    if has_user_cds_option(current):
        return current, None
    if recorded:
        flag, tmp = f"-XX:SharedArchiveFile={archive}", None
    else:
        tmp = temp_path(archive)
        flag = f"-XX:ArchiveClassesAtExit={tmp}"
    return (f"{current.strip()} {flag}" if current and current.strip() else flag), tmp


def is_recorded(archive: str) -> bool:
    """Whether a non-empty archive is in place (an empty file is not an archive: record again)."""
    try:
        return os.path.isfile(archive) and os.path.getsize(archive) > 0
    except OSError:
        return False


def promote(tmp: str, final: str) -> bool:
    """Rename the archive a successful run recorded at `tmp` onto `final` (atomic); remove it if empty.

    Returns whether `final` was replaced. Call only after the recording run succeeded; on failure `discard`.
    """
    try:
        size = os.path.getsize(tmp)
    except OSError:
        return False  # the JVM wrote nothing (e.g. no base CDS archive in this JDK)
    if size == 0:
        discard(tmp)
        return False
    os.replace(tmp, final)
    return True


def discard(tmp: str) -> None:
    """Remove a recording run's temp file, if any."""
    try:
        os.remove(tmp)
    except FileNotFoundError:
        pass
