"""``aiojetstream stream``: list, show, add, edit, remove and purge streams."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from aiojetstream import (
    DiscardPolicy,
    JetStreamContext,
    RetentionPolicy,
    StorageType,
    StoreCompression,
    StreamConfig,
    StreamInfo,
)

from . import MAX_SEQUENCE
from ._common import (
    CliError,
    Description,
    Force,
    JsonFlag,
    NamesFlag,
    Output,
    as_written,
    check_subject,
    confirm,
    done,
    kv_table,
    list_table,
    listed,
    load_json_file,
    output,
    run,
)
from ._units import (
    format_age,
    format_bytes,
    format_duration,
    format_limit,
    format_time,
    parse_duration,
    parse_marker_ttl,
    parse_size,
)

__all__ = ["app", "config_from", "list_values"]

app = typer.Typer(
    help="Manage streams.", no_args_is_help=True, rich_markup_mode=None, add_completion=False
)

#: The server's JSON form: durations in nanoseconds, unknown fields kept.
SERVER_JSON: dict[str, Any] = {"wire": True}

Name = Annotated[str, typer.Argument(help="The stream's name.", show_default=False)]
Subjects = Annotated[
    list[str] | None,
    typer.Option(
        "--subjects",
        "--subject",
        help="Subjects the stream stores (repeat, or comma separated).",
        show_default=False,
    ),
]
Storage = Annotated[StorageType | None, typer.Option(case_sensitive=False, help="file or memory.")]
Retention = Annotated[
    RetentionPolicy | None,
    typer.Option(case_sensitive=False, help="limits, interest or workqueue."),
]
Discard = Annotated[
    DiscardPolicy | None,
    typer.Option(case_sensitive=False, help="What to do when full: old or new."),
]
MaxAge = Annotated[
    timedelta | None,
    typer.Option(parser=parse_duration, metavar="DURATION", help="Message age limit (1h, 7d)."),
]
MaxMsgs = Annotated[int | None, typer.Option(help="Message count limit (-1: none).")]
MaxBytes = Annotated[
    int | None,
    typer.Option(parser=parse_size, metavar="SIZE", help="Size limit (10MB, 1GiB; -1: none)."),
]
MaxMsgSize = Annotated[
    int | None, typer.Option(parser=parse_size, metavar="SIZE", help="Largest message.")
]
MaxPerSubject = Annotated[
    int | None, typer.Option("--max-msgs-per-subject", help="Messages kept per subject.")
]
Replicas = Annotated[int | None, typer.Option(min=1, max=5, help="Replicas (clustered).")]
DupeWindow = Annotated[
    timedelta | None,
    typer.Option(parser=parse_duration, metavar="DURATION", help="Duplicate detection window."),
]
AllowMsgTTL = Annotated[
    bool | None,
    typer.Option(
        "--allow-msg-ttl/--no-allow-msg-ttl", help="Allow per-message TTLs (Nats-TTL, ADR-43)."
    ),
]
MarkerTTL = Annotated[
    timedelta | None,
    typer.Option(
        parser=parse_marker_ttl,
        metavar="DURATION",
        help="Leave delete markers that live this long (subject_delete_marker_ttl).",
    ),
]
AllowDirect = Annotated[
    bool | None, typer.Option("--allow-direct/--no-allow-direct", help="Allow direct gets.")
]
AllowRollup = Annotated[
    bool | None,
    typer.Option("--allow-rollup/--no-allow-rollup", help="Allow Nats-Rollup headers."),
]
DenyDelete = Annotated[
    bool | None, typer.Option("--deny-delete/--allow-delete", help="Refuse message deletes.")
]
DenyPurge = Annotated[
    bool | None, typer.Option("--deny-purge/--allow-purge", help="Refuse purges.")
]
Compression = Annotated[
    StoreCompression | None, typer.Option(case_sensitive=False, help="none or s2 (file streams).")
]
ConfigFile = Annotated[
    Path | None,
    typer.Option(
        "--config",
        help="A JSON stream config, as the server writes it (stream info --json); '-' reads "
        "stdin. Options given as well override its fields.",
    ),
]


def list_values(values: list[str] | None, option: str = "--subjects") -> list[str] | None:
    """Repeated options and comma separated lists, flattened (None when not given).

    Empty parts are left out (``a,,b``), but values that hold none at all
    (``--subjects ''``) are refused: an empty list would replace the
    setting instead of leaving it as it is. Each subject is checked as the
    library checks a subject filter (:func:`~._common.check_subject`), so a
    bad one (``a..b``, ``a b``) is a usage error before anything is sent.

    Raises:
        typer.BadParameter: ``option`` was given, with nothing in it, or with
            a subject that is not valid.

    """
    if not values:
        return None
    parts = [part.strip() for value in values for part in value.split(",")]
    found = [part for part in parts if part]
    if not found:
        given = ", ".join(repr(value) for value in values)
        raise typer.BadParameter(f"{given} names no subject", param_hint=f"'{option}'")
    return [check_subject(part, option) for part in found]


def config_from(base: dict[str, Any], changes: dict[str, Any]) -> StreamConfig:
    """A stream config: ``base`` (server JSON form) updated with the options given.

    Raises:
        pydantic.ValidationError: the result is not a valid config.

    """
    merged = dict(base)
    merged.update({k: v for k, v in changes.items() if v is not None})
    return StreamConfig.model_validate(merged, context=SERVER_JSON)


#: Each option of ``stream add``/``stream edit`` that sets a config field: parameter -> field.
_OPTION_FIELDS = {
    "subjects": "subjects",
    "storage": "storage",
    "retention": "retention",
    "discard": "discard",
    "max_age": "max_age",
    "max_msgs": "max_msgs",
    "max_bytes": "max_bytes",
    "max_msg_size": "max_msg_size",
    "max_msgs_per_subject": "max_msgs_per_subject",
    "replicas": "num_replicas",
    "dupe_window": "duplicate_window",
    "description": "description",
    "allow_msg_ttl": "allow_msg_ttl",
    "marker_ttl": "subject_delete_marker_ttl",
    "allow_direct": "allow_direct",
    "allow_rollup": "allow_rollup_hdrs",
    "deny_delete": "deny_delete",
    "deny_purge": "deny_purge",
    "compression": "compression",
}


def _changes(options: dict[str, Any]) -> dict[str, Any]:
    """The config fields the command's options set (None: not given), from its parameters."""
    changes = {field: options[param] for param, field in _OPTION_FIELDS.items()}
    changes["subjects"] = list_values(changes["subjects"], "--subjects")
    return changes


