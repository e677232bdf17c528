"""``aiojetstream kv``: key-value buckets and their keys."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
from collections.abc import Iterator
from datetime import timedelta
from typing import Annotated, Any

import typer
from rich.table import Table
from rich.text import Text

from aiojetstream import (
    BucketNotFoundError,
    JetStreamContext,
    KeyValue,
    KeyValueConfig,
    KeyValueEntry,
    KeyValueOp,
    KeyValueStatus,
    StorageType,
)

from ._common import (
    BucketMaxBytes,
    BucketReplicas,
    BucketStorage,
    Description,
    Force,
    JsonFlag,
    NamesFlag,
    Output,
    as_written,
    bucket_existed,
    confirm,
    done,
    kv_table,
    list_table,
    listed,
    note_added,
    output,
    payload_fields,
    printable,
    printable_text,
    read_value,
    run,
)
from ._units import (
    format_bytes,
    format_duration,
    format_limit,
    format_time,
    parse_duration,
    parse_marker_ttl,
    parse_size,
    parse_ttl,
    parse_wait,
)

__all__ = ["app", "entry_record"]

app = typer.Typer(
    help="Key-value buckets: create, read, write and watch keys.",
    no_args_is_help=True,
    rich_markup_mode=None,
    add_completion=False,
)

Bucket = Annotated[str, typer.Argument(help="The bucket.", show_default=False)]
Key = Annotated[str, typer.Argument(help="The key.", show_default=False)]
Value = Annotated[
    str | None,
    typer.Argument(
        help="The value; '-' reads standard input; none: standard input when piped, else empty."
    ),
]
TTL = Annotated[
    str | None,
    typer.Option(
        parser=parse_ttl,
        metavar="DURATION",
        help="Remove the key after this long (30s, 1h; needs --limit-marker-ttl).",
    ),
]


def entry_record(entry: KeyValueEntry) -> dict[str, Any]:
    """The JSON form of an entry (value as text, or value_base64)."""
    record: dict[str, Any] = {
        "bucket": entry.bucket,
        "key": entry.key,
        "revision": entry.revision,
        "operation": str(entry.operation),
        "created": entry.created,
        "delta": entry.delta,
    }
    record.update(payload_fields(entry.value, "value"))
    return record


def _status_table(status: KeyValueStatus) -> Table:
    rows: list[tuple[str, Any]] = [
        ("Bucket", status.bucket),
        ("Description", status.stream_info.config.description),
        ("Values", f"{status.values:,}"),
        ("Size", format_bytes(status.bytes)),
        ("Max bytes", format_limit(status.stream_info.config.max_bytes)),
        ("Max value size", format_limit(status.stream_info.config.max_msg_size)),
        ("History", status.history),
        ("TTL", format_duration(status.ttl) if status.ttl else "none"),
        (
            "Limit marker TTL",
            format_duration(status.limit_marker_ttl) if status.limit_marker_ttl else "off",
        ),
        ("Storage", str(status.stream_info.config.storage)),
        ("Replicas", status.stream_info.config.num_replicas),
        ("Compressed", status.is_compressed),
        ("Backing stream", status.stream_info.config.name),
    ]
    return kv_table(f"Bucket {status.bucket}", rows)


def _status_json(status: KeyValueStatus) -> dict[str, Any]:
    return {
        "bucket": status.bucket,
        "values": status.values,
        "bytes": status.bytes,
        "history": status.history,
        "ttl": status.ttl,
        "limit_marker_ttl": status.limit_marker_ttl,
        "is_compressed": status.is_compressed,
        "stream_info": status.stream_info,
    }


def _show_entry(out: Output, entry: KeyValueEntry, raw: bool = False) -> None:
    if out.json:
        out.json_line(entry_record(entry))
    elif raw:
        sys.stdout.buffer.write(entry.value + b"\n")
        sys.stdout.buffer.flush()
    elif entry.operation is KeyValueOp.PUT:  # one line an entry: the value's newlines escaped
        value = printable_text(entry.value, lines=False)
        out.print(f"[{entry.operation}] {entry.key} revision {entry.revision}: {value}")
    else:
        out.print(f"[{entry.operation}] {entry.key} revision {entry.revision}")


@app.command("ls")
def ls(
    ctx: typer.Context,
    names: NamesFlag = False,
    json_flag: JsonFlag = False,
) -> None:
    """List the buckets."""
    out = output(ctx, json_flag)

    async def work(js: JetStreamContext) -> tuple[list[str], list[KeyValueStatus]]:
        buckets = sorted([name async for name in js.key_value_store_names()])
        statuses = []
        if not names:
            for name in buckets:
                try:
                    statuses.append(await (await js.key_value(name)).status())
                except BucketNotFoundError:
                    continue  # deleted since it was listed
        return buckets, statuses

    buckets, statuses = run(ctx, work)
    records = [_status_json(s) for s in statuses]
    if listed(out, buckets, records, names_only=names, empty="No key-value buckets."):
        return
    table = list_table("Key-value buckets")
    table.add_column("Bucket", overflow="fold", ratio=2)
    table.add_column("Values", justify="right", no_wrap=True)
    table.add_column("Size", justify="right", no_wrap=True)
    table.add_column("History", justify="right", no_wrap=True)
    table.add_column("TTL", no_wrap=True)
    table.add_column("Markers", no_wrap=True)
    for status in statuses:
        table.add_row(
            status.bucket,
            f"{status.values:,}",
            format_bytes(status.bytes),
            str(status.history),
            format_duration(status.ttl),
            format_duration(status.limit_marker_ttl),
        )
    out.table(table)


@app.command("info")
def info(ctx: typer.Context, bucket: Bucket, json_flag: JsonFlag = False) -> None:
    """Show a bucket's settings and size."""
    out = output(ctx, json_flag)

    async def work(js: JetStreamContext) -> KeyValueStatus:
        return await (await js.key_value(bucket)).status()

    status = run(ctx, work)
    if out.json:
        out.emit_json(_status_json(status))
    else:
        out.table(_status_table(status))


