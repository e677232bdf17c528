"""``did you mean 'ORDERS'?``: the names the server has that are closest to one it did not find."""

from __future__ import annotations

import asyncio
import difflib
from collections.abc import AsyncIterator

from aiojetstream import (
    BucketNotFoundError,
    ConsumerNotFoundError,
    JetStreamContext,
    StreamNotFoundError,
)

__all__ = ["Hint", "add_hint", "did_you_mean"]

#: The most names a hint offers.
MAX_SUGGESTIONS = 3
#: How alike a name must be (difflib's ratio, case ignored).
CUTOFF = 0.6
#: The most names read from the server for a hint (paged lists: a few requests).
MAX_NAMES = 10_000
#: The longest a hint may take, at most (the command's own timeout if shorter).
HINT_TIMEOUT = 3.0
#: The prefixes of the streams behind key-value buckets and object stores.
_BACKING = ("KV_", "OBJ_")


class Hint(str):
    """A note the command line adds to an error: printed in its error line."""

    __slots__ = ()


def did_you_mean(missing: str, names: list[str]) -> str | None:
    """``did you mean 'A'?`` / ``... 'A' or 'B'?`` for the names like ``missing``; None if none.

    Case is ignored in the comparison (``orders`` finds ``ORDERS``).
    """
    lowered: dict[str, str] = {}
    for name in names:
        if name != missing:
            lowered.setdefault(name.lower(), name)
    close = difflib.get_close_matches(missing.lower(), list(lowered), MAX_SUGGESTIONS, CUTOFF)
    if not close:
        return None
    shown = [repr(lowered[c]) for c in close]
    choice = shown[0] if len(shown) == 1 else f"{', '.join(shown[:-1])} or {shown[-1]}"
    return f"did you mean {choice}?"


async def _names(source: AsyncIterator[str]) -> list[str]:
    found: list[str] = []
    async for name in source:
        found.append(name)
        if len(found) >= MAX_NAMES:
            break
    return found


async def _hint(js: JetStreamContext, exc: BaseException, object_store: bool) -> str | None:
    if isinstance(exc, StreamNotFoundError) and exc.stream is not None:
        names = await _names(js.stream_names())
        if not exc.stream.startswith(_BACKING):  # a bucket's stream only when asked for one
            names = [n for n in names if not n.startswith(_BACKING)]
        return did_you_mean(exc.stream, names)
    if (
        isinstance(exc, ConsumerNotFoundError)
        and exc.stream is not None
        and exc.consumer is not None
    ):
        return did_you_mean(exc.consumer, await _names(js.consumer_names(exc.stream)))
    if isinstance(exc, BucketNotFoundError) and exc.bucket is not None:
        buckets = js.object_store_names() if object_store else js.key_value_store_names()
        return did_you_mean(exc.bucket, await _names(buckets))
    return None


async def add_hint(
    js: JetStreamContext, exc: BaseException, *, object_store: bool, timeout: float
) -> None:
    """Add a :class:`Hint` note to a not-found error: the closest names the server has.

    Streams for a missing stream, the stream's consumers for a missing
    consumer, the buckets (``object_store``: the object stores) for a missing
    bucket. Nothing when none is close, or when the names can not be read
    within ``timeout`` (at most :data:`HINT_TIMEOUT`): the error stands as it is.
    """
    try:
        async with asyncio.timeout(min(timeout, HINT_TIMEOUT)):
            hint = await _hint(js, exc, object_store)
    except Exception:  # no permission to list, a timeout: no hint
        return
    if hint is not None:
        exc.add_note(Hint(hint))
