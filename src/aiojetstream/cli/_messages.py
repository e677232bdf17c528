"""``aiojetstream pub``, ``consume`` and ``get``: messages in and out of streams."""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Annotated, Any

import typer
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    Task,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.text import Text

from aiojetstream import (
    AckPolicy,
    DeliverPolicy,
    JetStreamContext,
    Msg,
    OrderedConsumerConfig,
    PubAck,
    RawStreamMessage,
)

from . import MAX_SEQUENCE
from ._common import (
    CliError,
    JsonFlag,
    Output,
    check_subject,
    kv_table,
    output,
    payload_fields,
    printable,
    read_data,
    run,
)
from ._units import format_bytes, format_duration, format_rate, format_time, parse_ttl, parse_wait

__all__ = [
    "AckWindow",
    "DescriptionColumn",
    "parse_headers",
    "progress_bar",
    "register",
]


_PULL_BATCH = 100
_PULL_EXPIRES = 30.0
MIN_EXPIRES = 1.0  # the shortest pull the library allows
_PROGRESS_EVERY = 256  # pipelined publishes between two updates of the progress bar


def parse_headers(values: list[str] | None) -> dict[str, str] | None:
    """``["K:V", ...]`` -> ``{"K": "V"}`` (spaces around the value are trimmed).

    Raises:
        typer.BadParameter: a value has no colon or an empty name, or a name
            is given twice (a header has one value here; it would keep the last).

    """
    if not values:
        return None
    headers: dict[str, str] = {}
    for item in values:
        key, sep, value = item.partition(":")
        if not sep or not key.strip():
            raise typer.BadParameter(f"{item!r} is not a header: use NAME:VALUE")
        name = key.strip()
        if name in headers:
            raise typer.BadParameter(f"header {name!r} is given twice: give each name once")
        headers[name] = value.strip()
    return headers


class DescriptionColumn(TextColumn):
    """A progress bar's description in :func:`~._output.printable` form, without markup.

    Rich's ``TextColumn`` writes it as it is: an object name or a subject with
    ESC in it would reach the terminal.
    """

    def __init__(self) -> None:
        super().__init__("{task.description}", markup=False)

    def render(self, task: Task) -> Text:
        """The task's description, control characters escaped."""
        return Text(printable(task.description), style=self.style, justify=self.justify)


def progress_bar(out: Output, what: str) -> Progress:
    """A Rich progress bar on standard error (standard output stays for results)."""
    return Progress(
        DescriptionColumn(),
        BarColumn(bar_width=24),
        MofNCompleteColumn(),
        TaskProgressColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=out.err,
        transient=False,
        disable=out.json,
    )


# --------------------------------------------------------------------------- pub


@dataclass
class PubSummary:
    """What ``pub --count`` reports."""

    subject: str
    count: int
    acked: int = 0
    duplicates: int = 0
    stream: str | None = None
    first_seq: int | None = None
    last_seq: int | None = None
    seconds: float = 0.0
    payload_bytes: int = 0
    errors: list[str] = field(default_factory=list)

    def add(self, ack: PubAck) -> None:
        """Count one acknowledgement."""
        self.acked += 1
        self.stream = ack.stream
        if ack.duplicate:
            self.duplicates += 1
            return
        if self.first_seq is None or ack.seq < self.first_seq:
            self.first_seq = ack.seq
        if self.last_seq is None or ack.seq > self.last_seq:
            self.last_seq = ack.seq

    def as_dict(self) -> dict[str, Any]:
        """The JSON form."""
        rate = self.count / self.seconds if self.seconds > 0 else None
        return {
            "subject": self.subject,
            "stream": self.stream,
            "count": self.count,
            "acked": self.acked,
            "duplicates": self.duplicates,
            "first_seq": self.first_seq,
            "last_seq": self.last_seq,
            "seconds": round(self.seconds, 6),
            "msgs_per_second": round(rate, 1) if rate is not None else None,
        }