@app.command("add")
def add(
    ctx: typer.Context,
    bucket: Bucket,
    history: Annotated[int, typer.Option(min=1, max=64, help="Revisions kept per key.")] = 1,
    ttl: Annotated[
        timedelta | None,
        typer.Option(parser=parse_duration, metavar="DURATION", help="Values expire after this."),
    ] = None,
    limit_marker_ttl: Annotated[
        timedelta | None,
        typer.Option(
            parser=parse_marker_ttl,
            metavar="DURATION",
            help="Enable per-key TTLs; markers of removed keys live this long (ADR-48).",
        ),
    ] = None,
    max_value_size: Annotated[
        int | None, typer.Option(parser=parse_size, metavar="SIZE", help="Largest value.")
    ] = None,
    max_bytes: BucketMaxBytes = None,
    storage: BucketStorage = StorageType.FILE,
    replicas: BucketReplicas = 1,
    compression: Annotated[bool, typer.Option(help="Compress the values (s2).")] = False,
    description: Description = None,
    json_flag: JsonFlag = False,
) -> None:
    """Create a key-value bucket."""
    out = output(ctx, json_flag)

    async def work(js: JetStreamContext) -> tuple[bool, KeyValueStatus]:
        cfg = KeyValueConfig(
            bucket=bucket,
            description=description,
            history=history,
            ttl=ttl,
            limit_marker_ttl=limit_marker_ttl,
            max_value_size=-1 if max_value_size is None else max_value_size,
            max_bytes=-1 if max_bytes is None else max_bytes,
            storage=storage,
            replicas=replicas,
            compression=compression,
        )
        existed = await bucket_existed(js.key_value(bucket))
        with as_written():  # a duration or number out of the server's range: exit 2
            created = await js.create_key_value(cfg)
        return existed, await created.status()

    existed, status = run(ctx, work)
    if out.json:
        out.emit_json(_status_json(status))
        return
    note_added(out, bucket, existed)
    out.table(_status_table(status))


@app.command("rm")
def rm(
    ctx: typer.Context, bucket: Bucket, force: Force = False, json_flag: JsonFlag = False
) -> None:
    """Delete a bucket and all its keys."""
    out = output(ctx, json_flag)
    confirm(f"Delete bucket {bucket} and all its keys?", force)

    async def work(js: JetStreamContext) -> None:
        await js.delete_key_value(bucket)

    run(ctx, work)
    done(out, {"bucket": bucket, "deleted": True}, f"Deleted bucket {bucket}.")


