"""Counters (ADR-49) against a real server: add, get, get_many and every error code."""

from __future__ import annotations

import pytest

import aiojetstream
from aiojetstream import (
    CounterIncrementError,
    CounterNotFoundError,
    CountersDisabledError,
    FeatureNotSupportedError,
    InvalidOptionError,
    JetStreamContext,
    MessageNotFoundError,
    MessageTTLDisabledError,
    StreamConfig,
    StreamConfigError,
    StreamNotMatchError,
    StreamSource,
)
from aiojetstream.testing import NatsServer
from helpers import unique_name, wait_until


async def counter_stream(js: JetStreamContext, *, direct: bool = True) -> str:
    name = unique_name("CNT")
    await js.create_stream(
        StreamConfig(name=name, subjects=[f"{name}.>"], allow_msg_counter=True, allow_direct=direct)
    )
    return name


async def test_add_and_get(js: JetStreamContext) -> None:
    name = await counter_stream(js)
    counter = js.counter(name)
    assert counter.stream_name == name
    assert await counter.add(f"{name}.hits", 1) == 1
    assert await counter.add(f"{name}.hits", 5) == 6
    assert await counter.add(f"{name}.hits", -10) == -4
    assert await counter.add(f"{name}.hits", 0) == -4
    assert await counter.get(f"{name}.hits") == -4


async def test_arbitrary_size(js: JetStreamContext) -> None:
    name = await counter_stream(js)
    counter = js.counter(name)
    big = 123456789012345678901234567890
    assert await counter.add(f"{name}.big", big) == big
    assert await counter.add(f"{name}.big", big) == 2 * big
    assert await counter.get(f"{name}.big") == 2 * big


async def test_get_missing_counter(js: JetStreamContext) -> None:
    name = await counter_stream(js)
    with pytest.raises(CounterNotFoundError) as info:
        await js.counter(name).get(f"{name}.none")
    assert isinstance(info.value, MessageNotFoundError)


async def test_get_without_direct_uses_the_api(js: JetStreamContext) -> None:
    name = await counter_stream(js, direct=False)
    counter = js.counter(name)
    await counter.add(f"{name}.a", 3)
    assert await counter.get(f"{name}.a") == 3
    with pytest.raises(CounterNotFoundError):
        await counter.get(f"{name}.b")


async def test_get_many(js: JetStreamContext) -> None:
    name = await counter_stream(js)
    counter = js.counter(name)
    await counter.add(f"{name}.a", 1)
    await counter.add(f"{name}.b", 2)
    await counter.add(f"{name}.a", 10)
    await counter.add(f"{name}.c.x", 7)
    got = [item async for item in counter.get_many(f"{name}.*")]
    assert got == [(f"{name}.b", 2), (f"{name}.a", 11)]  # stream order
    got = [item async for item in counter.get_many([f"{name}.a", f"{name}.c.>"])]
    assert dict(got) == {f"{name}.a": 11, f"{name}.c.x": 7}
    assert [item async for item in counter.get_many(f"{name}.none.*")] == []


@pytest.mark.parametrize("direct", [True, False])
async def test_reading_a_stream_that_is_no_counter(js: JetStreamContext, direct: bool) -> None:
    """A plain stream's last message {"val":"5"} read as the total 5 (the stream's
    config is never looked up): a counter's messages carry Nats-Incr, others do not."""
    plain = unique_name("PLAIN")
    await js.create_stream(StreamConfig(name=plain, subjects=[f"{plain}.>"], allow_direct=direct))
    await js.publish(f"{plain}.a", b'{"val":"5"}')
    counter = js.counter(plain)
    with pytest.raises(CountersDisabledError, match="not a counter stream") as info:
        await counter.get(f"{plain}.a")
    assert info.value.err_code == 10168
    if direct:
        with pytest.raises(CountersDisabledError, match="not a counter stream"):
            _ = [item async for item in counter.get_many(f"{plain}.*")]


async def test_a_sourced_counter_stream_reads_as_a_counter(js: JetStreamContext) -> None:
    """Its messages carry the Nats-Incr the server computed from the source's totals."""
    origin = await counter_stream(js)
    aggregate = unique_name("AGG")
    await js.create_stream(
        StreamConfig(
            name=aggregate,
            sources=[StreamSource(name=origin)],
            allow_msg_counter=True,
            allow_direct=True,
        )
    )
    await js.counter(origin).add(f"{origin}.a", 4)
    await js.counter(origin).add(f"{origin}.a", 3)
    counter = js.counter(aggregate)

    async def sourced() -> bool:
        return (await (await js.stream(aggregate)).info()).state.messages == 2

    await wait_until(sourced, timeout=10)
    assert await counter.get(f"{origin}.a") == 7
    assert [item async for item in counter.get_many(f"{origin}.*")] == [(f"{origin}.a", 7)]


async def test_invalid_increment_is_refused_before_sending(js: JetStreamContext) -> None:
    name = await counter_stream(js)
    with pytest.raises(InvalidOptionError):
        await js.counter(name).add(f"{name}.a", 1.5)  # type: ignore[arg-type]
    with pytest.raises(InvalidOptionError):
        await js.counter(name).add(f"{name}.*", 1)