class AckWindow:
    """The outcomes of asynchronous publishes, taken as they come; no future is kept.

    ``publish_async`` waits while the library's window
    (``publish_async_max_pending``) is full, so at most that many publishes
    are outstanding; this only counts them. Each acknowledgement goes to the
    callback given to :meth:`track`; the first failure is kept in
    :attr:`error`, which :meth:`check` raises, so that a sender can stop at
    once instead of after its last message (later failures of the same window
    are marked seen and dropped).
    """

    def __init__(self) -> None:
        self.outstanding = 0
        self.error: BaseException | None = None
        self._settled = asyncio.Event()
        self._settled.set()

    def track(self, fut: asyncio.Future[PubAck], on_ack: Callable[[PubAck], None]) -> None:
        """Count ``fut`` until it completes; then ``on_ack(ack)``, or keep its failure."""
        self.outstanding += 1
        self._settled.clear()

        def done(fut: asyncio.Future[PubAck]) -> None:
            self.outstanding -= 1
            if fut.cancelled():
                failure: BaseException | None = CliError("a publish was cancelled")
            else:
                failure = fut.exception()  # seen: no "exception was never retrieved"
            try:
                if failure is None:
                    on_ack(fut.result())
            except Exception as exc:  # the callback's own failure ends the window too
                failure = exc
            finally:
                if failure is not None and self.error is None:
                    self.error = failure
                if failure is not None or self.outstanding == 0:
                    self._settled.set()  # wait() must never be left waiting

        fut.add_done_callback(done)

    def check(self) -> None:
        """Raise the first failure, if there was one."""
        if self.error is not None:
            raise self.error

    async def wait(self) -> None:
        """Wait until every tracked publish completed, or one failed (then raise its error)."""
        while self.outstanding and self.error is None:
            await self._settled.wait()
        self.check()


def _fill(template: bytes, number: int) -> bytes:
    return template.replace(b"{n}", str(number).encode()) if b"{n}" in template else template


def _fill_id(template: str | None, number: int) -> str | None:
    return template.replace("{n}", str(number)) if template is not None else None


def _same(payload: bytes, number: int) -> bytes:  # without --count: no template
    return payload


def _same_id(msg_id: str | None, number: int) -> str | None:
    return msg_id