@app.command("get")
def get(
    ctx: typer.Context,
    bucket: Bucket,
    key: Key,
    revision: Annotated[int | None, typer.Option(min=1, help="This revision.")] = None,
    raw: Annotated[bool, typer.Option("--raw", help="Print only the value.")] = False,
    json_flag: JsonFlag = False,
) -> None:
    """Print a key's value."""
    out = output(ctx, json_flag)

    async def work(js: JetStreamContext) -> KeyValueEntry:
        return await (await js.key_value(bucket)).get(key, revision=revision)

    entry = run(ctx, work)
    if out.json:
        out.emit_json(entry_record(entry))
    elif raw:
        sys.stdout.buffer.write(entry.value)
        sys.stdout.buffer.flush()
    else:
        out.print(
            f"{bucket} > {key} revision {entry.revision}, {format_time(entry.created)}, "
            f"{len(entry.value)} bytes"
        )
        out.body(entry.value)


def _revision_result(ctx: typer.Context, json_flag: bool, what: str, key: str, rev: int) -> None:
    out = output(ctx, json_flag)
    if out.json:
        out.emit_json({"key": key, "revision": rev})
    else:
        out.print(f"{what} {key}: revision {rev}.")


@app.command("put")
def put(
    ctx: typer.Context, bucket: Bucket, key: Key, value: Value = None, json_flag: JsonFlag = False
) -> None:
    """Store a value (a new revision of the key)."""
    data = read_value(value)

    async def work(js: JetStreamContext) -> int:
        return await (await js.key_value(bucket)).put(key, data)

    _revision_result(ctx, json_flag, "Stored", key, run(ctx, work))


@app.command("create")
def create(
    ctx: typer.Context,
    bucket: Bucket,
    key: Key,
    value: Value = None,
    ttl: TTL = None,
    json_flag: JsonFlag = False,
) -> None:
    """Store a value only if the key has none (fails if it exists)."""
    data = read_value(value)
    stretched: list[str] = []

    async def work(js: JetStreamContext) -> int:
        kv = await js.key_value(bucket)
        with _library_ttl_log_quiet():
            return await kv.create(key, data, ttl=_noted(kv, key, ttl, key, stretched))

    revision = run(ctx, work)
    for note in stretched:
        output(ctx, json_flag).note(note)
    _revision_result(ctx, json_flag, "Created", key, revision)


@app.command("del")
def delete(
    ctx: typer.Context, bucket: Bucket, key: Key, force: Force = False, json_flag: JsonFlag = False
) -> None:
    """Delete a key (its history stays, with a delete marker)."""
    out = output(ctx, json_flag)
    confirm(f"Delete key {key} of bucket {bucket}?", force)

    async def work(js: JetStreamContext) -> None:
        await (await js.key_value(bucket)).delete(key)

    run(ctx, work)
    done(out, {"bucket": bucket, "key": key, "deleted": True}, f"Deleted {key}.")


@app.command("purge")
def purge(
    ctx: typer.Context,
    bucket: Bucket,
    key: Key,
    ttl: TTL = None,
    force: Force = False,
    json_flag: JsonFlag = False,
) -> None:
    """Purge a key: remove all its revisions, leaving a purge marker (kept --ttl long)."""
    out = output(ctx, json_flag)
    confirm(f"Purge key {key} of bucket {bucket} (all its revisions)?", force)
    stretched: list[str] = []

    async def work(js: JetStreamContext) -> None:
        kv = await js.key_value(bucket)
        what = f"the purge marker of {key}"
        with _library_ttl_log_quiet():
            await kv.purge(key, ttl=_noted(kv, key, ttl, what, stretched))

    run(ctx, work)
    for note in stretched:
        out.note(note)
    done(out, {"bucket": bucket, "key": key, "purged": True}, f"Purged {key}.")


def _noted(kv: KeyValue, key: str, ttl: str | None, what: str, notes: list[str]) -> str | None:
    """``ttl``; a note in ``notes`` when the server will keep it longer.

    With ``--history`` above 1 the server raises a TTL under the bucket's
    ``--limit-marker-ttl`` to it (``ttl`` is whole seconds or ``never``).
    """
    cfg = kv.stream.cached_info.config
    marker = cfg.subject_delete_marker_ttl
    if ttl is None or ttl == "never" or not marker or cfg.max_msgs_per_subject == 1:
        return ttl
    if int(ttl) >= int(marker.total_seconds()):
        return ttl
    asked, kept = format_duration(timedelta(seconds=int(ttl))), format_duration(marker)
    notes.append(
        printable(
            f"note: {what} expires after {kept}, not {asked}: bucket {kv.bucket} has "
            f"--history {cfg.max_msgs_per_subject} and --limit-marker-ttl {kept}, and the "
            f"server raises a shorter TTL to the marker TTL (use --ttl {kept} or more, or a "
            "bucket with --history 1)"
        )
    )
    return ttl


