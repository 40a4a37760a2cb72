"""`deltalog`: inspect and maintain a Delta table's transaction log from a shell (`deltalog --help`).

Every table command takes `--storage-option KEY=VALUE` (repeatable). *Commit time* is the time timestamp
time travel uses for a version (in-commit timestamp, else the commit file's time made strictly increasing);
*file time* is a file's own modification time. Deleting and committing commands are dry runs unless --apply.

An error prints one line on stderr, `deltalog: error: <ErrorClass>: <message>`; with `--json` it is
one JSON object on stderr instead (`status`, `error_class`, `message`, ..., `exit_code`). Exit codes:

    0  success
    1  any other error: corrupt log, version or timestamp outside the table's history, memory limit, engine
    2  usage: a bad command line or argument value (`InvalidArgumentError`, `PredicateSyntaxError`)
    3  table not found (`TableNotFoundError`)
    4  unsupported: the table needs a feature this reader lacks (`UnsupportedFeatureError`, `OperationNotAllowedError`)
    5  storage failed: access denied, network, throttling (`StorageError`)
    6  check failed (`snapshot --checks`): the report is printed, then the failed checks on stderr
    70 internal error (a bug: the traceback is printed)

While a table command runs, its progress is drawn on stderr when stderr is a terminal (`cli/progress.py`;
`DELTALOG_NO_PROGRESS=1`: never); stdout holds only the result.

`vacuum undo|purge|list` are also spelled `vacuum-undo`, `vacuum-purge`, `vacuum-list` (a table at a
relative path named `undo`, `purge` or `list` is vacuumed as `./undo`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import sys
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import Field, fields
from typing import Any, NoReturn, TextIO

from .. import __version__
from ..commands.arguments import (
    MAX_MIB,
    cli_type,
    parse_choice,
    parse_count,
    parse_duration,
    parse_number,
    parse_size,
)
from ..commands.charts import human_bytes
from ..commands.command import run, storage_options_from_env
from ..commands.request import OPTIONS, Request, option_names
from ..delta.errors import (
    DeltaError,
    InvalidArgumentError,
    OperationNotAllowedError,
    StorageError,
    TableNotFoundError,
    UnsupportedFeatureError,
)
from ..delta.protocol.history import to_epoch_ms
from ..delta.protocol.leases import MAX_TTL_MS
from . import text
from .completion import bash_completion, zsh_completion
from .progress import progress_display
from .text import print_json, write_table

EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_NOT_FOUND, EXIT_UNSUPPORTED, EXIT_STORAGE, EXIT_CHECK_FAILED = range(7)
EXIT_INTERNAL = 70
_EXIT_CODES: tuple[tuple[type[DeltaError] | tuple[type[DeltaError], ...], int], ...] = (
    (InvalidArgumentError, EXIT_USAGE),
    (TableNotFoundError, EXIT_NOT_FOUND),
    ((UnsupportedFeatureError, OperationNotAllowedError), EXIT_UNSUPPORTED),
    (StorageError, EXIT_STORAGE),
)


class _Parser(argparse.ArgumentParser):
    """argparse whose usage errors are `InvalidArgumentError`s, reported like every other error."""

    def error(self, message: str) -> NoReturn:
        found = re.match(r"argument ([^:]+):", message)
        raise InvalidArgumentError(f"{message} (see `{self.prog} --help`)", argument=found and found[1])


class _ChecksFailed(Exception):
    pass


def _arg(convert: Any, expected: str) -> Any:
    """An argparse type: `convert(text)`, or a usage error saying what was `expected`."""

    def parse(text: str) -> Any:
        try:
            return convert(text)
        except (ValueError, InvalidArgumentError):
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}") from None

    return parse


def _kv(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise ValueError(text)
    return key.strip(), value


def _json_object(text: str) -> dict[str, Any]:
    value = json.loads(text)
    if not isinstance(value, dict):
        raise ValueError(text)
    return value


def _timestamp(text: str) -> str:
    to_epoch_ms(text)
    return text


TIMESTAMP = _arg(_timestamp, "an ISO-8601 time or epoch milliseconds")
KEY_VALUE = _arg(_kv, "KEY=VALUE")
JSON_OBJECT = _arg(_json_object, "a JSON object")
#: The engines a command can run on (`auto` is the operators' choice to make).
CLI_ENGINES = ("local", "spark")
#: `deltalog vacuum undo|purge|list ...` runs the subcommand `vacuum-undo|purge|list` (`main`).
VACUUM_SUBCOMMANDS = ("undo", "purge", "list")


def _spark_factory(master: str) -> Any:
    """Builds the SparkSession for `--engine spark` at `master`: in this process (`local[*]`, `spark://`), or
    a Spark Connect client (`sc://host:port`) that ships this package to the server's executors."""

    def factory(options: Mapping[str, Any]) -> Any:
        from ..commands.spark_session import is_connect_master, spark_session
        from ..jobs import build_py_files_zip

        py_files = [build_py_files_zip()] if is_connect_master(master) else []
        return spark_session(master, options, app_name="deltalog", py_files=py_files)

    return factory