def _named(config: dict[str, Any], name: str) -> dict[str, Any]:
    if config.get("name", name) != name:
        raise CliError(f"the config names stream {config['name']!r}, not {name!r}")
    return {**config, "name": name}


def _user_metadata(metadata: dict[str, str] | None) -> dict[str, str] | None:
    """The metadata without the server's own ``_nats.*`` keys (None when empty)."""
    shown = {k: v for k, v in (metadata or {}).items() if not k.startswith("_nats.")}
    return shown or None


def _seq_at(seq: int, ts: datetime) -> str:
    return f"{seq} ({format_time(ts)})" if seq else "-"


def _limit(value: int | None) -> str:
    return "unlimited" if value is None or value < 0 else f"{value:,}"


def info_table(info: StreamInfo) -> list[Table]:
    """The tables ``stream info`` prints: configuration, then state."""
    cfg = info.config
    state = info.state
    config_rows: list[tuple[str, Any]] = [
        ("Name", cfg.name),
        ("Description", cfg.description),
        ("Subjects", cfg.subjects),
        ("Created", format_time(info.created)),
        ("Storage", str(cfg.storage)),
        ("Replicas", cfg.num_replicas),
        ("Retention", str(cfg.retention)),
        ("Discard", str(cfg.discard)),
        ("Max messages", _limit(cfg.max_msgs)),
        ("Max bytes", format_limit(cfg.max_bytes)),
        ("Max age", format_duration(cfg.max_age) if cfg.max_age else "unlimited"),
        ("Max msg size", format_limit(cfg.max_msg_size)),
        ("Max per subject", _limit(cfg.max_msgs_per_subject)),
        ("Duplicate window", format_duration(cfg.duplicate_window)),
        ("Compression", str(cfg.compression) if cfg.compression else None),
        ("Allow msg TTL", cfg.allow_msg_ttl),
        ("Marker TTL", cfg.subject_delete_marker_ttl),
        ("Allow direct", cfg.allow_direct),
        ("Allow rollup", cfg.allow_rollup_hdrs),
        ("Deny delete", cfg.deny_delete),
        ("Deny purge", cfg.deny_purge),
        ("Sealed", cfg.sealed or None),
        ("Metadata", _user_metadata(cfg.metadata)),
    ]
    state_rows: list[tuple[str, Any]] = [
        ("Messages", f"{state.messages:,}"),
        ("Bytes", format_bytes(state.bytes)),
        ("First sequence", _seq_at(state.first_seq, state.first_ts)),
        ("Last sequence", _seq_at(state.last_seq, state.last_ts)),
        ("Deleted", f"{state.num_deleted:,}" if state.num_deleted else None),
        ("Subjects", f"{state.num_subjects:,}"),
        ("Consumers", state.consumer_count),
    ]
    if info.cluster is not None and info.cluster.name:
        state_rows.append(("Cluster", info.cluster.name))
        leader = info.cluster.leader
        if not leader and cfg.num_replicas > 1:
            # A member answers while there is no leader, with its own state.
            leader = "none (this state is a member's, maybe behind)"
        state_rows.append(("Leader", leader))
    return [kv_table("Configuration", config_rows), kv_table("State", state_rows)]


