"""A bad ``timeout`` is refused before anything is sent, on every path that sends.

Publishes, key-value and object-store calls passed it on unchecked: ``-1`` (or
0) sent the write and then reported that it failed, NaN never timed out, and a
string escaped as a ``TypeError`` once something had been sent.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from aiojetstream import (
    InvalidOptionError,
    JetStreamContext,
    KeyValueConfig,
    ObjectStoreConfig,
    StorageType,
    StreamConfig,
)
from helpers import unique_name

BAD = ["5", -1, 0, float("nan"), float("inf"), True]


async def _drain(it: AsyncIterator[Any]) -> None:
    async for _ in it:
        pass


@pytest.mark.parametrize("bad", BAD, ids=repr)
async def test_bad_timeouts_are_refused_before_sending(js: JetStreamContext, bad: Any) -> None:
    name = unique_name("TO")
    stream = await js.create_stream(
        StreamConfig(name=name, subjects=[f"{name}.>"], storage=StorageType.MEMORY)
    )
    await js.publish(f"{name}.x", b"1")
    kv = await js.create_key_value(KeyValueConfig(bucket=unique_name("tokv")))
    await kv.put("k", b"1")
    obj = await js.create_object_store(ObjectStoreConfig(bucket=unique_name("toob")))
    await obj.put("o", b"1")
    calls: dict[str, Callable[[], Awaitable[object]]] = {
        "publish": lambda: js.publish(f"{name}.x", b"2", timeout=bad),
        "publish_async": lambda: js.publish_async(f"{name}.x", b"2", timeout=bad),
        "get_msg": lambda: stream.get_msg(1, timeout=bad),
        "get_last_msg_for_subject": lambda: stream.get_last_msg_for_subject(
            f"{name}.x", timeout=bad
        ),
        "kv.get": lambda: kv.get("k", timeout=bad),
        "kv.put": lambda: kv.put("k", b"2", timeout=bad),
        "kv.create": lambda: kv.create("new", b"2", timeout=bad),
        "kv.update": lambda: kv.update("k", b"2", 1, timeout=bad),
        "kv.delete": lambda: kv.delete("k", timeout=bad),
        "kv.purge": lambda: kv.purge("k", timeout=bad),
        "kv.keys": lambda: _drain(kv.keys(timeout=bad)),
        "kv.history": lambda: kv.history("k", timeout=bad),
        "kv.purge_deletes": lambda: kv.purge_deletes(timeout=bad),
        "kv.status": lambda: kv.status(timeout=bad),
        "obj.put": lambda: obj.put("p", b"2", timeout=bad),
        "obj.get_bytes": lambda: obj.get_bytes("o", timeout=bad),
        "obj.info": lambda: obj.info("o", timeout=bad),
        "obj.delete": lambda: obj.delete("o", timeout=bad),
        "obj.list": lambda: _drain(obj.list(timeout=bad)),
        "obj.status": lambda: obj.status(timeout=bad),
    }
    stats = js.nc.stats
    sent_anyway: list[str] = []
    untyped: list[str] = []
    for label, call in calls.items():
        before = stats["out_msgs"]
        try:
            await call()
        except InvalidOptionError:
            pass
        except Exception as exc:  # collected, reported below
            untyped.append(f"{label}: {type(exc).__name__}: {exc}")
            continue
        else:
            untyped.append(f"{label}: accepted")
        if stats["out_msgs"] != before:
            sent_anyway.append(label)
    assert untyped == []
    assert sent_anyway == []