def _storage_options(args: argparse.Namespace) -> dict[str, Any]:
    return storage_options_from_env(args.path, dict(args.storage_option or []))


def _run(args: argparse.Namespace, action: str, **fields: Any) -> dict[str, Any]:
    """Run `action` through the command layer; the body with the engine that ran it."""
    limit_mb = getattr(args, "memory_limit_mb", None)
    engine = getattr(args, "engine", "local")
    if engine == "spark" and limit_mb is not None:
        raise InvalidArgumentError(
            "--memory-limit-mb limits the local engine; drop it with --engine spark", argument="--memory-limit-mb"
        )
    limit: int | str | None = "auto"
    if limit_mb is not None:
        limit = int(limit_mb * 1024 * 1024) if limit_mb > 0 else None
    travel = {"version": getattr(args, "version", None), "timestamp": getattr(args, "timestamp", None)}
    request = Request.make(
        table=args.path,
        action=action,
        engine=engine,
        storage_options=_storage_options(args),
        memory_limit_bytes=limit,
        **{**travel, **fields},
    )
    with progress_display(getattr(args, "stderr", None), action.replace("_", " ")):  # ends before any output
        master = getattr(args, "master", None) or os.environ.get("SPARK_REMOTE") or "local[*]"
        outcome = run(request, _spark_factory(master) if engine == "spark" else None)
    return {**outcome.body, "engine": outcome.engine}


Show = Callable[[dict[str, Any], TextIO], None]


def _action(
    action: str,
    show: Show,
    shape: Callable[[dict[str, Any]], Any] = lambda body: body,
    fields: Callable[[argparse.Namespace], dict[str, Any]] = lambda args: {},
) -> Callable[[argparse.Namespace, TextIO], None]:
    """A command running `action` with the options its flags hold (each flag's dest is the option's name,
    plus `fields(args)`), printing `shape(result)` as JSON or `show`'s text."""

    def command(args: argparse.Namespace, out: TextIO) -> None:
        names = option_names(action)
        body = _run(args, action, **{k: v for k, v in vars(args).items() if k in names}, **fields(args))
        if args.json:
            print_json(shape(body), out)
        else:
            show(body, out)
        if body.get("checks_failed"):
            raise _ChecksFailed(f"checks failed: {body['checks_failed']}")

    return command


def _lease_args(args: argparse.Namespace) -> dict[str, Any]:
    return {"storage_options": _storage_options(args), "location": args.location}


def cmd_lease_add(args: argparse.Namespace, out: TextIO) -> None:
    """Pin a version (`delta.maintenance.leases.add_lease`): this library's VACUUM and log cleanup keep it."""
    from ..delta.maintenance.leases import add_lease

    lease = add_lease(args.path, args.version, args.ttl, args.owner, **_lease_args(args))
    if args.json:
        print_json(lease.to_dict(lease.created_ms), out)
        return
    out.write(
        f"leased version {lease.version} of {lease.table} to {lease.owner} until {lease.to_dict()['expires_at']}: "
        f"lease {lease.id}\n"
    )


