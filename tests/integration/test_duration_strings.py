"""One duration syntax (issue 26) against a real nats-server, through the library and the CLI.

The strings reach the server as the durations they say: a consumer made with
``ack_wait="30s"`` has an ack wait of 30 s there (30,000,000,000 ns in its own
JSON), a bucket made with ``ttl="1h30m"`` keeps values 90 minutes, a message
published with ``ttl="1d"`` carries ``Nats-TTL: 86400``. The CLI takes the
same strings for the same settings, and refuses a bad one with the message the
library gives.
"""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta

import pytest
from pydantic import ValidationError
from typer.testing import CliRunner, Result

import aiojetstream
from aiojetstream import (
    ConsumerConfig,
    InvalidOptionError,
    InvalidTTLError,
    JetStreamContext,
    JetStreamTimeoutError,
    KeyValueConfig,
    ObjectStoreConfig,
    Schedule,
    StorageType,
    StreamConfig,
)
from aiojetstream.cli._app import app
from aiojetstream.testing import NatsServer
from helpers import unique_name

MEM = StorageType.MEMORY
NS = 1_000_000_000


async def raw_info(js: JetStreamContext, subject: str) -> dict[str, object]:
    """The server's own JSON for an info request (durations in nanoseconds)."""
    reply = await js.nc.request(f"$JS.API.{subject}", b"", timeout=5)
    config = json.loads(reply.data)["config"]
    assert isinstance(config, dict)
    return config


async def test_config_strings_are_the_servers_durations(js: JetStreamContext) -> None:
    name = unique_name("DUR")
    await js.create_stream(
        StreamConfig(
            name=name,
            subjects=[f"{name}.>"],
            storage=MEM,
            max_age="1d",
            duplicate_window="1m30s",
        )
    )
    consumer = await js.create_consumer(
        name,
        ConsumerConfig(
            durable_name="C", ack_wait="30s", inactive_threshold="1h", max_expires="1.5m"
        ),
    )
    info = await consumer.info()
    assert info.config.ack_wait == timedelta(seconds=30)
    assert info.config.inactive_threshold == timedelta(hours=1)
    assert info.config.max_expires == timedelta(seconds=90)
    raw = await raw_info(js, f"CONSUMER.INFO.{name}.C")
    assert raw["ack_wait"] == 30 * NS
    assert raw["inactive_threshold"] == 3_600 * NS
    stream = await raw_info(js, f"STREAM.INFO.{name}")
    assert stream["max_age"] == 86_400 * NS
    assert stream["duplicate_window"] == 90 * NS
    # backoff: a list of strings (the server takes the first as the ack wait)
    backed = await js.create_consumer(
        name, ConsumerConfig(durable_name="B", backoff=["1s", "5s", "1m"], max_deliver=5)
    )
    assert (await backed.info()).config.backoff == [
        timedelta(seconds=1),
        timedelta(seconds=5),
        timedelta(minutes=1),
    ]


async def test_key_value_ttl_string(js: JetStreamContext) -> None:
    bucket = unique_name("DUR")
    kv = await js.create_key_value(
        KeyValueConfig(bucket=bucket, ttl="1h30m", limit_marker_ttl="1s", storage=MEM)
    )
    status = await kv.status()
    assert status.ttl == timedelta(hours=1, minutes=30)
    assert status.limit_marker_ttl == timedelta(seconds=1)
    await kv.create("k", b"v", ttl="1d")
    entry = await kv.get("k")
    raw = await (await js.stream(f"KV_{bucket}")).get_msg(entry.revision)
    assert raw.headers is not None
    assert raw.headers["Nats-TTL"] == "86400"


async def test_publish_ttl_and_pull_options_take_strings(js: JetStreamContext) -> None:
    name = unique_name("DUR")
    stream = await js.create_stream(
        StreamConfig(name=name, subjects=[f"{name}.>"], storage=MEM, allow_msg_ttl=True)
    )
    day = await js.publish(f"{name}.a", b"x", ttl="1d")
    week = await js.publish(f"{name}.a", b"x", ttl="1w2d")
    seconds = await js.publish(f"{name}.a", b"x", ttl="90")
    assert (await stream.get_msg(day.seq)).headers == {"Nats-TTL": "86400"}
    assert (await stream.get_msg(week.seq)).headers == {"Nats-TTL": str(9 * 86_400)}
    assert (await stream.get_msg(seconds.seq)).headers == {"Nats-TTL": "90"}
    with pytest.raises(InvalidTTLError, match="'1x' is not a TTL"):
        await js.publish(f"{name}.a", b"x", ttl="1x")
    consumer = await js.create_consumer(name, ConsumerConfig(durable_name="C"))
    batch = await consumer.fetch(3, expires="5s", heartbeat="1s")
    got = await batch.collect()
    assert [m.metadata.sequence.stream for m in got] == [day.seq, week.seq, seconds.seq]
    for msg in got[:2]:
        await msg.ack()
    await got[2].nak("1h")  # not redelivered within the wait below
    loop = asyncio.get_running_loop()
    start = loop.time()
    empty = await (await consumer.fetch(1, expires="1500ms")).collect()
    assert empty == []
    assert loop.time() - start < 5  # the expiry was 1.5 s, not 1500 s
    with pytest.raises(InvalidOptionError, match="expires '5 s' is not a duration"):
        await consumer.fetch(1, expires="5 s")