def pub(
    ctx: typer.Context,
    subject: Annotated[str, typer.Argument(help="The subject.", show_default=False)],
    data: Annotated[
        str | None,
        typer.Argument(help="The payload; '-' reads standard input; none: empty."),
    ] = None,
    count: Annotated[
        int | None,
        typer.Option(
            "--count",
            "-c",
            min=1,
            help="Publish this many messages; {n} in the payload and --msg-id is replaced.",
            show_default=False,
        ),
    ] = None,
    ttl: Annotated[
        str | None,
        typer.Option(
            parser=parse_ttl,
            metavar="DURATION",
            help="Per-message TTL (30s, 1h, never; the stream needs --allow-msg-ttl).",
        ),
    ] = None,
    msg_id: Annotated[
        str | None, typer.Option("--msg-id", help="Deduplication id (Nats-Msg-Id).")
    ] = None,
    header: Annotated[
        list[str] | None,
        typer.Option("--header", "-H", help="A header NAME:VALUE (repeat).", show_default=False),
    ] = None,
    sync: Annotated[
        bool,
        typer.Option("--sync", help="With --count: wait for each ack before the next message."),
    ] = False,
    use_async: Annotated[
        bool,
        typer.Option(
            "--async", hidden=True, help="Accepted for scripts: pipelining is the default."
        ),
    ] = False,
    json_flag: JsonFlag = False,
) -> None:
    """Publish a message to a stream and print its acknowledgement.

    With --count, the payload (argument or standard input) and --msg-id may
    contain {n}, replaced by the message's number (1, 2, ...); without it,
    {n} is sent as it is. With --count the messages are pipelined (a window of acks
    in flight, each one checked: the first failure stops the sending), a
    progress bar runs and a summary of acks, duplicates and rate is printed.
    """
    out = output(ctx, json_flag)
    if sync and use_async:
        raise typer.BadParameter("--sync and --async can not be combined")
    headers = parse_headers(header)
    payload = read_data(data)
    if count is None and not use_async:
        # Without --count nothing is a template: a literal {n} (ICU, ${n}, \d{n}) is kept.

        async def one(js: JetStreamContext) -> PubAck:
            return await js.publish(subject, payload, headers=headers, msg_id=msg_id, ttl=ttl)

        ack = run(ctx, one)
        if out.json:
            out.emit_json(ack)
        elif ack.duplicate:
            out.print(f"Duplicate of stream {ack.stream} sequence {ack.seq}.")
        else:
            out.print(f"Stored in stream {ack.stream} at sequence {ack.seq}.")
        return

    # {n} is replaced only when --count was given (--async alone sends one message as is).
    templated = count is not None
    total = count if count is not None else 1
    fill = _fill if templated else _same
    fill_id = _fill_id if templated else _same_id
    summary = PubSummary(subject, total)

    async def many(js: JetStreamContext) -> None:
        with progress_bar(out, "pub") as progress:
            task = progress.add_task(f"Publishing to {subject}", total=total)
            start = time.perf_counter()
            if not sync:
                # The library's window bounds what is outstanding; nothing is
                # kept per message, and the first failure stops the sending.
                window = AckWindow()
                try:
                    for n in range(1, total + 1):
                        window.check()
                        body = fill(payload, n)
                        summary.payload_bytes += len(body)
                        fut = await js.publish_async(
                            subject, body, headers=headers, msg_id=fill_id(msg_id, n), ttl=ttl
                        )
                        window.track(fut, summary.add)
                        if n % _PROGRESS_EVERY == 0:  # not per ack: it redraws 10 times a second
                            progress.update(task, completed=summary.acked)
                    await window.wait()  # raises the first failed publish's error
                finally:
                    # (Also when sending stopped at a failure: the bar shows what was stored.)
                    progress.update(task, completed=summary.acked)
            else:
                for n in range(1, total + 1):
                    body = fill(payload, n)
                    summary.payload_bytes += len(body)
                    summary.add(
                        await js.publish(
                            subject, body, headers=headers, msg_id=fill_id(msg_id, n), ttl=ttl
                        )
                    )
                    progress.advance(task)
            summary.seconds = time.perf_counter() - start

    run(ctx, many)
    if out.json:
        out.emit_json(summary.as_dict())
        return
    stored = summary.acked - summary.duplicates
    seqs = f"{summary.first_seq}..{summary.last_seq}" if summary.first_seq is not None else "-"
    rows: list[tuple[str, Any]] = [
        ("Subject", subject),
        ("Stream", summary.stream),
        ("Published", f"{total:,}"),
        ("Acknowledged", f"{summary.acked:,}"),
        ("Stored", f"{stored:,} (sequences {seqs})"),
        ("Duplicates", f"{summary.duplicates:,}"),
        ("Time", f"{summary.seconds:.3f} s"),
        ("Rate", format_rate(total, summary.seconds)),
        (
            "Throughput",
            format_bytes(summary.payload_bytes / summary.seconds) + "/s"
            if summary.seconds > 0
            else None,
        ),
    ]
    out.table(kv_table("Published", rows))


# --------------------------------------------------------------------------- consume


def _msg_record(
    *,
    stream: str,
    subject: str,
    seq: int,
    time_: datetime,
    headers: dict[str, str] | None,
    data: bytes,
    delivered: int | None = None,
    pending: int | None = None,
) -> dict[str, Any]:
    record: dict[str, Any] = {"stream": stream, "subject": subject, "seq": seq, "time": time_}
    if delivered is not None:
        record["delivered"] = delivered
    if pending is not None:
        record["pending"] = pending
    record["headers"] = headers or {}
    record.update(payload_fields(data))
    return record


def _show(out: Output, record: dict[str, Any], data: bytes, raw: bool, show_headers: bool) -> None:
    if out.json:
        out.json_line(record)
        return
    if raw:
        sys.stdout.buffer.write(data + b"\n")
        sys.stdout.buffer.flush()
        return
    delivered = record.get("delivered", 1)
    extra = f", delivery {delivered}" if delivered > 1 else ""
    out.print(
        f"[{record['stream']} #{record['seq']}] {record['subject']} "
        f"{format_time(record['time'])}, {len(data)} bytes{extra}"
    )
    if show_headers and record["headers"]:
        for key, value in record["headers"].items():
            out.print(f"  {key}: {value}")
    out.body(data)