def cmd_lease_list(args: argparse.Namespace, out: TextIO) -> None:
    from ..delta.delta_log import system_clock
    from ..delta.maintenance.leases import list_leases
    from ..delta.storage import normalize_table_uri

    leases = list_leases(args.path, include_expired=args.all, **_lease_args(args))
    now = system_clock()
    if args.json:
        print_json({"table": normalize_table_uri(args.path), "leases": [le.to_dict(now) for le in leases]}, out)
        return
    if not leases:
        out.write("no live leases\n" if not args.all else "no leases\n")
        return
    rows = [
        [le.id, str(le.version), le.owner, le.to_dict()["expires_at"], "live" if le.is_live(now) else "expired"]
        for le in leases
    ]
    write_table(rows, ["lease", "version", "owner", "expires", "status"], out)


def cmd_lease_release(args: argparse.Namespace, out: TextIO) -> None:
    from ..delta.maintenance.leases import release_lease

    lease = release_lease(args.path, args.lease_id, **_lease_args(args))
    lease_id = args.lease_id.strip().lower()
    if args.json:
        print_json({"released": lease_id, "lease": None if lease is None else lease.to_dict()}, out)
        return
    what = "" if lease is None else f" (version {lease.version}, owner {lease.owner})"
    out.write(f"released lease {lease_id}{what}\n")


def cmd_vacuum_list(args: argparse.Namespace, out: TextIO) -> None:
    """The table's VACUUM quarantines (`delta.maintenance.quarantine.list_quarantines`)."""
    from ..delta.maintenance.quarantine import list_quarantines
    from ..delta.storage import normalize_table_uri

    found = [q.to_dict() for q in list_quarantines(args.path, storage_options=_storage_options(args))]
    if args.json:
        print_json({"table": normalize_table_uri(args.path), "quarantines": found}, out)
        return
    if not found:
        out.write("no quarantines\n")
        return
    rows = [[q["id"], q["state"], q["created_at"], str(q["num_files"]), human_bytes(q["bytes"])] for q in found]
    write_table(rows, ["quarantine", "state", "created", "files", "size"], out)


def cmd_completion(args: argparse.Namespace, out: TextIO) -> None:
    out.write((bash_completion if args.shell == "bash" else zsh_completion)(build_parser()))


_OPTIMIZE_JSON = (
    *("version", "num_files_removed", "num_files_added", "bytes_removed", "bytes_added", "partitions"),
    *("num_files_over_budget", "bytes_over_budget", "dry_run"),
)
cmd_version = _action("version", lambda b, out: out.write(f"{b['version']}\n"), lambda b: {"version": b["version"]})
cmd_snapshot = _action("snapshot", text.show_snapshot, fields=lambda args: {"include_files": args.json})
cmd_files = _action("files", text.show_files, lambda b: {k: b[k] for k in ("table", "version", "files", "engine")})
cmd_tombstones = _action("tombstones", text.show_tombstones, fields=lambda args: {"include_files": True})
cmd_history = _action("history", text.show_history, lambda b: b["history"])
cmd_changes = _action("changes", text.show_changes, lambda b: b["changes"], lambda args: {"version": args.start})
cmd_checkpoint = _action("checkpoint", text.show_checkpoint)
cmd_cleanup_log = _action("cleanup_log", text.show_cleanup_log)
cmd_vacuum = _action("vacuum", text.show_vacuum)
cmd_vacuum_undo = _action("vacuum_undo", text.show_vacuum_undo)
cmd_vacuum_purge = _action(
    "vacuum_purge",
    text.show_vacuum_purge,
    fields=lambda args: {"older_than_hours": args.older_than.total_seconds() / 3600},
)
cmd_optimize = _action(
    "optimize",
    text.show_optimize,
    lambda b: {k: b[k] for k in _OPTIMIZE_JSON} | {k: b[k] for k in ("zorder_by", "zorder_overlap") if k in b},
    lambda args: {"target_size": None if args.target_size_mb is None else max(1, int(args.target_size_mb * 2**20))},
)
cmd_restore = _action("restore", text.show_restore, lambda b: {k: v for k, v in b.items() if k != "plan"})
cmd_repair = _action("repair", text.show_repair)
cmd_purge = _action("purge", text.show_purge)
cmd_stats_backfill = _action("stats_backfill", text.show_stats_backfill)