async def test_schedule_every_string(js: JetStreamContext) -> None:
    name = unique_name("DUR")
    stream = await js.create_stream(
        StreamConfig(name=name, subjects=[f"{name}.>"], storage=MEM, allow_msg_schedules=True)
    )
    ack = await js.publish(
        f"{name}.schedule",
        b"tick",
        schedule=Schedule.every("1h30m"),
        schedule_target=f"{name}.target",
    )
    headers = (await stream.get_msg(ack.seq)).headers
    assert headers is not None
    assert headers["Nats-Schedule"] == "@every 1h30m0s"


async def test_call_timeouts_take_every_duration_form(nats_server: NatsServer) -> None:
    """A call's ``timeout=`` took seconds only: ``"1.5s"`` or a ``timedelta`` was refused
    ("timeout must be a number of seconds"), unlike every other duration of the API."""
    name = unique_name("TMO")
    second = timedelta(seconds=1)
    async with await aiojetstream.connect(
        nats_server.url, timeout="2s", publish_async_timeout=timedelta(seconds=3)
    ) as js:
        assert js.timeout == 2.0
        await js.account_info(timeout="500ms")
        assert await js.api_level(timeout=second) >= 1
        stream = await js.create_stream(
            StreamConfig(name=name, subjects=[f"{name}.>"], storage=MEM), timeout="1.5s"
        )
        ack = await js.publish(f"{name}.a", b"x", timeout="1.5s")
        await (await js.publish_async(f"{name}.b", b"y", timeout=second))
        summary = await js.publish_many(f"{name}.c", [b"1", b"2"], timeout="2s")
        assert summary.stored == 2
        assert (await stream.info(timeout="1s")).state.messages == 4
        assert (await stream.get_msg(ack.seq, timeout=second)).data == b"x"
        consumer = await js.create_consumer(name, ConsumerConfig(durable_name="C"), timeout="1s")
        assert (await consumer.info(timeout="1s")).num_pending == 4
        for msg in await (await consumer.fetch(1, expires="1s")).collect():
            await msg.double_ack(timeout="2s")
        kv = await js.create_key_value(KeyValueConfig(bucket=name, storage=MEM), timeout="2s")
        await kv.put("k", b"v", timeout="1s")
        assert (await kv.get("k", timeout=second)).value == b"v"
        objects = await js.create_object_store(
            ObjectStoreConfig(bucket=name, storage=MEM), timeout="2s"
        )
        await objects.put("o", b"data", timeout="2s")
        assert await objects.get_bytes("o", timeout=second) == b"data"
        # The same rules as a number, before anything is sent.
        for bad, message in (("0s", "must be positive"), ("1x", "'1x' is not a duration")):
            with pytest.raises(InvalidOptionError, match=f"timeout.*{message}"):
                await js.account_info(timeout=bad)
            with pytest.raises(InvalidOptionError, match=f"timeout.*{message}"):
                await js.publish(f"{name}.a", b"x", timeout=bad)
        assert (await stream.info()).state.messages == 4


async def test_a_string_timeout_bounds_the_call() -> None:
    """The string is the wait: ``"300ms"`` fails a call to a hung server within it."""
    async with NatsServer() as server:
        js = await aiojetstream.connect(server.url)
        try:
            await js.account_info()
            server.freeze()
            try:
                loop = asyncio.get_running_loop()
                start = loop.time()
                with pytest.raises(JetStreamTimeoutError):
                    await js.account_info(timeout="300ms")
                assert loop.time() - start < 2.5  # not the context's 5 s
            finally:
                server.thaw()
        finally:
            await js.close()


# --------------------------------------------------------------------------- the CLI


def run(url: str, *args: str, expect: int = 0) -> Result:
    result = CliRunner().invoke(app, list(args), env={"NATS_URL": url, "COLUMNS": "80"})
    assert result.exit_code == expect, (result.stdout, result.stderr, result.exception)
    return result


def usage_error(result: Result) -> str:
    errors = [line for line in result.stderr.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1, result.stderr
    return errors[0]


def test_cli_takes_the_same_strings(nats_url: str) -> None:
    name = unique_name("DUR")
    bucket = unique_name("DUR")
    run(nats_url, "stream", "add", name, "--subjects", f"{name}.>", "--storage", "memory",
        "--max-age", "1h30m", "--allow-msg-ttl")  # fmt: skip
    run(nats_url, "consumer", "add", name, "C", "--ack-wait", "30s",
        "--inactive-threshold", "1d")  # fmt: skip
    run(nats_url, "kv", "add", bucket, "--ttl", "1.5h")
    run(nats_url, "pub", f"{name}.t", "x", "--ttl", "1d")

    async def check() -> None:
        async with await aiojetstream.connect(nats_url) as js:
            stream = await js.stream(name)
            assert (await stream.info()).config.max_age == timedelta(hours=1, minutes=30)
            config = (await (await js.consumer(name, "C")).info()).config
            assert config.ack_wait == timedelta(seconds=30)
            assert config.inactive_threshold == timedelta(days=1)
            assert (await (await js.key_value(bucket)).status()).ttl == timedelta(minutes=90)
            assert (await stream.get_msg(1)).headers == {"Nats-TTL": "86400"}

    asyncio.run(check())


@pytest.mark.parametrize("bad", ["1x", "1h-30m", "1M", "-5s", "9999999999d"])
def test_cli_refuses_a_bad_string_in_the_librarys_words(nats_url: str, bad: str) -> None:
    with pytest.raises(ValidationError) as library:
        ConsumerConfig(ack_wait=bad)
    message = library.value.errors()[0]["msg"].removeprefix("Value error, ")
    result = run(nats_url, "consumer", "add", "ANY", "C", "--ack-wait", bad, expect=2)
    assert usage_error(result) == f"Error: Invalid value for '--ack-wait': {message}"
