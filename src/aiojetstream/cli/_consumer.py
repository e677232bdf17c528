"""``aiojetstream consumer``: list, show, add, remove, pause, resume and reset consumers."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from aiojetstream import (
    AckPolicy,
    ConsumerConfig,
    ConsumerInfo,
    ConsumerPauseResponse,
    DeliverPolicy,
    InvalidOptionError,
    JetStreamContext,
)

from . import MAX_SEQUENCE
from ._common import (
    CliError,
    Description,
    Force,
    JsonFlag,
    NamesFlag,
    as_written,
    confirm,
    done,
    kv_table,
    list_table,
    listed,
    load_json_file,
    output,
    run,
)
from ._stream import SERVER_JSON, list_values
from ._units import format_duration, format_time, parse_duration

__all__ = ["app", "parse_until"]

app = typer.Typer(
    help="Manage the consumers of a stream.",
    no_args_is_help=True,
    rich_markup_mode=None,
    add_completion=False,
)

Stream = Annotated[str, typer.Argument(help="The stream's name.", show_default=False)]
Name = Annotated[str, typer.Argument(help="The consumer's name.", show_default=False)]


def parse_until(text: str) -> datetime | timedelta:
    """A pause end: a duration from now (``10m``) or an ISO 8601 time (local time if naive).

    Raises:
        typer.BadParameter: neither a duration nor a time.

    """
    try:
        return parse_duration(text)
    except typer.BadParameter:
        moment = _parse_time(text)  # not a duration: a time, or neither
    if moment.tzinfo is not None:
        return moment
    try:
        return moment.astimezone(UTC)  # a local time
    except (OverflowError, ValueError):  # 9999-12-31T23:59 west of UTC, 0001-01-01 east of it
        raise typer.BadParameter(
            f"{text!r} in local time is outside the years 1 to 9999 in UTC"
        ) from None


def _parse_time(text: str) -> datetime:
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        raise typer.BadParameter(
            f"{text!r} is neither a duration (10m, 2h) nor a time (2030-01-01T12:00:00Z)"
        ) from None


def info_table(info: ConsumerInfo) -> Table:
    """The table ``consumer info`` prints."""
    cfg = info.config
    filters = cfg.filter_subjects or ([cfg.filter_subject] if cfg.filter_subject else None)
    start: str | None = None
    if cfg.deliver_policy is DeliverPolicy.BY_START_SEQUENCE:
        start = f"sequence {cfg.opt_start_seq}"
    elif cfg.deliver_policy is DeliverPolicy.BY_START_TIME:
        start = format_time(cfg.opt_start_time)
    paused: str | None = None
    if info.paused:
        paused = f"yes, {format_duration(info.pause_remaining)} left"
    rows: list[tuple[str, Any]] = [
        ("Name", info.name),
        ("Stream", info.stream_name),
        ("Description", cfg.description),
        ("Created", format_time(info.created)),
        ("Durable", bool(cfg.durable_name)),
        ("Filter", filters),
        ("Deliver policy", str(cfg.deliver_policy)),
        ("Start", start),
        ("Ack policy", str(cfg.ack_policy)),
        ("Ack wait", cfg.ack_wait),
        ("Max deliver", cfg.max_deliver if cfg.max_deliver and cfg.max_deliver > 0 else None),
        ("Max ack pending", cfg.max_ack_pending),
        ("Inactive threshold", cfg.inactive_threshold),
        ("Paused", paused),
        (
            "Delivered",
            f"consumer seq {info.delivered.consumer_seq}, stream seq {info.delivered.stream_seq}",
        ),
        (
            "Ack floor",
            f"consumer seq {info.ack_floor.consumer_seq}, stream seq {info.ack_floor.stream_seq}",
        ),
        ("Pending", f"{info.num_pending:,}"),
        ("Ack pending", f"{info.num_ack_pending:,}"),
        ("Redelivered", f"{info.num_redelivered:,}"),
        ("Waiting pulls", f"{info.num_waiting:,}"),
    ]
    return kv_table(f"Consumer {info.stream_name} > {info.name}", rows)


@app.command("ls")
def ls(
    ctx: typer.Context,
    stream: Stream,
    names: NamesFlag = False,
    json_flag: JsonFlag = False,
) -> None:
    """List a stream's consumers."""
    out = output(ctx, json_flag)

    async def work(js: JetStreamContext) -> list[ConsumerInfo]:
        return [info async for info in js.list_consumers(stream)]

    infos = sorted(run(ctx, work), key=lambda i: i.name)
    empty = f"No consumers on stream {stream}."
    if listed(out, [i.name for i in infos], infos, names_only=names, empty=empty):
        return
    table = list_table(f"Consumers of {stream}")
    table.add_column("Name", overflow="fold", ratio=2)
    table.add_column("Filter", overflow="fold", ratio=2)
    table.add_column("Ack", no_wrap=True)
    table.add_column("Pending", justify="right", no_wrap=True)
    table.add_column("Ack pending", justify="right", no_wrap=True)
    table.add_column("Redelivered", justify="right", no_wrap=True)
    for info in infos:
        cfg = info.config
        filters = cfg.filter_subjects or ([cfg.filter_subject] if cfg.filter_subject else [])
        name = info.name + (" (paused)" if info.paused else "")
        table.add_row(
            name,
            ", ".join(filters) or "-",
            str(cfg.ack_policy),
            f"{info.num_pending:,}",
            f"{info.num_ack_pending:,}",
            f"{info.num_redelivered:,}",
        )
    out.table(table)


