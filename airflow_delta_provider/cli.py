"""`deltalog`: inspect a Delta table's transaction log from a shell.

    deltalog version PATH
    deltalog snapshot PATH [--version N | --timestamp T] [--engine local|spark] [--master URL]
                      [--memory-limit-mb MB] [--json]
    deltalog files PATH [--version N | --timestamp T] [--where EXPR] [--engine ...] [--json]
    deltalog tombstones PATH [--retention-hours H] [--engine ...] [--json]
    deltalog history PATH [--limit N] [--json]
    deltalog changes PATH --from N [--fail-on-data-loss] [--json]

Every command takes `--storage-option KEY=VALUE` (repeatable). Errors print one line on stderr and
exit with code 2.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any, TextIO

from .commands.command import Request, run, storage_options_from_env
from .commands.reports import human_bytes
from .delta.errors import DeltaError, InvalidArgumentError
from .delta.protocol.history import format_ms

EXIT_ERROR = 2


def _kv(text: str) -> tuple[str, str]:
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    key, value = text.split("=", 1)
    return key.strip(), value


def _mebibytes(text: str) -> float:
    """A finite, non-negative number of MiB."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not math.isfinite(value) or value < 0 or value * 1024 * 1024 >= 2**63:
        raise argparse.ArgumentTypeError(f"expected a number of MiB >= 0, got {text!r}")
    return value


def _spark_factory(master: str) -> Any:
    """Builds an in-process SparkSession at `master` for `--engine spark`."""

    def factory(options: Mapping[str, Any]) -> Any:
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        from pyspark.sql import SparkSession

        from .delta.engines.spark import SPARK_CONF, hadoop_s3a_conf

        builder = SparkSession.builder.master(master).appName("deltalog")
        for key, value in {**SPARK_CONF, **hadoop_s3a_conf(options), "spark.ui.enabled": "false"}.items():
            builder = builder.config(key, value)
        spark = builder.getOrCreate()
        spark.sparkContext.setLogLevel("ERROR")
        return spark

    return factory


def _run(args: argparse.Namespace, action: str, **fields: Any) -> dict[str, Any]:
    """Run `action` through the command layer; the body with the engine that ran it."""
    options = storage_options_from_env(args.path, dict(args.storage_option or []))
    limit_mb = getattr(args, "memory_limit_mb", None)
    engine = getattr(args, "engine", "local")
    if engine == "spark" and limit_mb is not None:
        raise InvalidArgumentError("--memory-limit-mb limits the local engine; drop it with --engine spark")
    limit: int | str | None = "auto"
    if limit_mb is not None:
        limit = int(limit_mb * 1024 * 1024) if limit_mb > 0 else None
    request = Request(
        table=args.path,
        action=action,
        version=getattr(args, "version", None),
        timestamp=getattr(args, "timestamp", None),
        engine=engine,
        storage_options=options,
        memory_limit_bytes=limit,
        **fields,
    )
    outcome = run(request, _spark_factory(args.master) if engine == "spark" else None)
    return {**outcome.body, "engine": outcome.engine}


def _print_json(obj: Any, out: TextIO) -> None:
    json.dump(obj, out, indent=2, sort_keys=False, default=str)
    out.write("\n")


