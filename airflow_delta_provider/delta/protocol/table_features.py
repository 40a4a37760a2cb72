"""Protocol versions and table features: what this reader can read, and what a writer must check.

PROTOCOL.md "Table Features". A reader refuses a table before reading any file when the reader
version is above 3 or any reader feature is unknown (Java kernel `validateKernelCanReadTheTable`).
Features that do not change how the log is replayed are accepted; deletion vectors and column
mapping are honoured by the replay and the file index.
"""

from __future__ import annotations

from collections.abc import Iterable

from ..errors import OperationNotAllowedError, UnsupportedFeatureError
from .actions import Metadata, Protocol

MAX_READER_VERSION = 3
MAX_WRITER_VERSION = 7

#: Reader features this library implements for log replay and file listing.
SUPPORTED_READER_FEATURES: frozenset[str] = frozenset(
    """columnMapping deletionVectors timestampNtz v2Checkpoint vacuumProtocolCheck typeWidening typeWidening-preview
    variantType variantType-preview variantShredding variantShredding-preview geospatial""".split()
)

#: Features that forbid filesystem-only access: the catalog owns the commits.
CATALOG_FEATURES: frozenset[str] = frozenset({"catalogManaged", "catalogOwned", "catalogOwned-preview"})

_ICEBERG = "icebergCompatV1 icebergCompatV2 icebergCompatV3 icebergWriterCompatV1 icebergWriterCompatV3 "
#: Writer features a maintenance operation here (a report, a future VACUUM) knows how to respect.
KNOWN_WRITER_FEATURES: frozenset[str] = SUPPORTED_READER_FEATURES | frozenset(
    f"""appendOnly invariants checkConstraints generatedColumns allowColumnDefaults changeDataFeed identityColumns
    rowTracking domainMetadata {_ICEBERG} clustering inCommitTimestamp collations collations-preview
    checkpointProtection materializePartitionColumns""".split()
)


def check_can_read(protocol: Protocol, *, table: str | None = None, version: int | None = None) -> None:
    """Raise `UnsupportedFeatureError` unless every reader requirement of `protocol` is implemented."""
    rv = protocol.min_reader_version
    if rv > MAX_READER_VERSION or rv < 1:
        message = f"Unsupported Delta protocol reader version {rv} (this reader supports 1 to {MAX_READER_VERSION})"
        raise UnsupportedFeatureError(message, feature=f"readerVersion={rv}", table=table, version=version)
    for feature in (protocol.reader_features or ()) if rv == 3 else ():
        if feature in CATALOG_FEATURES or feature not in SUPPORTED_READER_FEATURES:
            message = f"Unsupported Delta reader feature '{feature}'"
            if feature in CATALOG_FEATURES:
                message += ": the table is catalog-managed and cannot be read from the filesystem alone"
            raise UnsupportedFeatureError(message, feature=feature, table=table, version=version)


_LEGACY_WRITER_FEATURES = (
    (2, {"appendOnly", "invariants"}),
    (3, {"checkConstraints"}),
    (4, {"changeDataFeed", "generatedColumns"}),
    (5, {"columnMapping"}),
    (6, {"identityColumns"}),
)


def table_features(protocol: Protocol) -> frozenset[str]:
    """Every feature the protocol enables, legacy versions translated to feature names."""
    names = set(protocol.reader_features or ()) | set(protocol.writer_features or ())
    w = protocol.min_writer_version
    if w < 7:  # PROTOCOL.md "Table Features": the features each legacy writer version implies
        for since, legacy in _LEGACY_WRITER_FEATURES:
            if w >= since:
                names |= legacy
    return frozenset(names)


#: What an operation does. Maintenance: "remove" drops data files (dataChange=true removes), "cleanup"
#: deletes log or data files. Commits: "commit" writes a log entry (every transaction, a commitInfo-only
#: one such as VACUUM START included), "write" adds new data files (dataChange=true adds), "optimize"
#: rewrites files without changing data (dataChange=false adds and removes), "restore" puts back an older
#: version's files, metadata and protocol (RESTORE: dataChange=true adds of existing files).
OPERATIONS = frozenset(
    {"read", "report", "checkpoint", "vacuum", "cleanup", "remove", "commit", "write", "optimize", "restore"}
)

