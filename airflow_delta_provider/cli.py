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
from dataclasses import fields
from typing import Any, NoReturn, TextIO

from . import __version__
from .commands.arguments import (
    MAX_MIB,
    cli_type,
    parse_choice,
    parse_count,
    parse_duration,
    parse_number,
    parse_size,
)
from .commands.command import run, storage_options_from_env
from .commands.reports import human_bytes
from .commands.request import OPTIONS, Request, option_names
from .delta.errors import (
    DeltaError,
    InvalidArgumentError,
    OperationNotAllowedError,
    StorageError,
    TableNotFoundError,
    UnsupportedFeatureError,
)
from .delta.protocol.history import format_ms, to_epoch_ms
from .delta.protocol.leases import MAX_TTL_MS

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
    outcome = run(request, _spark_factory(args.master) if engine == "spark" else None)
    return {**outcome.body, "engine": outcome.engine}


def _print_json(obj: Any, out: TextIO) -> None:
    """Indented for a person at a terminal; one compact line otherwise (a pipe or a file: a 333k-file VACUUM
    plan took longer to pretty-print than to make)."""
    if getattr(out, "isatty", lambda: False)():
        json.dump(obj, out, indent=2, default=str)
    else:
        json.dump(obj, out, separators=(",", ":"), default=str)
    out.write("\n")