# --------------------------------------------------------------------------- commands


@app.command("ls")
def ls(
    ctx: typer.Context,
    subject: Annotated[
        str | None, typer.Option("--subject", help="Only streams that store this subject.")
    ] = None,
    names: NamesFlag = False,
    json_flag: JsonFlag = False,
) -> None:
    """List the streams."""
    out = output(ctx, json_flag)

    async def work(js: JetStreamContext) -> list[StreamInfo]:
        return [info async for info in js.list_streams(subject)]

    infos = sorted(run(ctx, work), key=lambda i: i.config.name)
    names_of = [i.config.name for i in infos]
    if listed(out, names_of, infos, names_only=names, empty="No streams."):
        return
    table = list_table("Streams")
    table.add_column("Name", overflow="fold", ratio=2)
    table.add_column("Subjects", overflow="fold", ratio=2)
    table.add_column("Storage", no_wrap=True)
    table.add_column("Messages", justify="right", no_wrap=True)
    table.add_column("Size", justify="right", no_wrap=True)
    table.add_column("Last", justify="right", no_wrap=True)
    for info in infos:
        table.add_row(
            info.config.name,
            ", ".join(info.config.subjects or []),
            str(info.config.storage),
            f"{info.state.messages:,}",
            format_bytes(info.state.bytes),
            format_age(info.state.last_ts) if info.state.last_seq else "-",
        )
    out.table(table)


@app.command("info")
def info(ctx: typer.Context, name: Name, json_flag: JsonFlag = False) -> None:
    """Show a stream's configuration and state."""
    out = output(ctx, json_flag)

    async def work(js: JetStreamContext) -> StreamInfo:
        stream = await js.stream(name)
        return stream.cached_info

    _show(out, run(ctx, work))


def _save_command(*, edit: bool, doc: str) -> Callable[..., None]:
    """``stream add`` or ``stream edit``: the same options, creating or changing."""

    def command(
        ctx: typer.Context,
        name: Name,
        subjects: Subjects = None,
        storage: Storage = None,
        retention: Retention = None,
        discard: Discard = None,
        max_age: MaxAge = None,
        max_msgs: MaxMsgs = None,
        max_bytes: MaxBytes = None,
        max_msg_size: MaxMsgSize = None,
        max_msgs_per_subject: MaxPerSubject = None,
        replicas: Replicas = None,
        dupe_window: DupeWindow = None,
        description: Description = None,
        allow_msg_ttl: AllowMsgTTL = None,
        marker_ttl: MarkerTTL = None,
        allow_direct: AllowDirect = None,
        allow_rollup: AllowRollup = None,
        deny_delete: DenyDelete = None,
        deny_purge: DenyPurge = None,
        compression: Compression = None,
        config: ConfigFile = None,
        json_flag: JsonFlag = False,
    ) -> None:
        _save(ctx, name, _changes(locals()), config, json_flag, edit=edit)

    command.__doc__ = doc
    return command