def consume(
    ctx: typer.Context,
    stream: Annotated[str, typer.Argument(help="The stream.", show_default=False)],
    consumer: Annotated[
        str | None,
        typer.Argument(help="A durable consumer; none: an ordered replay of the stream."),
    ] = None,
    count: Annotated[
        int | None, typer.Option("--count", "-c", min=1, help="Stop after this many messages.")
    ] = None,
    idle: Annotated[
        float | None,
        typer.Option(
            parser=parse_wait,
            metavar="DURATION",
            help="Stop after this long without a message (30, 1.5, 500ms, 2m: a bare number "
            "is seconds; at least 1 s with a CONSUMER).",
        ),
    ] = None,
    ack: Annotated[
        bool | None,
        typer.Option(
            "--ack/--no-ack", help="Acknowledge each message (default: yes, with a CONSUMER)."
        ),
    ] = None,
    raw: Annotated[bool, typer.Option("--raw", help="Print only the payloads.")] = False,
    headers: Annotated[bool, typer.Option("--headers", help="Print the headers too.")] = False,
    subject: Annotated[
        list[str] | None,
        typer.Option(
            "--subject", help="Ordered replay: only these subjects (repeat).", show_default=False
        ),
    ] = None,
    start_seq: Annotated[
        int | None,
        typer.Option(min=1, max=MAX_SEQUENCE, help="Ordered replay: start at this sequence."),
    ] = None,
    new: Annotated[
        bool, typer.Option("--new", help="Ordered replay: only messages stored from now on.")
    ] = False,
    json_flag: JsonFlag = False,
) -> None:
    """Print the messages of a stream, through CONSUMER or an ordered replay.

    Runs until --count messages, --idle seconds without one, or Ctrl-C. With
    --json, one JSON object per message (data as text, or data_base64).
    """
    out = output(ctx, json_flag)
    if consumer is None and ack:
        raise typer.BadParameter("--ack needs a CONSUMER (an ordered replay does not ack)")
    if consumer is not None and (subject or start_seq is not None or new):
        raise typer.BadParameter("--subject, --start-seq and --new are for an ordered replay")
    if start_seq is not None and new:
        raise typer.BadParameter("--start-seq and --new can not be combined")
    for item in subject or []:
        if not item.strip():  # an empty filter would replay every subject
            raise typer.BadParameter(f"{item!r} names no subject", param_hint="'--subject'")
        check_subject(item, "--subject")
    do_ack = consumer is not None and ack is not False
    config: OrderedConsumerConfig | None = None
    if consumer is None:
        policy = DeliverPolicy.ALL
        if start_seq is not None:
            policy = DeliverPolicy.BY_START_SEQUENCE
        elif new:
            policy = DeliverPolicy.NEW
        config = OrderedConsumerConfig(
            filter_subjects=subject or None, deliver_policy=policy, opt_start_seq=start_seq
        )

    def show(msg: Msg) -> None:
        meta = msg.metadata
        record = _msg_record(
            stream=meta.stream,
            subject=msg.subject,
            seq=meta.sequence.stream,
            time_=meta.timestamp,
            headers=msg.headers,
            data=msg.data,
            delivered=meta.num_delivered,
            pending=meta.num_pending,
        )
        _show(out, record, msg.data, raw, headers)

    async def replay(js: JetStreamContext) -> int:
        seen = 0
        async with (await js.ordered_consumer(stream, config)).messages() as it:
            while count is None or seen < count:
                waiting = asyncio.timeout(idle)
                try:
                    async with waiting:
                        msg = await anext(it)
                except StopAsyncIteration:
                    break
                except TimeoutError:
                    if waiting.expired():
                        break  # --idle seconds without a message
                    raise
                show(msg)
                seen += 1
        return seen

    async def pull(js: JetStreamContext) -> int:
        assert consumer is not None
        durable = await js.consumer(stream, consumer)
        if do_ack and durable.cached_info.config.ack_policy is AckPolicy.NONE:
            raise CliError(f"consumer {stream} > {consumer} does not take acks (use --no-ack)")
        # Batches no larger than what is still wanted: a message pulled is
        # delivered, and one left unacknowledged waits out the ack wait. Pulls
        # within the consumer's limits (its own, or the server's max_request_batch
        # and friends it was given): the server answers a larger one with a 409.
        limits = durable.cached_info.config
        batch_limit = _PULL_BATCH
        if limits.max_batch and limits.max_batch > 0:
            batch_limit = min(batch_limit, limits.max_batch)
        expires_limit = _PULL_EXPIRES
        if limits.max_expires and limits.max_expires.total_seconds() > 0:
            expires_limit = min(expires_limit, limits.max_expires.total_seconds())
            if expires_limit < MIN_EXPIRES:
                raise CliError(
                    f"consumer {stream} > {consumer} has max_expires "
                    f"{format_duration(limits.max_expires)}, below the 1 s a pull waits at "
                    "least: to consume here, create it again with max_expires of 1s or more "
                    "(consumer rm, then consumer add --config), or raise it with the "
                    "library's update_consumer"
                )
        loop = asyncio.get_running_loop()
        quiet_since = loop.time()  # the last message (or the start)
        seen = 0
        while count is None or seen < count:
            expires = expires_limit
            if idle is not None:
                # The pull waits out what is left of --idle since the last message
                # (a whole --idle each pull waited up to twice as long).
                left = idle - (loop.time() - quiet_since)
                if left <= 0:
                    break  # --idle seconds without a message
                expires = min(max(left, MIN_EXPIRES), expires_limit)
            wanted = batch_limit if count is None else min(count - seen, batch_limit)
            acks: list[asyncio.Future[None]] = []
            got = 0
            async for msg in await durable.fetch(wanted, expires=expires):
                show(msg)
                if do_ack:
                    # Confirmed by the server (an ack that came after the ack wait, or
                    # was lost, would be redelivered): a failure is the command's error.
                    ack = asyncio.ensure_future(msg.double_ack())
                    ack.add_done_callback(_retrieved)  # (if show() raises meanwhile)
                    acks.append(ack)
                got += 1
                quiet_since = loop.time()
            seen += got
            if got == 0 and idle is not None:
                break  # the pull waited out what was left of --idle
            if acks:
                for outcome in await asyncio.gather(*acks, return_exceptions=True):
                    if isinstance(outcome, BaseException):
                        raise outcome
        return seen

    seen = run(ctx, replay if consumer is None else pull)
    if not out.json and not raw:
        out.note(f"{seen} message{'s' if seen != 1 else ''}.")