def _lake_command(action: str, show: Show) -> Callable[[argparse.Namespace, TextIO], None]:
    """`deltalog lake scan|plan`: the request's table labels the lake (its first prefix, else first --table)."""
    run_action = _action(action, show)

    def command(args: argparse.Namespace, out: TextIO) -> None:
        args.prefixes, args.tables = tuple(args.prefixes or ()), tuple(args.tables or ())
        if not args.prefixes and not args.tables:
            raise InvalidArgumentError("give at least one PREFIX or --table", argument="PREFIX")
        args.path = (args.prefixes or args.tables)[0]
        run_action(args, out)

    return command


cmd_lake_scan = _lake_command("lake_scan", text.show_lake_scan)
cmd_lake_plan = _lake_command("lake_plan", text.show_lake_plan)
cmd_lake_run = _lake_command("lake_run", text.show_lake_run)
cmd_lake_report = _action("lake_report", text.show_lake_report, lambda b: {k: v for k, v in b.items() if k != "engine"})
#: argparse types of the options, each calling the one parser of its kind (`commands.arguments`).
VERSION = cli_type(parse_count, "--version")


def _option_flags(p: argparse.ArgumentParser, action: str) -> None:
    """The flags of `action`'s options that have a help text (`commands.request._opt`); each flag's dest is
    the option's name, so `_action` passes it on as it is."""
    for f in fields(OPTIONS[action]):
        doc, flag = f.metadata["doc"], _flag_of(f)
        if doc is None:
            continue
        shape = {k: f.metadata[k] for k in ("nargs", "action", "metavar") if k in f.metadata}
        if f.metadata.get("positional"):
            p.add_argument(f.name, help=doc, **shape)
        elif shape.get("action") == "append":
            p.add_argument(flag, dest=f.name, help=doc, **shape)
        elif isinstance(f.default, bool):
            p.add_argument(flag, dest=f.name, action="store_false" if f.default else "store_true", help=doc)
        else:  # `shape` holds at most a metavar here
            parse = f.metadata.get("parse")
            choices = getattr(parse, "keywords", {}).get("choices")
            kwargs = {"type": cli_type(parse, flag)} if parse else {}
            p.add_argument(flag, dest=f.name, default=f.default, choices=choices, help=doc, **kwargs, **shape)


def _flag_of(f: Field[Any]) -> str:
    """The `deltalog` flag of an option field: its metadata's `flag`, else `--<name>`."""
    return f.metadata.get("flag", "--" + f.name.replace("_", "-"))


def _spark(p: argparse.ArgumentParser, help_text: str) -> None:
    engine = cli_type(parse_choice, "--engine", choices=CLI_ENGINES)
    p.add_argument("--engine", type=engine, choices=CLI_ENGINES, default="local", help=help_text)
    p.add_argument(
        "--master",
        default=None,
        help="Spark master for --engine spark: local[*] (default), spark://..., or sc://host:15002 for Spark "
        "Connect (the package is shipped to the server); $SPARK_REMOTE when set (keeps a token off the command line)",
    )


