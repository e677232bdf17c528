"""Errors that name what is wrong and how to fix it (issue 26), against a real nats-server."""

from __future__ import annotations

import logging
import socket
import subprocess
import sys
import textwrap
from datetime import timedelta

import pytest

import aiojetstream
from aiojetstream import (
    ConnectionClosedError,
    ConnectionFailedError,
    ConsumerConfig,
    ConsumerNotFoundError,
    InvalidTTLError,
    JetStreamContext,
    KeyValueConfig,
    MessageTTLDisabledError,
    StreamConfig,
    StreamNotFoundError,
)
from aiojetstream import _kv as KV
from helpers import unique_name


async def test_missing_stream_and_consumer_are_named(js: JetStreamContext) -> None:
    name = unique_name("ORD")
    with pytest.raises(StreamNotFoundError) as missing:
        await js.stream(name)
    assert str(missing.value) == f"stream {name!r} not found (code=404, err_code=10059)"
    assert (missing.value.code, missing.value.err_code) == (404, 10059)
    assert missing.value.description == "stream not found"
    assert missing.value.stream == name
    # A consumer of a stream that does not exist: the stream is what is missing.
    with pytest.raises(StreamNotFoundError, match=rf"^stream {name!r} not found"):
        await js.consumer(name, "c")
    await js.create_stream(StreamConfig(name=name, subjects=[f"{name}.>"]))
    with pytest.raises(ConsumerNotFoundError) as gone:
        await js.consumer(name, "NEW")
    assert str(gone.value) == (
        f"consumer 'NEW' not found on stream {name!r} (code=404, err_code=10014)"
    )
    assert (gone.value.stream, gone.value.consumer) == (name, "NEW")
    with pytest.raises(ConsumerNotFoundError, match=r"^consumer 'NEW' not found on stream"):
        await js.delete_consumer(name, "NEW")
    # Pulling through a handle whose consumer was deleted names it too.
    consumer = await js.create_consumer(name, ConsumerConfig(durable_name="gone"))
    await js.delete_consumer(name, "gone")
    with pytest.raises(ConsumerNotFoundError, match=r"^consumer 'gone' not found on stream"):
        await consumer.info()


async def test_ttl_on_a_stream_without_allow_msg_ttl_says_how_to_allow_it(
    js: JetStreamContext,
) -> None:
    name = unique_name("TTL")
    await js.create_stream(StreamConfig(name=name, subjects=[f"{name}.>"]))
    expected = (
        f"a message TTL needs allow_msg_ttl, and stream {name!r} has it off: set "
        "allow_msg_ttl=True (update_stream can enable it, never disable it; CLI: "
        f"aiojetstream stream edit {name} --allow-msg-ttl) (code=400, err_code=10166)"
    )
    with pytest.raises(MessageTTLDisabledError) as refused:
        await js.publish(f"{name}.x", b"x", ttl="1h")
    assert str(refused.value) == expected
    assert refused.value.description == "per-message TTL is disabled"
    with pytest.raises(MessageTTLDisabledError) as async_refused:
        await (await js.publish_async(f"{name}.x", b"x", ttl=60))
    assert str(async_refused.value) == expected
    # What the message says to do works.
    info = await (await js.stream(name)).info()
    await js.update_stream(info.config.model_copy(update={"allow_msg_ttl": True}))
    assert (await js.publish(f"{name}.x", b"x", ttl="1h")).seq == 1


async def test_kv_ttl_under_the_marker_ttl_is_stretched_warned_once_or_refused(
    js: JetStreamContext, caplog: pytest.LogCaptureFixture
) -> None:
    """nats-server 2.15.1 raises a TTL under limit_marker_ttl to it when history > 1."""
    bucket = unique_name("KVT")
    kv = await js.create_key_value(
        KeyValueConfig(bucket=bucket, history=5, limit_marker_ttl=timedelta(minutes=1))
    )
    with caplog.at_level(logging.WARNING, logger="aiojetstream"):
        await kv.create("lock.job7", b"w3", ttl="30s")
        await kv.create("lock.job8", b"w4", ttl=10)  # the same key pattern: said once
        await kv.purge("other", ttl=5)
    # The server did stretch them.
    stored = await kv.stream.get_last_msg_for_subject(f"$KV.{bucket}.lock.job7")
    assert (stored.headers or {}).get("Nats-TTL") == "60"
    marker = await kv.stream.get_last_msg_for_subject(f"$KV.{bucket}.other")
    assert (marker.headers or {}).get("Nats-TTL") == "60"
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [
        f"the TTL of 30 s on key 'lock.job7' becomes 60 s: bucket {bucket!r} has "
        "history=5 and limit_marker_ttl=60 s, and with history above 1 the server raises "
        "a shorter TTL to limit_marker_ttl; use a TTL of at least 60 s (or history=1) "
        "(logged once for keys 'lock.*' of this bucket)",
        f"the TTL of 5 s on the purge marker of key 'other' becomes 60 s: bucket {bucket!r} "
        "has history=5 and limit_marker_ttl=60 s, and with history above 1 the server "
        "raises a shorter TTL to limit_marker_ttl; use a TTL of at least 60 s (or history=1) "
        "(logged once for keys '*' of this bucket)",
    ]
    # pedantic=True refuses it before anything is sent.
    last = (await kv.stream.info()).state.last_seq
    with pytest.raises(InvalidTTLError, match=r"becomes 60 s: .* \(refused: pedantic=True\)$"):
        await kv.create("lock.job9", b"w5", ttl=30, pedantic=True)
    with pytest.raises(InvalidTTLError, match=r"purge marker of key 'lock\.job7' becomes 60 s"):
        await kv.purge("lock.job7", ttl=30, pedantic=True)
    assert (await kv.stream.info()).state.last_seq == last
    # A TTL of at least limit_marker_ttl, or "never", is kept: no warning, pedantic or not.
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="aiojetstream"):
        await kv.create("lock.job9", b"w5", ttl="1m", pedantic=True)
        await kv.create("forever", b"x", ttl="never", pedantic=True)
    assert caplog.records == []