async def _consumer_info(js: JetStreamContext, stream: str, name: str) -> ConsumerInfo:
    """The info of any consumer: ``js.consumer`` refuses a push one (the library pulls)."""
    try:
        return await (await js.consumer(stream, name)).info()
    except InvalidOptionError:
        async for info in js.list_consumers(stream):  # a push consumer: looked up by name
            if info.name == name:
                return info
        raise


@app.command("info")
def info(ctx: typer.Context, stream: Stream, name: Name, json_flag: JsonFlag = False) -> None:
    """Show a consumer's configuration and state."""
    out = output(ctx, json_flag)

    async def work(js: JetStreamContext) -> ConsumerInfo:
        return await _consumer_info(js, stream, name)

    result = run(ctx, work)
    if out.json:
        out.emit_json(result)
    else:
        out.table(info_table(result))


@app.command("add")
def add(
    ctx: typer.Context,
    stream: Stream,
    name: Name,
    filter_subjects: Annotated[
        list[str] | None,
        typer.Option(
            "--filter", help="Only these subjects (repeat, or comma separated).", show_default=False
        ),
    ] = None,
    ack: Annotated[
        AckPolicy | None,
        typer.Option(case_sensitive=False, help="Ack policy: explicit (default), none or all."),
    ] = None,
    deliver: Annotated[
        DeliverPolicy | None,
        typer.Option(
            case_sensitive=False,
            help="Where to start: all (default), last, new, last_per_subject.",
        ),
    ] = None,
    start_seq: Annotated[
        int | None, typer.Option(min=1, max=MAX_SEQUENCE, help="Start at this stream sequence.")
    ] = None,
    ack_wait: Annotated[
        timedelta | None,
        typer.Option(parser=parse_duration, metavar="DURATION", help="Redeliver after this."),
    ] = None,
    max_deliver: Annotated[int | None, typer.Option(help="Deliveries per message.")] = None,
    max_ack_pending: Annotated[
        int | None, typer.Option(help="Unacknowledged messages at most.")
    ] = None,
    inactive_threshold: Annotated[
        timedelta | None,
        typer.Option(
            parser=parse_duration, metavar="DURATION", help="Delete after this long unused."
        ),
    ] = None,
    description: Description = None,
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            help="A JSON consumer config as the server writes it ('-' reads stdin); options "
            "given as well override its fields.",
        ),
    ] = None,
    json_flag: JsonFlag = False,
) -> None:
    """Create a durable pull consumer NAME on STREAM."""
    out = output(ctx, json_flag)
    if start_seq is not None and deliver not in (None, DeliverPolicy.BY_START_SEQUENCE):
        raise typer.BadParameter("--start-seq goes with --deliver by_start_sequence only")
    filters = list_values(filter_subjects, "--filter")
    changes: dict[str, Any] = {
        "ack_policy": ack,
        "deliver_policy": DeliverPolicy.BY_START_SEQUENCE if start_seq is not None else deliver,
        "opt_start_seq": start_seq,
        "ack_wait": ack_wait,
        "max_deliver": max_deliver,
        "max_ack_pending": max_ack_pending,
        "inactive_threshold": inactive_threshold,
        "description": description,
    }
    if filters is not None:
        key = "filter_subject" if len(filters) == 1 else "filter_subjects"
        changes[key] = filters[0] if len(filters) == 1 else filters

    async def work(js: JetStreamContext) -> ConsumerInfo:
        base = load_json_file(config) if config is not None else {}
        for field in ("name", "durable_name"):
            if base.get(field, name) != name:
                raise CliError(f"the config names consumer {base[field]!r}, not {name!r}")
        if filters is not None:
            base.pop("filter_subject", None)
            base.pop("filter_subjects", None)
        merged = {**base, **{k: v for k, v in changes.items() if v is not None}}
        merged["durable_name"] = name
        cfg = ConsumerConfig.model_validate(merged, context=SERVER_JSON)
        with as_written():  # a duration or number out of the server's range: exit 2
            consumer = await js.create_consumer(stream, cfg)
        return consumer.cached_info

    result = run(ctx, work)
    if out.json:
        out.emit_json(result)
        return
    out.note(f"Created consumer {stream} > {result.name}.")
    out.table(info_table(result))