def _table(rows: list[list[str]], headers: list[str], out: TextIO) -> None:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    for r in [headers, *rows]:
        out.write("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() + "\n")


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
            _print_json(shape(body), out)
        else:
            show(body, out)
        if body.get("checks_failed"):
            raise _ChecksFailed(f"checks failed: {body['checks_failed']}")

    return command


def _show_snapshot(s: dict[str, Any], out: TextIO) -> None:
    p = s["protocol"]
    proto = f"reader {p['min_reader_version']}, writer {p['min_writer_version']}"
    features = sorted(set(p["reader_features"] or []) | set(p["writer_features"] or []))
    if features:
        proto += f" ({', '.join(features)})"
    lines = [
        ("table", s["table"]),
        ("version", str(s["version"])),
        ("commit time", f"{s['timestamp']} ({s['timestamp_ms']})"),
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
    lines += [(f"check {c['name']}", ("ok" if c["passed"] else "FAILED: ") + c["message"]) for c in s.get("checks", [])]
    width = max(len(k) for k, _ in lines)
    for k, v in lines:
        out.write(f"{k.ljust(width)}  {v}\n")


def _show_files(body: dict[str, Any], out: TextIO) -> None:
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
    _table(rows, ["path", "size", "partition", "file time", "dv"], out)
    out.write(f"{len(files)} of {body['num_files']} files at version {body['version']}\n")


def _show_tombstones(report: dict[str, Any], out: TextIO) -> None:
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
        _table(rows, ["path", "size", "deletion time", "state"], out)


def _show_history(body: dict[str, Any], out: TextIO) -> None:
    rows = [
        [
            str(e["version"]),
            format_ms(e["timestamp"]),
            format_ms(e["file_modification_time"]),
            str(e.get("operation") or "-"),
            str(e.get("engineInfo") or "-"),
        ]
        for e in body["history"]
    ]
    _table(rows, ["version", "commit time", "file time", "operation", "engine"], out)


def _show_changes(body: dict[str, Any], out: TextIO) -> None:
    for c in body["changes"]:
        kinds: dict[str, int] = {}
        for a in c["actions"]:
            name = next(iter(a))
            kinds[name] = kinds.get(name, 0) + 1
        out.write(f"{c['version']}: " + ", ".join(f"{n} {k}" for k, n in kinds.items()) + "\n")


def _lease_args(args: argparse.Namespace) -> dict[str, Any]:
    return {"storage_options": _storage_options(args), "location": args.location}


def cmd_lease_add(args: argparse.Namespace, out: TextIO) -> None:
    """Pin a version (`delta.maintenance.leases.add_lease`): this library's VACUUM and log cleanup keep it."""
    from .delta.maintenance.leases import add_lease

    lease = add_lease(args.path, args.version, args.ttl, args.owner, **_lease_args(args))
    if args.json:
        _print_json(lease.to_dict(lease.created_ms), out)
        return
    out.write(
        f"leased version {lease.version} of {lease.table} to {lease.owner} until {lease.to_dict()['expires_at']}: "
        f"lease {lease.id}\n"
    )


def cmd_lease_list(args: argparse.Namespace, out: TextIO) -> None:
    from .delta.delta_log import system_clock
    from .delta.maintenance.leases import list_leases
    from .delta.storage import normalize_table_uri

    leases = list_leases(args.path, include_expired=args.all, **_lease_args(args))
    now = system_clock()
    if args.json:
        _print_json({"table": normalize_table_uri(args.path), "leases": [le.to_dict(now) for le in leases]}, out)
        return
    if not leases:
        out.write("no live leases\n" if not args.all else "no leases\n")
        return
    rows = [
        [le.id, str(le.version), le.owner, le.to_dict()["expires_at"], "live" if le.is_live(now) else "expired"]
        for le in leases
    ]
    _table(rows, ["lease", "version", "owner", "expires", "status"], out)


def cmd_lease_release(args: argparse.Namespace, out: TextIO) -> None:
    from .delta.maintenance.leases import release_lease

    lease = release_lease(args.path, args.lease_id, **_lease_args(args))
    lease_id = args.lease_id.strip().lower()
    if args.json:
        _print_json({"released": lease_id, "lease": None if lease is None else lease.to_dict()}, out)
        return
    what = "" if lease is None else f" (version {lease.version}, owner {lease.owner})"
    out.write(f"released lease {lease_id}{what}\n")


def _show_checkpoint(done: dict[str, Any], out: TextIO) -> None:
    if not done["written"]:
        out.write(f"a checkpoint at version {done['version']} already exists: nothing written\n")
        return
    out.write(
        f"wrote a {done['kind']} checkpoint at version {done['version']}: {done['num_add_files']} files, "
        f"{done['num_tombstones']} tombstones, {human_bytes(done['size_in_bytes'])}"
        + (f", {len(done['sidecars'])} sidecars" if done["sidecars"] else "")
        + ("; _last_checkpoint updated" if done["last_checkpoint_updated"] else "")
        + "\n"
    )


def _show_cleanup_log(result: dict[str, Any], out: TextIO) -> None:
    verb = "deleted" if not result["dry_run"] else "would delete (dry run: --apply deletes)"
    out.write(
        f"log cleanup, cutoff {result['cutoff']}: {verb} {result['num_files']} files ({human_bytes(result['bytes'])}); "
        f"versions from {result['earliest_readable_version']} stay readable"
        + (f" ({result['reason']})" if result.get("reason") else "")
        + "\n"
    )
    for name in result["files"]:
        out.write(f"  {name}\n")
    _write_leases(result, out)


def _show_vacuum(result: dict[str, Any], out: TextIO) -> None:
    q = result.get("quarantine")
    head = f"vacuum{' dry run' if result['dry_run'] else ''} ({result['mode']}), cutoff {result['cutoff']}:"
    cost = (
        "" if q is None else f"by {q['method']}: {q['requests']} storage calls, {human_bytes(q['bytes_copied'])} copied"
    )
    planned = f"{result['num_files']} files ({human_bytes(result['bytes'])})"
    if result["dry_run"] and q is not None:
        out.write(f"{head} would quarantine {planned} {cost}; --apply moves them\n")
    elif result["dry_run"]:
        out.write(f"{head} would delete {planned}; --apply deletes\n")
    elif q is not None:
        out.write(
            f"{head} moved {q.get('moved', 0)} files ({human_bytes(q.get('moved_bytes', 0))}) {cost} to quarantine "
            f"{result['quarantine_id']} (`deltalog vacuum undo {result['table']} {result['quarantine_id']}` puts "
            "them back)\n"
        )
    else:
        out.write(
            f"{head} deleted {result['deleted']} files ({human_bytes(result['deleted_bytes'])}), "
            f"{result['directories']} directories\n"
        )
    for f in result["files"]:
        out.write(f"  {f['path']}  {human_bytes(f['size'])}\n")
    _write_leases(result, out)


def _show_vacuum_undo(result: dict[str, Any], out: TextIO) -> None:
    out.write(
        f"quarantine {result['quarantine_id']} {result['state']}: {result['moved']} files moved back, "
        f"{result['already_in_place']} already in place"
        + (f", {result['finished']} left-over copies deleted" if result["finished"] else "")
        + "\n"
    )
    for path in result["missing"]:
        out.write(f"  missing (at neither path): {path}\n")


def _show_vacuum_purge(result: dict[str, Any], out: TextIO) -> None:
    verb = "would purge (dry run: --apply deletes)" if result["dry_run"] else "purged"
    out.write(
        f"{verb} {result['num_purged']} quarantines ({result['deleted_files']} files, "
        f"{human_bytes(result['deleted_bytes'])})\n"
    )
    for p in result["purged"]:
        out.write(f"  {p['quarantine_id']}  {p['state']}  {p['files']} files\n")
    for p in result["skipped"]:
        out.write(f"  kept {p['quarantine_id']}: {p['reason']}\n")


def cmd_vacuum_list(args: argparse.Namespace, out: TextIO) -> None:
    """The table's VACUUM quarantines (`delta.maintenance.quarantine.list_quarantines`)."""
    from .delta.maintenance.quarantine import list_quarantines
    from .delta.storage import normalize_table_uri

    found = [q.to_dict() for q in list_quarantines(args.path, storage_options=_storage_options(args))]
    if args.json:
        _print_json({"table": normalize_table_uri(args.path), "quarantines": found}, out)
        return
    if not found:
        out.write("no quarantines\n")
        return
    rows = [[q["id"], q["state"], q["created_at"], str(q["num_files"]), human_bytes(q["bytes"])] for q in found]
    _table(rows, ["quarantine", "state", "created", "files", "size"], out)


def _write_leases(result: Mapping[str, Any], out: TextIO) -> None:
    """The version leases a maintenance result honoured (`deltalog lease`)."""
    for le in result.get("leases") or ():
        out.write(f"kept for lease {le['id']}: version {le['version']}, {le['owner']}, until {le['expires_at']}\n")


def _show_optimize(result: dict[str, Any], out: TextIO) -> None:
    removed = f"{result['num_files_removed']} files ({human_bytes(result['bytes_removed'])})"
    if result["dry_run"]:
        out.write(
            f"optimize dry run at version {result['read_version']}: would compact {removed} into "
            f"{result['num_files_added']}; --apply compacts\n"
        )
    elif result["version"] is None:
        out.write(f"optimize: nothing to compact at version {result['read_version']}\n")
    else:
        out.write(
            f"optimize committed version {result['version']}: {removed} compacted into {result['num_files_added']} "
            f"({human_bytes(result['bytes_added'])})\n"
        )
    for name, p in result["partitions"].items():
        out.write(f"  {name or '(unpartitioned)'}  {json.dumps(p)}\n")


def _show_restore(result: dict[str, Any], out: TextIO) -> None:
    m = result["metrics"]
    change = (
        f"add back {m['numRestoredFiles']} files ({human_bytes(m['restoredFilesSize'])}), "
        f"remove {m['numRemovedFiles']} ({human_bytes(m['removedFilesSize'])}); "
        f"{m['numOfFilesAfterRestore']} files ({human_bytes(m['tableSizeAfterRestore'])}) after"
    )
    if result["dry_run"]:
        out.write(
            f"restore dry run at version {result['read_version']} to version {result['target_version']}: would "
            f"{change}; --apply commits\n"
        )
    else:
        out.write(f"restore committed version {result['version']} (version {result['target_version']}): {change}\n")
    if result["missing_files"]:
        out.write(f"left out {len(result['missing_files'])} files gone from storage:\n")
        for path in result["missing_files"]:
            out.write(f"  {path}\n")
    if result["beyond_file_retention"]:
        out.write("note: the restored version is older than the table's deleted-file retention\n")


def _show_repair(result: dict[str, Any], out: TextIO) -> None:
    missing = f"{result['num_missing']} of {result['num_files_checked']} active files missing from storage"
    if result["dry_run"]:
        verb = "; --apply removes them" if result["num_missing"] else ""
        out.write(f"repair dry run at version {result['read_version']}: {missing}{verb}\n")
    elif result["version"] is None:
        out.write(f"repair: nothing to remove at version {result['read_version']} ({missing})\n")
    else:
        out.write(f"repair committed version {result['version']}: removed {result['num_missing']} missing files\n")
    for path in result["files_removed"]:
        out.write(f"  {path}\n")


def cmd_completion(args: argparse.Namespace, out: TextIO) -> None:
    out.write((bash_completion if args.shell == "bash" else zsh_completion)(build_parser()))


# -- shell completion, generated from the parser (argparse has no public API to walk it: `_actions`) ----

_BASH = """\
# bash completion for deltalog: generated by `deltalog completion bash` from its parser
_deltalog() {
    local cur="${COMP_WORDS[COMP_CWORD]}" prev="${COMP_WORDS[COMP_CWORD-1]}" cmd="" i
    for ((i = 1; i < COMP_CWORD; i++)); do
        if [[ "${COMP_WORDS[i]}" != -* ]]; then cmd="${COMP_WORDS[i]}"; break; fi
    done
    case "$cmd" in
    "") COMPREPLY=($(compgen -W "%(top)s" -- "$cur")) ;;
%(cases)s    esac
}
complete -o filenames -F _deltalog deltalog
"""
_BASH_CASE = """\
    %(name)s)
        case "$prev" in
%(values)s        esac
        if [[ "$cur" == -* ]]; then COMPREPLY=($(compgen -W "%(options)s" -- "$cur"))
        else COMPREPLY=($(%(positional)s -- "$cur")); fi ;;
"""
_ZSH = """\
#compdef deltalog
# zsh completion for deltalog: generated by `deltalog completion zsh` from its parser
_deltalog() {
  local line state
  _arguments -C %(top)s '1:command:->command' '*::arg:->args'
  case $state in
    command)
      local -a commands=(%(commands)s)
      _describe command commands ;;
    args)
      case $line[1] in
%(cases)s      esac ;;
  esac
}
if [[ "$funcstack[1]" == "_deltalog" ]]; then _deltalog "$@"; else compdef _deltalog deltalog; fi
"""


def _commands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    return next(a.choices for a in parser._actions if isinstance(a, argparse._SubParsersAction))  # type: ignore[return-value]


def _options(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in parser._actions if a.option_strings]


def _choices(parser: argparse.ArgumentParser) -> list[str]:
    """The positional argument's choices (`completion bash|zsh`); empty for a table path."""
    return [str(c) for a in parser._actions if not a.option_strings for c in a.choices or ()]


def bash_completion(parser: argparse.ArgumentParser) -> str:
    """A bash completion script: commands, options, option choices, table paths (directories)."""
    cases = []
    for name, p in _commands(parser).items():
        values = "".join(
            f"        {'|'.join(a.option_strings)}) COMPREPLY=("
            + (f'$(compgen -W "{" ".join(map(str, a.choices))}" -- "$cur")' if a.choices else "")
            + "); return ;;\n"
            for a in _options(p)
            if a.nargs != 0
        )
        choices = _choices(p)
        positional = f'compgen -W "{" ".join(choices)}"' if choices else "compgen -d"
        options = " ".join(o for a in _options(p) for o in a.option_strings)
        cases.append(_BASH_CASE % {"name": name, "values": values, "options": options, "positional": positional})
    top = " ".join([*(o for a in _options(parser) for o in a.option_strings), *_commands(parser)])
    return _BASH % {"top": top, "cases": "".join(cases)}


def _zsh_quote(text: str) -> str:
    """`text` for an `_arguments` description inside single quotes."""
    for char in "\\[]:":
        text = text.replace(char, "\\" + char)
    return " ".join(text.replace("'", "'\\''").split())


def _zsh_spec(a: argparse.Action) -> str:
    """`_arguments` specs for option `a`: `'(--a -b)*--a[help]:dest:(choices)'`."""
    value = "" if a.nargs == 0 else f":{a.dest}:" + (f"({' '.join(map(str, a.choices))})" if a.choices else " ")
    repeat = "*" if isinstance(a, argparse._AppendAction) else ""
    excl = f"({' '.join(a.option_strings)})" if len(a.option_strings) > 1 else ""
    return " ".join(f"'{excl}{repeat}{o}[{_zsh_quote(a.help or '')}]{value}'" for o in a.option_strings)


def zsh_completion(parser: argparse.ArgumentParser) -> str:
    """A zsh completion script (`_arguments` specs): commands, options, option choices, table paths."""
    cases = []
    for name, p in _commands(parser).items():
        choices = _choices(p)
        first = f"'1:argument:({' '.join(choices)})'" if choices else "'1:table path:_files -/'"
        specs = " \\\n            ".join([first, *(_zsh_spec(a) for a in _options(p))])
        cases.append(f"        {name})\n          _arguments \\\n            {specs} ;;\n")
    commands = " ".join(f"'{n}:{_zsh_quote(p.description or '')}'" for n, p in _commands(parser).items())
    top = " ".join(_zsh_spec(a) for a in _options(parser))
    return _ZSH % {"top": top, "commands": commands, "cases": "".join(cases)}


_OPTIMIZE_JSON = ("version", "num_files_removed", "num_files_added", "bytes_removed", "bytes_added", "partitions")
cmd_version = _action("version", lambda b, out: out.write(f"{b['version']}\n"), lambda b: {"version": b["version"]})
cmd_snapshot = _action("snapshot", _show_snapshot, fields=lambda args: {"include_files": args.json})
cmd_files = _action("files", _show_files, lambda b: {k: b[k] for k in ("table", "version", "files", "engine")})
cmd_tombstones = _action("tombstones", _show_tombstones, fields=lambda args: {"include_files": True})
cmd_history = _action("history", _show_history, lambda b: b["history"])
cmd_changes = _action("changes", _show_changes, lambda b: b["changes"], lambda args: {"version": args.start})
cmd_checkpoint = _action("checkpoint", _show_checkpoint)
cmd_cleanup_log = _action("cleanup_log", _show_cleanup_log)
cmd_vacuum = _action("vacuum", _show_vacuum)
cmd_vacuum_undo = _action("vacuum_undo", _show_vacuum_undo)
cmd_vacuum_purge = _action(
    "vacuum_purge", _show_vacuum_purge, fields=lambda args: {"older_than_hours": args.older_than.total_seconds() / 3600}
)
cmd_optimize = _action(
    "optimize",
    _show_optimize,
    lambda b: {k: b[k] for k in _OPTIMIZE_JSON} | {"dry_run": b["dry_run"]},
    lambda args: {"target_size": None if args.target_size_mb is None else max(1, int(args.target_size_mb * 2**20))},
)
cmd_restore = _action("restore", _show_restore, lambda b: {k: v for k, v in b.items() if k != "plan"})
cmd_repair = _action("repair", _show_repair)
#: argparse types of the options, each calling the one parser of its kind (`commands.arguments`).
VERSION = cli_type(parse_count, "--version")


def _option_flags(p: argparse.ArgumentParser, action: str) -> None:
    """The flags of `action`'s options that have a help text (`commands.request._opt`); each flag's dest is
    the option's name, so `_action` passes it on as it is."""
    for f in fields(OPTIONS[action]):
        doc = f.metadata["doc"]
        if doc is None:
            continue
        if f.metadata.get("positional"):
            p.add_argument(f.name, help=doc)
            continue
        flag = f.metadata.get("flag", "--" + f.name.replace("_", "-"))
        if isinstance(f.default, bool):
            p.add_argument(flag, dest=f.name, action="store_false" if f.default else "store_true", help=doc)
            continue
        parse = f.metadata.get("parse")
        choices = getattr(parse, "keywords", {}).get("choices")
        kwargs = {"type": cli_type(parse, flag)} if parse else {}
        p.add_argument(flag, dest=f.name, default=f.default, choices=choices, help=doc, **kwargs)


def _spark(p: argparse.ArgumentParser, help_text: str) -> None:
    engine = cli_type(parse_choice, "--engine", choices=CLI_ENGINES)
    p.add_argument("--engine", type=engine, choices=CLI_ENGINES, default="local", help=help_text)
    p.add_argument("--master", default="local[*]", help="Spark master URL for --engine spark (default local[*])")


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
            "--target-size-mb", type=target, help="output file size (default: delta.targetFileSize, else 256 MiB)"
        ),
    )
    command("restore", "put the table back to an older version (dry run unless --apply)", cmd_restore, _restore_to)
    command("repair", "remove active files missing from storage, FSCK (dry run unless --apply)", cmd_repair)
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