async def test_server_error_codes(js: JetStreamContext) -> None:
    name = await counter_stream(js)
    subject = f"{name}.a"
    plain = unique_name("PLAIN")
    await js.create_stream(StreamConfig(name=plain, subjects=[f"{plain}.>"]))
    with pytest.raises(CountersDisabledError) as disabled:
        await js.counter(plain).add(f"{plain}.a", 1)
    assert disabled.value.err_code == 10168
    # What only a hand-made publish can do: the server's own checks.
    cases = [
        ({"X": "1"}, b"", 10169),  # no Nats-Incr
        ({"Nats-Incr": "+1"}, b"x", 10170),  # a payload
        ({"Nats-Incr": "1.5"}, b"", 10171),  # not an integer
        ({"Nats-Incr": "+1", "Nats-Expected-Stream": name}, b"", 10171),
        ({"Nats-Incr": "+1", "Nats-Rollup": "sub"}, b"", 10171),
    ]
    for headers, payload, code in cases:
        with pytest.raises(CounterIncrementError) as info:
            await js.publish(subject, payload, headers=headers)
        assert info.value.err_code == code, headers
    with pytest.raises(MessageTTLDisabledError):
        await js.publish(subject, b"", headers={"Nats-Incr": "+1"}, ttl=5)


async def test_stream_config_rules(js: JetStreamContext) -> None:
    name = await counter_stream(js)
    info = await (await js.stream(name)).info()
    assert info.config.allow_msg_counter is True
    # Set at create only.
    with pytest.raises(StreamConfigError) as update:
        await js.update_stream(info.config.model_copy(update={"allow_msg_counter": False}))
    assert update.value.err_code == 10052
    with pytest.raises(StreamConfigError) as ttl:
        await js.create_stream(
            StreamConfig(
                name=unique_name("CT"),
                subjects=["ct.>"],
                allow_msg_counter=True,
                allow_msg_ttl=True,
            )
        )
    assert ttl.value.err_code == 10052
    with pytest.raises(StreamConfigError) as mirror:
        await js.create_stream(
            StreamConfig(
                name=unique_name("CM"), mirror=StreamSource(name=name), allow_msg_counter=True
            )
        )
    assert mirror.value.err_code == 10173


async def test_old_server_is_refused(js: JetStreamContext) -> None:
    name = await counter_stream(js)
    js._api.level = 1  # what a 2.11 server reports
    try:
        with pytest.raises(FeatureNotSupportedError) as info:
            await js.counter(name).add(f"{name}.a", 1)
        assert info.value.server_version == "2.12"
        with pytest.raises(FeatureNotSupportedError):
            await js.create_stream(
                StreamConfig(name=unique_name("OLD"), subjects=["old.>"], allow_msg_counter=True)
            )
    finally:
        js._api.level = None


async def test_an_increment_another_stream_stored_is_an_error(js: JetStreamContext) -> None:
    """Another counter stream captures the subject: the server stores the increment
    there (it refuses Nats-Expected-Stream with Nats-Incr), and add says so."""
    name = await counter_stream(js)
    other = await counter_stream(js)
    counter = js.counter(name)
    with pytest.raises(StreamNotMatchError, match=other) as info:
        await counter.add(f"{other}.a", 5)
    assert "total there now '5'" in str(info.value)
    assert await js.counter(other).get(f"{other}.a") == 5
    with pytest.raises(CounterNotFoundError):
        await counter.get(f"{other}.a")
    # A Counter on a stream that does not exist: the same.
    with pytest.raises(StreamNotMatchError, match=name):
        await js.counter(unique_name("GONE")).add(f"{name}.a", 1)


async def test_sourced_counter_stream_gets_no_increments(js: JetStreamContext) -> None:
    """A stream fed by sources captures no publish: its increment lands in the source."""
    origin = await counter_stream(js)
    aggregate = unique_name("AGG")
    await js.create_stream(
        StreamConfig(name=aggregate, sources=[StreamSource(name=origin)], allow_msg_counter=True)
    )
    with pytest.raises(StreamNotMatchError, match=origin):
        await js.counter(aggregate).add(f"{origin}.a", 1)


async def test_a_mapped_subject_reaches_the_counter_stream() -> None:
    """A subject the server maps into the counter stream's subjects is counted there
    (a check against the stream's configured subjects refused it)."""
    async with NatsServer(config={"mappings": {"hits.*": "cnt.$1"}}) as server:
        js = await aiojetstream.connect(server.url)
        try:
            await js.create_stream(
                StreamConfig(
                    name="CNT", subjects=["cnt.>"], allow_msg_counter=True, allow_direct=True
                )
            )
            counter = js.counter("CNT")
            assert await counter.add("hits.home", 2) == 2
            assert await counter.add("hits.home", 3) == 5
            assert await counter.get("cnt.home") == 5
        finally:
            await js.close()


async def test_get_many_continues_a_reply_cut_short() -> None:
    """A multi-last reply cut short (at the library's 256 KiB page, or the server's
    ``max_pending`` bytes): get_many ended there, silently leaving out the counters
    after the cut. (Without a page bound the server sent a whole ``max_pending`` at
    once, and now and then cut the client off as a slow consumer.)"""
    async with NatsServer(config={"max_pending": 1 << 20, "max_payload": 1 << 20}) as server:
        js = await aiojetstream.connect(server.url)
        try:
            name = await counter_stream(js)
            counter = js.counter(name)
            big = 10**600  # about 1.2 KB a message with its source header
            for i in range(1_000):
                await js.publish_async(f"{name}.{i}", b"", headers={"Nats-Incr": f"+{big + i}"})
            await js.publish_async_complete(timeout=60)
            # One more increment after the first page: as of the first page's sequence.
            got: dict[str, int] = {}
            async for subject, total in counter.get_many(f"{name}.*"):
                if not got:
                    await counter.add(f"{name}.999", 1)
                got[subject] = total
            assert len(got) == 1_000
            assert got == {f"{name}.{i}": big + i for i in range(1_000)}
            assert await counter.get(f"{name}.999") == big + 1_000
        finally:
            await js.close()