def _travel(p: argparse.ArgumentParser) -> None:
    _spark(p, "replay here or on Spark")
    p.add_argument(
        "--memory-limit-mb",
        type=cli_type(parse_number, "--memory-limit-mb", maximum=MAX_MIB, expected="a number of MiB"),
        help="local engine: refuse (before reading) a state estimated over this many MiB "
        "(default: half the memory this process may use; 0: no limit)",
    )
    g = p.add_mutually_exclusive_group()
    g.add_argument("--version", type=VERSION, help="time travel to this version")
    g.add_argument(
        "--timestamp", type=TIMESTAMP, help="time travel to the latest commit at or before (ISO-8601 or epoch ms)"
    )


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="deltalog", description="Inspect a Delta Lake transaction log.")
    parser.add_argument("--version", action="version", version=f"deltalog {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, help_text: str, fn: Any, *first: Callable[[argparse.ArgumentParser], None]) -> Any:
        """A table command: path, storage options and `--json`, the `first` flags, then its options' flags."""
        p = sub.add_parser(name, help=help_text, description=help_text)
        if name.startswith("vacuum-"):
            p.prog = f"deltalog vacuum {name.removeprefix('vacuum-')}"
        p.add_argument("path", help="table root: a local path or an fsspec URI (s3://, gs://, abfs://, memory://)")
        p.add_argument("--storage-option", type=KEY_VALUE, action="append", metavar="KEY=VALUE", help="fsspec option")
        p.add_argument("--json", action="store_true", help="print stable JSON (see README); errors as JSON on stderr")
        for add in first:
            add(p)
        if name.replace("-", "_") in OPTIONS:
            _option_flags(p, name.replace("-", "_"))
        p.set_defaults(fn=fn)
        return p

    command("version", "print the latest version (reads only the log listing)", cmd_version)
    p = command("snapshot", "summarize the table at a version", cmd_snapshot, _travel)
    p.add_argument("--checks", type=JSON_OBJECT, help="table checks as JSON (exit code 6 when one fails)")
    command("files", "list active files", cmd_files, _travel)
    command("tombstones", "report removed files: retained vs past retention", cmd_tombstones, _travel)
    command("history", "list commits, newest first", cmd_history)
    start = {"dest": "start", "type": cli_type(parse_count, "--from"), "required": True, "help": "first version"}
    command(
        "changes",
        "print the actions of each commit from a version on",
        cmd_changes,
        lambda p: p.add_argument("--from", **start),
    )
    lease_help = "pin a version so this library's VACUUM and log cleanup keep it (add, list, release)"
    leases = sub.add_parser("lease", help=lease_help, description=lease_help)
    leases = leases.add_subparsers(dest="lease_command", required=True, metavar="ACTION")

    def lease_command(name: str, help_text: str, fn: Any) -> argparse.ArgumentParser:
        p = leases.add_parser(name, help=help_text, description=help_text)
        p.add_argument("path", help="table root: a local path or an fsspec URI")
        p.add_argument("--storage-option", type=KEY_VALUE, action="append", metavar="KEY=VALUE", help="fsspec option")
        p.add_argument("--location", help="lease folder (default: <table>/_delta_leases)")
        p.add_argument("--json", action="store_true", help="print stable JSON; errors as JSON on stderr")
        p.set_defaults(fn=fn)
        return p

    p = lease_command("add", "pin a version until the lease ends", cmd_lease_add)
    p.add_argument("--version", type=VERSION, required=True, help="the version to pin")
    ttl = cli_type(parse_duration, "--ttl", positive=True, maximum_ms=MAX_TTL_MS)
    p.add_argument("--ttl", type=ttl, required=True, help="how long: 6h, 90m, 2d, 1h30m")
    p.add_argument("--owner", required=True, help="who holds the lease (shown by `lease list`)")
    p = lease_command("list", "list the live leases", cmd_lease_list)
    p.add_argument("--all", action="store_true", help="expired leases too")
    p = lease_command("release", "delete a lease: the next VACUUM may delete the version's files", cmd_lease_release)
    p.add_argument("lease_id", help="the lease's id (from `lease add` or `lease list`)")
    command("checkpoint", "write a checkpoint of the latest version", cmd_checkpoint)
    command("cleanup-log", "delete log files older than the log retention (dry run unless --apply)", cmd_cleanup_log)
    p = command("vacuum", "delete files no version within retention needs (dry run unless --apply)", cmd_vacuum)
    _spark(p, "list and delete here or on Spark")
    command("vacuum-undo", "put a VACUUM quarantine's files back (`deltalog vacuum undo PATH ID`)", cmd_vacuum_undo)
    age = {"type": cli_type(parse_duration, "--older-than"), "required": True}
    command(
        "vacuum-purge",
        "delete VACUUM quarantines past an age (`deltalog vacuum purge PATH --older-than 7d`)",
        cmd_vacuum_purge,
        lambda p: p.add_argument("--older-than", **age, help="age: 7d, 36h, 1d12h (0: every finished one)"),
    )
    command("vacuum-list", "list a table's VACUUM quarantines (`deltalog vacuum list PATH`)", cmd_vacuum_list)
    target = cli_type(parse_size, "--target-size-mb", maximum=MAX_MIB, unit="MiB")
    command(
        "optimize",
        "compact small files into larger ones (dry run unless --apply; deletes nothing)",
        cmd_optimize,
        lambda p: _spark(p, "rewrite here or on Spark executors"),
        lambda p: p.add_argument(
            "--target-size-mb",
            type=target,
            help="output file size (default: delta.targetFileSize, else 100 MiB, delta-rs's default)",
        ),
    )
    command("restore", "put the table back to an older version (dry run unless --apply)", cmd_restore, _restore_to)
    command("repair", "remove active files missing from storage, FSCK (dry run unless --apply)", cmd_repair)
    command(
        "purge",
        "rewrite files with deletion vectors so deleted rows are physically gone, REORG PURGE (dry run unless --apply)",
        cmd_purge,
    )
    command(
        "stats-backfill",
        "recompute missing or stale file statistics, COMPUTE STATS (dry run unless --apply; rewrites no data)",
        cmd_stats_backfill,
    )
    lake_help = "scan a lake's tables for their health, plan their maintenance within a budget, or run the plan"
    lake = sub.add_parser("lake", help=lake_help, description=lake_help)
    lake = lake.add_subparsers(dest="lake_command", required=True, metavar="ACTION")
    for name, help_text, fn in (
        ("scan", "discover the tables under the prefixes and report each one's health", cmd_lake_scan),
        ("plan", "rank the maintenance worth doing on the lake's tables, cut to a budget", cmd_lake_plan),
        (
            "run",
            "plan, then with --apply run each table's tasks, rewrites proved (VACUUM only with --apply-vacuum)",
            cmd_lake_run,
        ),
        (
            "report",
            "the lake report of a maintenance history: each table's health across runs, what runs spent and saved",
            cmd_lake_report,
        ),
    ):
        p = lake.add_parser(name, help=help_text, description=help_text)
        p.prog = f"deltalog lake {name}"
        if name == "report":
            p.add_argument(
                "path", metavar="HISTORY_URI", help="the maintenance history table (the autopilot's history_uri)"
            )
        p.add_argument("--storage-option", type=KEY_VALUE, action="append", metavar="KEY=VALUE", help="fsspec option")
        what = "the report as JSON" if name == "report" else "stable JSON"
        p.add_argument("--json", action="store_true", help=f"print {what} (see docs/lake.md); errors as JSON")
        _option_flags(p, f"lake_{name}")
        p.set_defaults(fn=fn)
    p = sub.add_parser("completion", help="print a shell completion script", description="print a completion script")
    p.add_argument("shell", choices=("bash", "zsh"))
    p.set_defaults(fn=cmd_completion, json=False)
    return parser


def _restore_to(p: argparse.ArgumentParser) -> None:
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--version", type=VERSION, help="the version to restore")
    g.add_argument("--timestamp", type=TIMESTAMP, help="restore the last commit at or before (ISO-8601 or epoch ms)")


def _exit_code(exc: BaseException) -> int:
    if isinstance(exc, _ChecksFailed):
        return EXIT_CHECK_FAILED
    if not isinstance(exc, DeltaError):
        return EXIT_INTERNAL
    return next((code for kinds, code in _EXIT_CODES if isinstance(exc, kinds)), EXIT_ERROR)


def _flags(args: argparse.Namespace | None) -> dict[str, tuple[str, bool | None]]:
    """The running command's options as the library names them -> (the flag typed here, the value the flag
    sets when it is a switch, else None)."""
    if args is None or not hasattr(args, "command"):
        return {}
    action = f"lake_{args.lake_command}" if args.command == "lake" else str(args.command).replace("-", "_")
    out: dict[str, tuple[str, bool | None]] = {}
    for f in fields(OPTIONS[action]) if action in OPTIONS else ():
        if f.metadata["doc"] is not None and not f.metadata.get("positional"):
            switch = (not f.default) if isinstance(f.default, bool) else None
            out[f.name] = (_flag_of(f), switch)
    return out


def _in_flags(message: str, flags: Mapping[str, tuple[str, bool | None]]) -> str:
    """`message` with the options it names as the library does (`retention_hours`,
    `enforce_retention_duration=False`) named by their flags (`--retention-hours`, `--no-enforce-retention`):
    only names with an underscore, or `name=True|False` setting a switch, so prose is left alone."""

    def flag(m: re.Match[str]) -> str:
        name, value = m[1], m[2]
        found = flags.get(name)
        if found is None:
            return m[0]
        if value is None:
            return found[0] if "_" in name else m[0]
        return found[0] if found[1] is not None and value == str(found[1]) else m[0]

    return re.sub(r"(?<![\w.-])([a-z][a-z0-9_]*)(?:=(True|False))?(?![\w-])", flag, message) if flags else message


def _report(
    exc: BaseException, as_json: bool, err: TextIO, flags: Mapping[str, tuple[str, bool | None]] | None = None
) -> int:
    code = _exit_code(exc)
    flags = flags or {}
    if as_json:
        body = (
            exc.to_dict() if isinstance(exc, DeltaError) else {"error_class": type(exc).__name__, "message": str(exc)}
        )
        body["message"] = _in_flags(str(body.get("message")), flags)
        if body.get("argument") in flags:
            body["flag"] = flags[body["argument"]][0]
        err.write(json.dumps({"status": "error", **body, "exit_code": code}, default=str) + "\n")
    elif code == EXIT_CHECK_FAILED:
        err.write(f"deltalog: {exc}\n")
    else:
        kind = "internal error (a bug, please report it)" if code == EXIT_INTERNAL else "error"
        text = str(exc) if code == EXIT_INTERNAL else _in_flags(str(exc), flags)
        err.write(f"deltalog: {kind}: {type(exc).__name__}: {text}\n")
    if code == EXIT_INTERNAL:
        traceback.print_exception(exc, file=err)
    return code


def main(argv: Sequence[str] | None = None, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Run `deltalog` with `argv` (default: the command line); the exit code."""
    out = out or sys.stdout
    err = err or sys.stderr
    argv = sys.argv[1:] if argv is None else list(argv)
    if len(argv) > 1 and argv[0] == "vacuum" and argv[1] in VACUUM_SUBCOMMANDS:
        argv = [f"vacuum-{argv[1]}", *argv[2:]]
    args = None
    try:
        with contextlib.redirect_stdout(out):  # --help and --version print to sys.stdout
            args = build_parser().parse_args(argv)
        args.stderr = err  # progress is drawn there while a command runs, when it is a terminal
        args.fn(args, out)
    except SystemExit as exc:  # --help, --version
        return exc.code if isinstance(exc.code, int) else EXIT_OK
    except BrokenPipeError:  # `deltalog files ... | head`
        sys.stderr = open(os.devnull, "w")
        return EXIT_OK
    except OSError as exc:  # a storage failure the library did not type
        return _report(StorageError(f"{type(exc).__name__}: {exc}"), "--json" in argv, err, _flags(args))
    except Exception as exc:
        return _report(exc, "--json" in argv, err, _flags(args))
    return EXIT_OK


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