#: Writer features whose obligations this library does not meet, by operation, when the table uses them
#: (PROTOCOL.md "Table Features" and each feature's section): new rows need row IDs, evaluated
#: constraints and generated or identity values, Iceberg metadata and collation-aware stats;
#: compaction must keep row IDs, Iceberg metadata, collation-aware stats and clustering.
UNMET_WRITE_OBLIGATIONS: dict[str, frozenset[str]] = {
    "write": frozenset(
        f"""rowTracking invariants checkConstraints generatedColumns identityColumns {_ICEBERG} collations
        collations-preview materializePartitionColumns""".split()
    ),
    "optimize": frozenset(f"rowTracking {_ICEBERG} collations collations-preview clustering".split()),
}
#: RESTORE's adds are `dataChange=true`, so the transaction holds its commit to `write`'s obligations;
#: beyond them, Delta Spark's `RestoreTableCommand` rewrites the clustering domain to the restored version's
#: clustering columns (`DomainMetadataUtils.handleDomainMetadataForRestoreTable`), which this library does not.
UNMET_WRITE_OBLIGATIONS["restore"] = UNMET_WRITE_OBLIGATIONS["write"] | {"clustering"}

#: Field metadata keys that put a legacy feature to use (a writer-2 table supports invariants, but
#: only a column with `delta.invariants` makes a writer evaluate them).
_FIELD_USE_KEYS = {
    "invariants": "delta.invariants",
    "generatedColumns": "delta.generationExpression",
    "identityColumns": "delta.identity.",
}


def _field_metadata_keys(node: object) -> set[str]:
    """Every field metadata key anywhere in a schema JSON (nested structs, arrays, maps)."""
    if isinstance(node, list):
        return set().union(*map(_field_metadata_keys, node))
    if not isinstance(node, dict):
        return set()
    own = set(node["metadata"]) if isinstance(node.get("metadata"), dict) else set()
    return own.union(*map(_field_metadata_keys, node.values()))


def features_in_use(protocol: Protocol, metadata: Metadata) -> frozenset[str]:
    """The protocol's features, legacy column features only where the schema or properties use them."""
    features = set(table_features(protocol))
    keys = _field_metadata_keys(metadata.schema_json) if metadata.schema_string else set()
    for feature, key in _FIELD_USE_KEYS.items():
        if feature in features and not any(k.startswith(key) for k in keys):
            features.discard(feature)
    if "checkConstraints" in features and not any(k.startswith("delta.constraints.") for k in metadata.configuration):
        features.discard("checkConstraints")
    return frozenset(features)


def check_can_write(
    protocol: Protocol,
    metadata: Metadata,
    operations: Iterable[str],
    *,
    table: str | None = None,
    version: int | None = None,
) -> None:
    """Writer-side protocol check for maintenance operations and commits (see `OPERATIONS`): anything that
    commits, vacuums, checkpoints or cleans the log is a writer (PROTOCOL.md), so it must know every writer
    feature, leave catalog-managed tables alone, meet the obligations of the features the table uses for
    what it writes (`UNMET_WRITE_OBLIGATIONS`), and not remove files from an append-only table."""
    ops = set(operations)
    unknown_ops = ops - OPERATIONS
    if unknown_ops:
        raise ValueError(f"unknown operations {sorted(unknown_ops)}; expected a subset of {sorted(OPERATIONS)}")
    check_can_read(protocol, table=table, version=version)
    writes = ops - {"read", "report"}
    if not writes:
        return
    where = {"table": table, "version": version}
    if protocol.min_writer_version > MAX_WRITER_VERSION:
        wv = protocol.min_writer_version
        raise UnsupportedFeatureError(
            f"Unsupported Delta protocol writer version {wv}", feature=f"writerVersion={wv}", **where
        )
    for feature in sorted(table_features(protocol) & CATALOG_FEATURES):
        message = f"Operation {sorted(writes)} is blocked on a catalog-managed table (feature '{feature}')"
        raise OperationNotAllowedError(message, **where)
    for feature in (protocol.writer_features or ()) if protocol.min_writer_version == 7 else ():
        if feature not in KNOWN_WRITER_FEATURES:
            message = f"Unsupported Delta writer feature '{feature}' for {sorted(writes)}"
            raise UnsupportedFeatureError(message, feature=feature, **where)
    in_use = features_in_use(protocol, metadata)
    for op in sorted(writes & UNMET_WRITE_OBLIGATIONS.keys()):
        for feature in sorted(in_use & UNMET_WRITE_OBLIGATIONS[op]):
            message = f"Delta writer feature '{feature}' is not supported for '{op}': this library does not meet its"
            raise UnsupportedFeatureError(f"{message} obligations for that operation", feature=feature, **where)
    if "remove" in writes and str(metadata.configuration.get("delta.appendOnly", "false")).lower() == "true":
        raise OperationNotAllowedError(
            "This table is configured to only allow appends (delta.appendOnly=true)", **where
        )