@app.command("rm")
def rm(
    ctx: typer.Context,
    stream: Stream,
    name: Name,
    force: Force = False,
    json_flag: JsonFlag = False,
) -> None:
    """Delete a consumer."""
    out = output(ctx, json_flag)
    confirm(f"Delete consumer {stream} > {name}?", force)

    async def work(js: JetStreamContext) -> None:
        await js.delete_consumer(stream, name)

    run(ctx, work)
    record = {"stream": stream, "consumer": name, "deleted": True}
    done(out, record, f"Deleted consumer {stream} > {name}.")


def _pause_result(out_json: bool, ctx: typer.Context, result: ConsumerPauseResponse) -> None:
    out = output(ctx, out_json)
    if out.json:
        out.emit_json(result)
    elif result.paused:
        out.print(
            f"Paused until {format_time(result.pause_until)} "
            f"({format_duration(result.pause_remaining)} from now)."
        )
    else:
        out.print("Not paused.")


@app.command("pause")
def pause(
    ctx: typer.Context,
    stream: Stream,
    name: Name,
    until: Annotated[
        str,
        typer.Argument(
            help="A duration from now (10m, 2h) or a time (2030-01-01T12:00:00Z).",
            show_default=False,
        ),
    ],
    json_flag: JsonFlag = False,
) -> None:
    """Pause a consumer: pulls get nothing until it resumes (nats-server 2.11)."""
    moment = parse_until(until)

    async def work(js: JetStreamContext) -> ConsumerPauseResponse:
        with as_written():  # a time in the past, or past the server's clock: exit 2
            return await js.pause_consumer(stream, name, moment)

    _pause_result(json_flag, ctx, run(ctx, work))


@app.command("resume")
def resume(ctx: typer.Context, stream: Stream, name: Name, json_flag: JsonFlag = False) -> None:
    """Resume a paused consumer."""

    async def work(js: JetStreamContext) -> ConsumerPauseResponse:
        return await js.resume_consumer(stream, name)

    _pause_result(json_flag, ctx, run(ctx, work))


@app.command("reset")
def reset(
    ctx: typer.Context,
    stream: Stream,
    name: Name,
    seq: Annotated[
        int | None,
        typer.Option(
            min=1,
            max=MAX_SEQUENCE,
            help="Deliver from this stream sequence (default: the first unacknowledged).",
        ),
    ] = None,
    json_flag: JsonFlag = False,
) -> None:
    """Move a consumer to a stream sequence (nats-server 2.14)."""
    out = output(ctx, json_flag)

    async def work(js: JetStreamContext) -> int:
        return await (await js.consumer(stream, name)).reset(seq)

    position = run(ctx, work)
    if out.json:
        out.emit_json({"stream": stream, "consumer": name, "sequence": position})
    else:
        out.print(f"Consumer {stream} > {name} continues at stream sequence {position}.")