add = app.command("add")(
    _save_command(edit=False, doc="Create a stream (subjects default to the stream's name).")
)
edit = app.command("edit")(
    _save_command(
        edit=True,
        doc="Change a stream's settings: the options given (or a whole --config) replace them.",
    )
)


def _save(
    ctx: typer.Context,
    name: str,
    changes: dict[str, Any],
    config: Path | None,
    json_flag: bool,
    *,
    edit: bool,
) -> None:
    """``stream add`` (``edit=False``) or ``stream edit``: the config saved, then shown."""
    out = output(ctx, json_flag)
    if edit and config is None and all(v is None for v in changes.values()):
        raise typer.BadParameter("nothing to change: give an option or --config")

    async def work(js: JetStreamContext) -> StreamInfo:
        if config is not None:
            base = _named(load_json_file(config), name)
        elif edit:
            current = (await js.stream(name)).cached_info.config
            base = current.model_dump(exclude_unset=True)
        else:
            base = {"name": name}
        stream_config = config_from(base, changes)
        with as_written():  # a duration or number out of the server's range: exit 2
            if edit:
                return (await js.update_stream(stream_config)).cached_info
            return (await js.create_stream(stream_config)).cached_info

    _show(out, run(ctx, work), "Updated" if edit else "Created")


def _show(out: Output, result: StreamInfo, done: str | None = None) -> None:
    """A stream's info: JSON, or a note of what was ``done`` and the tables."""
    if out.json:
        out.emit_json(result)
        return
    if done is not None:
        out.note(f"{done} stream {result.config.name}.")
    for table in info_table(result):
        out.table(table)


@app.command("rm")
def rm(ctx: typer.Context, name: Name, force: Force = False, json_flag: JsonFlag = False) -> None:
    """Delete a stream, its messages and its consumers."""
    out = output(ctx, json_flag)
    confirm(f"Delete stream {name} and all its messages?", force)

    async def work(js: JetStreamContext) -> None:
        await js.delete_stream(name)

    run(ctx, work)
    done(out, {"stream": name, "deleted": True}, f"Deleted stream {name}.")


def _purged_what(subject: str | None, seq: int | None, keep: int | None) -> str:
    """What ``stream purge`` removes, for its question: the options in words."""
    on = f" on {subject}" if subject else ""
    if seq is not None:
        return f"the messages{on} below sequence {seq}"
    if keep:
        newest = "newest message" if keep == 1 else f"newest {keep:,} messages"
        return f"all but the {newest}{on}"
    return f"messages{on}" if subject else "all messages"


@app.command("purge")
def purge(
    ctx: typer.Context,
    name: Name,
    subject: Annotated[str | None, typer.Option(help="Only messages on this subject.")] = None,
    seq: Annotated[
        int | None,
        typer.Option(min=1, max=MAX_SEQUENCE, help="Only messages below this sequence."),
    ] = None,
    keep: Annotated[int | None, typer.Option(min=0, help="Keep the newest N messages.")] = None,
    force: Force = False,
    json_flag: JsonFlag = False,
) -> None:
    """Remove messages from a stream (all of them unless limited)."""
    out = output(ctx, json_flag)
    if seq is not None and keep is not None:
        raise typer.BadParameter("--seq and --keep can not be combined")
    confirm(f"Purge {_purged_what(subject, seq, keep)} of stream {name}?", force)

    async def work(js: JetStreamContext) -> int:
        stream = await js.stream(name)
        return await stream.purge(subject=subject, sequence=seq, keep=keep)

    purged = run(ctx, work)
    if out.json:
        out.emit_json({"stream": name, "purged": purged})
    else:
        noun = "message" if purged == 1 else "messages"
        out.print(f"Purged {purged:,} {noun} from stream {name}.")