def _retrieved(ack: asyncio.Future[None]) -> None:
    """Mark an acknowledgement's outcome as seen (it is raised where it is awaited)."""
    if not ack.cancelled():
        ack.exception()


# --------------------------------------------------------------------------- get


def get(
    ctx: typer.Context,
    stream: Annotated[str, typer.Argument(help="The stream.", show_default=False)],
    seq: Annotated[
        int | None,
        typer.Argument(min=1, max=MAX_SEQUENCE, help="The sequence (or use --last-for)."),
    ] = None,
    last_for: Annotated[
        str | None, typer.Option("--last-for", help="The last message on this subject.")
    ] = None,
    raw: Annotated[bool, typer.Option("--raw", help="Print only the payload.")] = False,
    json_flag: JsonFlag = False,
) -> None:
    """Print one stored message, by sequence or as the last on a subject."""
    out = output(ctx, json_flag)
    if (seq is None) == (last_for is None):
        raise typer.BadParameter("give either SEQ or --last-for SUBJECT")

    async def work(js: JetStreamContext) -> RawStreamMessage:
        handle = await js.stream(stream)
        if seq is not None:
            return await handle.get_msg(seq)
        assert last_for is not None
        return await handle.get_last_msg_for_subject(last_for)

    msg = run(ctx, work)
    record = _msg_record(
        stream=stream,
        subject=msg.subject,
        seq=msg.seq,
        time_=msg.time,
        headers=msg.headers,
        data=msg.data,
    )
    if out.json:
        out.emit_json(record)
        return
    if raw:
        sys.stdout.buffer.write(msg.data)
        sys.stdout.buffer.flush()
        return
    rows: list[tuple[str, Any]] = [
        ("Stream", stream),
        ("Sequence", msg.seq),
        ("Subject", msg.subject),
        ("Time", format_time(msg.time)),
        ("Size", f"{len(msg.data):,} bytes"),
    ]
    for key, value in (msg.headers or {}).items():
        rows.append((f"Header {key}", value))
    out.table(kv_table(None, rows))
    out.body(msg.data)


def register(app: typer.Typer) -> None:
    """Add ``pub``, ``consume`` and ``get`` to the root command."""
    app.command("pub")(pub)
    app.command("consume")(consume)
    app.command("get")(get)