async def test_kv_ttl_with_history_1_is_kept(
    js: JetStreamContext, caplog: pytest.LogCaptureFixture
) -> None:
    bucket = unique_name("KVT")
    kv = await js.create_key_value(KeyValueConfig(bucket=bucket, limit_marker_ttl=60))
    with caplog.at_level(logging.WARNING, logger="aiojetstream"):
        await kv.create("k", b"v", ttl=5, pedantic=True)
    assert caplog.records == []
    stored = await kv.stream.get_last_msg_for_subject(f"$KV.{bucket}.k")
    assert (stored.headers or {}).get("Nats-TTL") == "5"


def test_key_patterns() -> None:
    assert KV.key_pattern("lock.job7") == "lock.*"
    assert KV.key_pattern("a.b.c") == "a.b.*"
    assert KV.key_pattern("session") == "*"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port  # nobody listens there


async def test_connecting_to_nothing_is_one_named_error() -> None:
    url = f"nats://127.0.0.1:{_free_port()}"
    with pytest.raises(ConnectionFailedError) as failed:
        await aiojetstream.connect(url)
    assert isinstance(failed.value, ConnectionClosedError)  # old excepts still catch it
    assert str(failed.value).startswith(f"could not connect to {url} (tried twice): ")
    assert "Connect call failed" in str(failed.value)
    assert failed.value.servers == (url,)


@pytest.mark.parametrize("second_info", ["u:p@", "t0ken@"])
@pytest.mark.parametrize("scheme", ["nats://", "tls://"])
async def test_a_string_of_urls_with_credentials_fails_cleanly(
    scheme: str, second_info: str
) -> None:
    """Credentials on a later URL of one string: the message is the documented one.

    Was: ``could not connect to ***//***@...`` (the scheme taken for a piece of
    the password and blanked), a port of the first URL shown as ``***``, and
    ``servers == ()``.
    """
    first, second = _free_port(), _free_port()
    for first_info in ("", "u:p@"):
        url = f"{scheme}{first_info}127.0.0.1:{first},{scheme}{second_info}127.0.0.1:{second}"
        with pytest.raises(ConnectionFailedError) as failed:
            await aiojetstream.connect(url)
        shown = f"{scheme}***@127.0.0.1:{second}"
        assert str(failed.value).startswith(f"could not connect to {shown} (each tried twice): ")
        for port in (first, second):
            assert f"Connect call failed ('127.0.0.1', {port})" in str(failed.value)
        assert failed.value.servers == (shown,)
        assert "t0ken" not in str(failed.value)


def test_connecting_to_nothing_prints_nothing() -> None:
    """Nothing on stderr before the error (was: a `nats connection error` line per attempt)."""
    first, second = _free_port(), _free_port()
    program = textwrap.dedent(
        f"""
        import asyncio, aiojetstream

        async def main():
            try:
                await aiojetstream.connect(
                    "nats://alice:s3cret@127.0.0.1:{first},nats://127.0.0.1:{second}"
                )
            except aiojetstream.ConnectionFailedError as exc:
                print(exc)

        asyncio.run(main())
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stderr == ""
    shown = f"nats://***@127.0.0.1:{first},nats://127.0.0.1:{second}"
    assert done.stdout.startswith(f"could not connect to {shown} (each tried twice): ")
    for port in (first, second):
        assert f"Connect call failed ('127.0.0.1', {port})" in done.stdout
    assert "s3cret" not in done.stdout