def _table(rows: list[list[str]], headers: list[str], out: TextIO) -> None:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    out.write("  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip() + "\n")
    for r in rows:
        out.write("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() + "\n")


def cmd_version(args: argparse.Namespace, out: TextIO) -> None:
    body = _run(args, "version")
    if args.json:
        _print_json({"version": body["version"]}, out)
    else:
        out.write(f"{body['version']}\n")


def cmd_snapshot(args: argparse.Namespace, out: TextIO) -> None:
    s = _run(args, "snapshot", include_files=args.json)
    if args.json:
        _print_json(s, out)
        return
    p = s["protocol"]
    proto = f"reader {p['min_reader_version']}, writer {p['min_writer_version']}"
    features = sorted(set(p["reader_features"] or []) | set(p["writer_features"] or []))
    if features:
        proto += f" ({', '.join(features)})"
    lines = [
        ("table", s["table"]),
        ("version", str(s["version"])),
        ("timestamp", f"{s['timestamp']} ({s['timestamp_ms']})"),
        ("operation", s["operation"] or "-"),
        ("protocol", proto),
        ("partition columns", ", ".join(s["partition_columns"]) or "-"),
        ("files", f"{s['num_files']}"),
        ("size", f"{human_bytes(s['size_bytes'])} ({s['size_bytes']} bytes)"),
        ("tombstones", f"{s['num_tombstones']} within retention"),
        ("checkpoint", "-" if s["checkpoint_version"] is None else str(s["checkpoint_version"])),
    ]
    if s["set_transactions"]:
        lines.append(("app transactions", ", ".join(f"{k}={v}" for k, v in s["set_transactions"].items())))
    width = max(len(k) for k, _ in lines)
    for k, v in lines:
        out.write(f"{k.ljust(width)}  {v}\n")


def cmd_files(args: argparse.Namespace, out: TextIO) -> None:
    body = _run(args, "files", where=args.where)
    if args.json:
        _print_json({k: body[k] for k in ("table", "version", "files", "engine")}, out)
        return
    files = body["files"]
    rows = [
        [
            a["path"],
            str(a["size"]),
            ",".join(f"{k}={v}" for k, v in a["partition_values"].items()) or "-",
            format_ms(a["modification_time"]),
            "yes" if a["deletion_vector"] else "-",
        ]
        for a in files
    ]
    _table(rows, ["path", "size", "partition", "modified", "dv"], out)
    out.write(f"{len(files)} of {body['num_files']} files at version {body['version']}\n")


def cmd_tombstones(args: argparse.Namespace, out: TextIO) -> None:
    report = _run(args, "tombstones", retention_hours=args.retention_hours, include_files=True)
    if args.json:
        _print_json(report, out)
        return
    r = report["retention"]
    out.write(
        f"version {report['version']}: {report['num_tombstones']} tombstones; retention {r['hours']:g} h "
        f"({r['source']}), cutoff {r['cutoff']}\n"
        f"retained {report['retained']} ({human_bytes(report['retained_bytes'])}), "
        f"past retention (safe for VACUUM) {report['expired']} ({human_bytes(report['reclaimable_bytes'])})\n"
    )
    rows = [
        [
            t["path"],
            "-" if t["size"] is None else str(t["size"]),
            "-" if t["deletion_timestamp"] is None else format_ms(t["deletion_timestamp"]),
            "expired" if t["expired"] else "retained",
        ]
        for t in report["tombstones"]
    ]
    if rows:
        _table(rows, ["path", "size", "deleted", "state"], out)


def cmd_history(args: argparse.Namespace, out: TextIO) -> None:
    entries = _run(args, "history", limit=args.limit)["history"]
    if args.json:
        _print_json(entries, out)
        return
    rows = [
        [str(e["version"]), format_ms(e["timestamp"]), str(e.get("operation") or "-"), str(e.get("engineInfo") or "-")]
        for e in entries
    ]
    _table(rows, ["version", "timestamp", "operation", "engine"], out)


def cmd_changes(args: argparse.Namespace, out: TextIO) -> None:
    args.version = args.start
    changes = _run(args, "changes", fail_on_data_loss=args.fail_on_data_loss)["changes"]
    if args.json:
        _print_json(changes, out)
        return
    for c in changes:
        kinds: dict[str, int] = {}
        for a in c["actions"]:
            name = next(iter(a))
            kinds[name] = kinds.get(name, 0) + 1
        out.write(f"{c['version']}: " + ", ".join(f"{n} {k}" for k, n in kinds.items()) + "\n")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="deltalog", description="Inspect a Delta Lake transaction log.")
    sub = parser.add_subparsers(dest="command", required=True)

    def command(name: str, help_text: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.add_argument("path", help="table root: a local path or an fsspec URI (s3://, gs://, abfs://, memory://)")
        p.add_argument(
            "--storage-option",
            type=_kv,
            action="append",
            metavar="KEY=VALUE",
            help="fsspec storage option (repeatable)",
        )
        p.add_argument("--json", action="store_true", help="print stable JSON (see README)")
        return p

    def travel(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--engine",
            choices=("local", "spark"),
            default="local",
            help="replay with pyarrow in this process (local) or distributed on Spark (spark)",
        )
        p.add_argument("--master", default="local[*]", help="Spark master URL for --engine spark (default local[*])")
        p.add_argument(
            "--memory-limit-mb",
            type=_mebibytes,
            help="local engine: refuse (before reading) a state estimated over this many MiB "
            "(default: half the memory this process may use; 0: no limit)",
        )
        g = p.add_mutually_exclusive_group()
        g.add_argument("--version", type=int, help="time travel to this version")
        g.add_argument("--timestamp", help="time travel to the latest commit at or before (ISO-8601 or epoch ms)")

    command("version", "print the latest version (reads only the log listing)").set_defaults(fn=cmd_version)
    p = command("snapshot", "summarize the table at a version")
    travel(p)
    p.set_defaults(fn=cmd_snapshot)
    p = command("files", "list active files")
    travel(p)
    p.add_argument("--where", help="filter, e.g. \"date = '2024-01-01' AND id > 10\" (partition pruning + stats)")
    p.set_defaults(fn=cmd_files)
    p = command("tombstones", "report removed files: retained vs past retention")
    travel(p)
    p.add_argument("--retention-hours", type=float, help="override delta.deletedFileRetentionDuration")
    p.set_defaults(fn=cmd_tombstones)
    p = command("history", "list commits, newest first")
    p.add_argument("--limit", type=int, help="at most this many commits")
    p.set_defaults(fn=cmd_history)
    p = command("changes", "print the actions of each commit from a version on")
    p.add_argument("--from", dest="start", type=int, required=True, help="first version")
    p.add_argument("--fail-on-data-loss", action="store_true", help="error when a commit in the range is missing")
    p.set_defaults(fn=cmd_changes)
    return parser


def main(argv: Sequence[str] | None = None, out: TextIO | None = None, err: TextIO | None = None) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    args = build_parser().parse_args(argv)
    try:
        args.fn(args, out)
    except BrokenPipeError:  # `deltalog files ... | head`
        sys.stderr = open(os.devnull, "w")
        return 0
    except (DeltaError, ValueError, OSError) as exc:
        err.write(f"deltalog: error: {type(exc).__name__}: {exc}\n")
        return EXIT_ERROR
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