@contextlib.contextmanager
def _library_ttl_log_quiet() -> Iterator[None]:
    """The library's log line for a stretched TTL left out: the command's note says it."""

    def quiet(record: logging.LogRecord) -> bool:
        return False

    log = logging.getLogger("aiojetstream.kv")
    log.addFilter(quiet)
    try:
        yield
    finally:
        log.removeFilter(quiet)


@app.command("history")
def history(ctx: typer.Context, bucket: Bucket, key: Key, json_flag: JsonFlag = False) -> None:
    """Show every stored revision of a key."""
    out = output(ctx, json_flag)

    async def work(js: JetStreamContext) -> list[KeyValueEntry]:
        return await (await js.key_value(bucket)).history(key)

    entries = run(ctx, work)
    if out.json:
        out.emit_json([entry_record(e) for e in entries])
        return
    table = list_table(f"History of {bucket} > {key}")
    table.add_column("Revision", justify="right", no_wrap=True)
    table.add_column("Operation", no_wrap=True)
    table.add_column("Created", no_wrap=True)
    table.add_column("Size", justify="right", no_wrap=True)
    # The column may be narrowed (the other columns stay whole); each value keeps to
    # one line, cut with an ellipsis.
    table.add_column("Value", overflow="ellipsis", max_width=30)
    for entry in entries:
        table.add_row(
            str(entry.revision),
            str(entry.operation),
            format_time(entry.created),
            format_bytes(len(entry.value)),
            Text(printable_text(entry.value, lines=False), no_wrap=True, overflow="ellipsis"),
        )
    out.table(table)


@app.command("keys")
def keys(ctx: typer.Context, bucket: Bucket, json_flag: JsonFlag = False) -> None:
    """List the bucket's live keys."""
    out = output(ctx, json_flag)

    async def work(js: JetStreamContext) -> list[str]:
        names = (await js.key_value(bucket)).keys()
        return sorted([key async for key in names])

    found = run(ctx, work)
    if out.json:
        out.emit_json(found)
    else:
        for key in found:
            out.print(key)


@app.command("watch")
def watch(
    ctx: typer.Context,
    bucket: Bucket,
    keys: Annotated[
        list[str] | None,
        typer.Argument(help="Keys or filters (orders.*, orders.>); none: all.", show_default=False),
    ] = None,
    include_history: Annotated[
        bool, typer.Option("--history", help="Start with every stored revision.")
    ] = False,
    updates_only: Annotated[
        bool, typer.Option("--updates-only", help="Only changes from now on.")
    ] = False,
    ignore_deletes: Annotated[
        bool, typer.Option("--ignore-deletes", help="Leave out deletes and purges.")
    ] = False,
    count: Annotated[
        int | None, typer.Option("--count", "-c", min=1, help="Stop after this many entries.")
    ] = None,
    idle: Annotated[
        float | None,
        typer.Option(
            parser=parse_wait,
            metavar="DURATION",
            help="Stop after this long without one (30, 1.5, 500ms, 2m: a bare number is seconds).",
        ),
    ] = None,
    json_flag: JsonFlag = False,
) -> None:
    """Print the keys' current values, then every change (until Ctrl-C, --count or --idle)."""
    out = output(ctx, json_flag)
    if include_history and updates_only:
        raise typer.BadParameter("--history and --updates-only can not be combined")

    async def work(js: JetStreamContext) -> int:
        kv = await js.key_value(bucket)
        seen = 0
        async with kv.watch(
            keys or ">",
            include_history=include_history,
            ignore_deletes=ignore_deletes,
            updates_only=updates_only,
        ) as watcher:
            while count is None or seen < count:
                waiting = asyncio.timeout(idle)
                try:
                    async with waiting:
                        entry = await anext(watcher)
                except StopAsyncIteration:
                    break
                except TimeoutError:
                    if waiting.expired():
                        break
                    raise
                if entry is None:
                    if not out.json:
                        out.note("(up to date; watching for changes)")
                    continue
                _show_entry(out, entry)
                seen += 1
        return seen

    run(ctx, work)