def _report(exc: BaseException, as_json: bool, err: TextIO) -> int:
    code = _exit_code(exc)
    if as_json:
        body = (
            exc.to_dict() if isinstance(exc, DeltaError) else {"error_class": type(exc).__name__, "message": str(exc)}
        )
        err.write(json.dumps({"status": "error", **body, "exit_code": code}, default=str) + "\n")
    elif code == EXIT_CHECK_FAILED:
        err.write(f"deltalog: {exc}\n")
    else:
        kind = "internal error (a bug, please report it)" if code == EXIT_INTERNAL else "error"
        err.write(f"deltalog: {kind}: {type(exc).__name__}: {exc}\n")
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
    try:
        with contextlib.redirect_stdout(out):  # --help and --version print to sys.stdout
            args = build_parser().parse_args(argv)
        args.fn(args, out)
    except SystemExit as exc:  # --help, --version
        return exc.code if isinstance(exc.code, int) else EXIT_OK
    except BrokenPipeError:  # `deltalog files ... | head`
        sys.stderr = open(os.devnull, "w")
        return EXIT_OK
    except OSError as exc:  # a storage failure the library did not type
        return _report(StorageError(f"{type(exc).__name__}: {exc}"), "--json" in argv, err)
    except Exception as exc:
        return _report(exc, "--json" in argv, err)
    return EXIT_OK


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
