"""Counters (ADR-49) against a real server: add, get, get_many and every error code."""

from __future__ import annotations

import pytest

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
    StreamNotFoundError,
    StreamNotMatchError,
    StreamSource,
)
from aiojetstream._counter import captured_by
from helpers import unique_name


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


def test_captured_by_matches_like_the_server() -> None:
    subjects = ["a.>", "b.*", "c", "d.*.e"]
    for subject in ("a.x", "a.x.y", "b.x", "c", "d.x.e"):
        assert captured_by(subjects, subject), subject
    for subject in ("a", "b", "b.x.y", "c.x", "d.x", "d.x.e.f", "x"):
        assert not captured_by(subjects, subject), subject
    assert captured_by([">"], "any.thing")
    assert captured_by(["*"], "one")
    assert not captured_by(["*"], "one.two")
    assert not captured_by([], "a")


async def test_subject_of_another_stream_is_refused_before_sending(js: JetStreamContext) -> None:
    """Another counter stream captures the subject: nothing is sent, neither total moves."""
    name = await counter_stream(js)
    other = await counter_stream(js)
    counter = js.counter(name)
    assert await counter.add(f"{name}.a", 1) == 1  # the subjects are read and kept
    with pytest.raises(InvalidOptionError, match=other) as info:
        await counter.add(f"{other}.a", 5)
    assert not isinstance(info.value, StreamNotMatchError)
    with pytest.raises(CounterNotFoundError):
        await js.counter(other).get(f"{other}.a")
    # Before the subjects were read (a fresh Counter) too.
    with pytest.raises(InvalidOptionError):
        await js.counter(name).add(f"{other}.b", 1)
    with pytest.raises(CounterNotFoundError):
        await js.counter(other).get(f"{other}.b")
    assert (await (await js.stream(other)).info()).state.messages == 0
    assert await counter.get(f"{name}.a") == 1


async def test_subjects_are_read_again_before_refusing(js: JetStreamContext) -> None:
    """The stream gained a subject after the Counter read its subjects."""
    name = await counter_stream(js)
    counter = js.counter(name)
    await counter.add(f"{name}.a", 1)
    stream = await js.stream(name)
    extra = f"{name.lower()}_extra"
    await js.update_stream(
        stream.cached_info.config.model_copy(update={"subjects": [f"{name}.>", extra]})
    )
    assert await counter.add(extra, 2) == 2
    assert await counter.get(extra) == 2


async def test_counter_stream_missing_is_refused_before_sending(js: JetStreamContext) -> None:
    name = await counter_stream(js)
    with pytest.raises(StreamNotFoundError):
        await js.counter(unique_name("GONE")).add(f"{name}.a", 1)
    with pytest.raises(CounterNotFoundError):
        await js.counter(name).get(f"{name}.a")


async def test_sourced_counter_stream_without_subjects_refuses_increments(
    js: JetStreamContext,
) -> None:
    """A stream fed by sources captures no publish: its increments would land in the source."""
    origin = await counter_stream(js)
    aggregate = unique_name("AGG")
    await js.create_stream(
        StreamConfig(name=aggregate, sources=[StreamSource(name=origin)], allow_msg_counter=True)
    )
    with pytest.raises(InvalidOptionError, match="no subjects"):
        await js.counter(aggregate).add(f"{origin}.a", 1)
    with pytest.raises(CounterNotFoundError):
        await js.counter(origin).get(f"{origin}.a")


async def test_ack_from_another_stream_is_an_error(js: JetStreamContext) -> None:
    """The backstop: the subject check passed, yet another stream stored the increment.

    The Counter's kept subjects are stale: its stream gave up the subject,
    which another counter stream now captures.
    """
    name = await counter_stream(js)
    other = unique_name("CNT")
    counter = js.counter(name)
    await counter.add(f"{name}.a", 1)
    stream = await js.stream(name)
    await js.update_stream(stream.cached_info.config.model_copy(update={"subjects": [f"{name}.b"]}))
    await js.create_stream(
        StreamConfig(name=other, subjects=[f"{name}.a"], allow_msg_counter=True, allow_direct=True)
    )
    with pytest.raises(StreamNotMatchError, match=other) as info:
        await counter.add(f"{name}.a", 5)
    assert "total there now '5'" in str(info.value)
    assert await js.counter(other).get(f"{name}.a") == 5
