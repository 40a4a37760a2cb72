"""Names of the files in `_delta_log` (Spark `FileNames`; PROTOCOL.md "Delta Log Entries"); anything
matching no pattern here (hidden `.crc` files, `.tmp/`, `_commits/`, ...) is not part of the log."""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum

LOG_DIR_NAME = "_delta_log"
LAST_CHECKPOINT_NAME = "_last_checkpoint"
SIDECAR_DIR_NAME = "_sidecars"
VERSION_DIGITS = 20

_COMMIT_RE = re.compile(r"^(\d{20})\.json$")
_CLASSIC_CP_RE = re.compile(r"^(\d{20})\.checkpoint\.parquet$")
_MULTIPART_CP_RE = re.compile(r"^(\d{20})\.checkpoint\.(\d{10})\.(\d{10})\.parquet$")
_UUID_CP_RE = re.compile(r"^(\d{20})\.checkpoint\.([^.]+)\.(json|parquet)$")
_COMPACTION_RE = re.compile(r"^(\d{20})\.(\d{20})\.compacted\.json$")
_CRC_RE = re.compile(r"^(\d{20})\.crc$")


class LogFileKind(Enum):
    """What a file in `_delta_log` is."""

    COMMIT = "commit"
    CHECKPOINT_CLASSIC = "checkpoint"
    CHECKPOINT_MULTIPART = "multipart-checkpoint"
    CHECKPOINT_UUID = "v2-checkpoint"
    COMPACTION = "compaction"
    CHECKSUM = "crc"

    @property
    def is_checkpoint(self) -> bool:
        return self in (LogFileKind.CHECKPOINT_CLASSIC, LogFileKind.CHECKPOINT_MULTIPART, LogFileKind.CHECKPOINT_UUID)


@dataclass(frozen=True, slots=True)
class FileInfo:
    """One listed file: full URI or path, size in bytes, modification time in ms."""

    path: str
    size: int
    modification_time: int

    @property
    def name(self) -> str:
        return self.path.rstrip("/").rsplit("/", 1)[-1]


@dataclass(frozen=True, slots=True)
class ParsedLogPath:
    """A listed log file with what its name says about it."""

    file: FileInfo
    version: int
    kind: LogFileKind
    part: int | None = None
    num_parts: int | None = None
    end_version: int | None = None  # compactions: last version covered
    uuid: str | None = None
    extension: str = "json"

    @property
    def name(self) -> str:
        return self.file.name


def parse_log_path(file: FileInfo) -> ParsedLogPath | None:
    """Classify one listed file by name; `None` for anything that is not a log file."""
    name = file.name
    if m := _COMMIT_RE.match(name):
        return ParsedLogPath(file, int(m[1]), LogFileKind.COMMIT)
    if m := _CLASSIC_CP_RE.match(name):
        return ParsedLogPath(file, int(m[1]), LogFileKind.CHECKPOINT_CLASSIC, extension="parquet")
    if m := _MULTIPART_CP_RE.match(name):
        part, parts = int(m[2]), int(m[3])
        if parts == 1:  # Spark writes a single part as a classic checkpoint; treat `.1.1.` the same way
            return ParsedLogPath(file, int(m[1]), LogFileKind.CHECKPOINT_CLASSIC, extension="parquet")
        if not 1 <= part <= parts:
            return None
        return ParsedLogPath(
            file, int(m[1]), LogFileKind.CHECKPOINT_MULTIPART, part=part, num_parts=parts, extension="parquet"
        )
    if m := _UUID_CP_RE.match(name):
        return ParsedLogPath(file, int(m[1]), LogFileKind.CHECKPOINT_UUID, uuid=m[2], extension=m[3])
    if m := _COMPACTION_RE.match(name):
        lo, hi = int(m[1]), int(m[2])
        if lo >= hi:
            return None
        return ParsedLogPath(file, lo, LogFileKind.COMPACTION, end_version=hi)
    if m := _CRC_RE.match(name):
        return ParsedLogPath(file, int(m[1]), LogFileKind.CHECKSUM)
    return None


def version_prefix(version: int) -> str:
    """The zero-padded prefix every log file of `version` starts with."""
    return f"{version:0{VERSION_DIGITS}d}."


def commit_name(version: int) -> str:
    return f"{version:0{VERSION_DIGITS}d}.json"


def checkpoint_name(version: int) -> str:
    return f"{version:0{VERSION_DIGITS}d}.checkpoint.parquet"


def multipart_checkpoint_name(version: int, part: int, num_parts: int) -> str:
    return f"{version:0{VERSION_DIGITS}d}.checkpoint.{part:010d}.{num_parts:010d}.parquet"
