"""JetStream API subjects and the single request path every API call takes."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any, Final, TypeVar

from pydantic import BaseModel, ValidationError

from ._bounds import MAX_UINT64, shown
from ._conn import Conn
from ._errors import (
    InvalidResponseError,
    JetStreamNotEnabledError,
    JetStreamTimeoutError,
    NoRespondersError,
    api_error,
)
from ._models import from_wire
from ._validation import check_timeout, validate_filter_subject, validate_name

logger = logging.getLogger("aiojetstream")

M = TypeVar("M", bound=BaseModel)

# Subject templates, relative to the API prefix ("$JS.API" or "$JS.<domain>.API").
ACCOUNT_INFO: Final = "INFO"
STREAM_CREATE: Final = "STREAM.CREATE.{stream}"
STREAM_UPDATE: Final = "STREAM.UPDATE.{stream}"
STREAM_INFO: Final = "STREAM.INFO.{stream}"
STREAM_DELETE: Final = "STREAM.DELETE.{stream}"
STREAM_PURGE: Final = "STREAM.PURGE.{stream}"
STREAM_LIST: Final = "STREAM.LIST"
STREAM_NAMES: Final = "STREAM.NAMES"
STREAM_MSG_GET: Final = "STREAM.MSG.GET.{stream}"
STREAM_MSG_DELETE: Final = "STREAM.MSG.DELETE.{stream}"
DIRECT_GET: Final = "DIRECT.GET.{stream}"
CONSUMER_CREATE: Final = "CONSUMER.CREATE.{stream}.{consumer}"
CONSUMER_CREATE_FILTERED: Final = "CONSUMER.CREATE.{stream}.{consumer}.{filter}"
#: The longest API subject that carries a caller's subject in it (a direct get's
#: last-by-subject, a consumer create's filter): longer ones send it in the body only,
#: as a protocol line past the server's ``max_control_line`` (4 KiB by default) costs
#: the connection.
MAX_SUBJECT_WITH_SUBJECT: Final = 1024
CONSUMER_CREATE_EPHEMERAL: Final = "CONSUMER.CREATE.{stream}"
CONSUMER_INFO: Final = "CONSUMER.INFO.{stream}.{consumer}"
CONSUMER_DELETE: Final = "CONSUMER.DELETE.{stream}.{consumer}"
CONSUMER_LIST: Final = "CONSUMER.LIST.{stream}"
CONSUMER_NAMES: Final = "CONSUMER.NAMES.{stream}"
CONSUMER_MSG_NEXT: Final = "CONSUMER.MSG.NEXT.{stream}.{consumer}"
CONSUMER_PAUSE: Final = "CONSUMER.PAUSE.{stream}.{consumer}"
CONSUMER_RESET: Final = "CONSUMER.RESET.{stream}.{consumer}"
CONSUMER_UNPIN: Final = "CONSUMER.UNPIN.{stream}.{consumer}"

DEFAULT_API_PREFIX: Final = "$JS.API"


def api_prefix(domain: str | None, prefix: str = DEFAULT_API_PREFIX) -> str:
    """The API prefix for a JetStream domain (``$JS.<domain>.API``) or the given prefix."""
    if domain:
        return f"$JS.{domain}.API"
    return prefix.rstrip(".")


def dumps(body: dict[str, Any] | None) -> bytes:
    """Encode a request body (None sends an empty payload)."""
    if body is None:
        return b""
    return json.dumps(body, separators=(",", ":")).encode()


def check_reply(
    data: bytes, *, stream: str | None = None, consumer: str | None = None
) -> dict[str, Any]:
    """Decode an API reply and raise the typed error it carries, if any.

    ``stream`` and ``consumer`` are the names the request gave: the error
    names them (a publish acknowledgement's error names its stream itself).
    """
    try:
        reply = json.loads(data)
    except (ValueError, RecursionError) as exc:  # (nesting past the parser's depth)
        raise InvalidResponseError(f"invalid JSON from the JetStream API: {data[:200]!r}") from exc
    if not isinstance(reply, dict):
        raise InvalidResponseError(f"unexpected JetStream API reply: {data[:200]!r}")
    error = reply.get("error")
    if error is not None:
        if not isinstance(error, dict):
            raise InvalidResponseError(f"unexpected error in a JetStream reply: {data[:200]!r}")
        try:
            code, err_code = int(error.get("code", 0)), int(error.get("err_code", 0))
        except (TypeError, ValueError, OverflowError):  # (JSON takes Infinity)
            raise InvalidResponseError(
                f"unexpected error in a JetStream reply: {data[:200]!r}"
            ) from None
        named = reply.get("stream")
        raise api_error(
            code,
            err_code,
            str(error.get("description", "")),
            stream=stream if stream is not None or not isinstance(named, str) else named,
            consumer=consumer,
        )
    return reply


#: What is left of one call's ``timeout`` (seconds), for each of its requests.
Left = Callable[[], float]


class ApiClient:
    """Sends JetStream API requests: subject building, timeouts, error mapping."""

    __slots__ = ("conn", "level", "level_unknown", "prefix", "timeout")

    def __init__(self, conn: Conn, prefix: str, timeout: float) -> None:
        self.conn = conn
        self.prefix = prefix
        self.timeout = timeout
        #: The server's JetStream API level, once known (account info).
        self.level: int | None = None
        #: Account info went unanswered for a data-plane call (see ``_features.require``).
        self.level_unknown = False

    async def api_level(self, timeout: float | None = None) -> int:
        """The server's JetStream API level (from account info, fetched once and cached)."""
        if self.level is None:
            reply = await self.call(ACCOUNT_INFO, timeout=timeout)
            api = reply.get("api")
            level = api.get("level", 0) if isinstance(api, dict) else 0
            self.level = reply_int(level, "JetStream API level", 2**31 - 1)
        return self.level

    def budget(self, timeout: float | None) -> Left:
        """One call's ``timeout`` (the API's default when None), shared by its requests.

        Each request gets what is left; none is sent once it ran out
        (``JetStreamTimeoutError``). So ``reset(timeout=1)`` ends within about
        1 s, although it asks the server several things.
        """
        checked = check_timeout(timeout)
        total = self.timeout if checked is None else checked
        loop = asyncio.get_running_loop()
        end = loop.time() + total

        def left() -> float:
            remaining = end - loop.time()
            if remaining <= 0:
                raise JetStreamTimeoutError(f"the call's timeout of {total:g} s ran out")
            return remaining

        return left

    def subject(self, template: str, **parts: str) -> str:
        """The full API subject for a template.

        Every part is checked again here, the one place caller text becomes
        an API subject: ``stream`` and ``consumer`` must be names (a ``.``,
        wildcard or whitespace would address another API), ``filter`` a
        subject filter.

        Raises:
            InvalidNameError: a stream or consumer name is invalid.
            InvalidSubjectError: the filter is invalid.

        """
        checked = {
            key: validate_filter_subject(value) if key == "filter" else validate_name(value, key)
            for key, value in parts.items()
        }
        return f"{self.prefix}.{template.format(**checked)}"

    async def request(
        self,
        subject: str,
        body: dict[str, Any] | None = None,
        *,
        timeout: float | None = None,
        stream: str | None = None,
        consumer: str | None = None,
    ) -> dict[str, Any]:
        """Send ``body`` to the full API ``subject`` and return the decoded reply.

        ``stream`` and ``consumer``: the names in ``subject``, for the error
        of a failed request (``stream 'ORDERS' not found``).

        Raises:
            InvalidOptionError: ``timeout`` is not a positive, finite number of
                seconds (nothing is sent; checked by the connection's request).

        """
        try:
            data, _ = await self.conn.request(
                subject, dumps(body), self.timeout if timeout is None else timeout
            )
        except NoRespondersError as exc:
            raise JetStreamNotEnabledError(
                503, 10076, f"JetStream not enabled (no responders on {subject})"
            ) from exc
        return check_reply(data, stream=stream, consumer=consumer)

    async def call(
        self,
        template: str,
        body: dict[str, Any] | None = None,
        *,
        timeout: float | None = None,
        **parts: str,
    ) -> dict[str, Any]:
        """Send a request to an API template and return the decoded reply."""
        return await self.request(
            self.subject(template, **parts),
            body,
            timeout=timeout,
            stream=parts.get("stream"),
            consumer=parts.get("consumer"),
        )

    async def call_model(
        self,
        template: str,
        model: type[M],
        body: dict[str, Any] | None = None,
        *,
        timeout: float | None = None,
        **parts: str,
    ) -> M:
        """Send a request and parse the reply into ``model`` (unknown fields kept)."""
        reply = await self.call(template, body, timeout=timeout, **parts)
        return parse(model, reply)


# --------------------------------------------------------------------------- reply fields
#
# A reply's fields are read with these where the code uses them itself (not through
# a model): a field of the wrong type or out of range is InvalidResponseError, never
# a bare KeyError / TypeError / ValueError from the reading.


def reply_int(value: object, what: str, maximum: int = MAX_UINT64) -> int:
    """A JSON integer from ``0`` to ``maximum`` (a bool or a float is not one).

    Raises:
        InvalidResponseError: anything else.

    """
    if type(value) is not int or not 0 <= value <= maximum:
        raise InvalidResponseError(f"invalid {what} in a reply: {shown(value)}")
    return value


def check_named(kind: str, asked: str, answered: str) -> None:
    """Refuse a reply about another stream (or consumer) than the one asked about.

    A handle built from it would act on that one (a purge emptying another stream).

    Raises:
        InvalidResponseError: ``answered`` is not ``asked``.

    """
    if answered != asked:
        raise InvalidResponseError(
            f"asked about {kind} {asked!r}, the server answered about {kind} {shown(answered)}"
        )


def reply_text(value: object, what: str) -> str:
    """A JSON string.

    Raises:
        InvalidResponseError: anything else.

    """
    if not isinstance(value, str):
        raise InvalidResponseError(f"invalid {what} in a reply: {shown(value)}")
    return value


def header_uint(value: str, what: str) -> int:
    """A uint64 header value: ASCII digits only (no sign, ``_``, blank or other digits).

    Raises:
        InvalidResponseError: anything else.

    """
    # (int() takes "-5", "1_000", " 7", fullwidth digits; past 4,300 digits it raises.)
    if value.isascii() and value.isdigit() and len(value) <= 20:
        number = int(value)
        if number <= MAX_UINT64:
            return number
    raise InvalidResponseError(f"invalid {what} {shown(value)}")


def parse(model: type[M], data: dict[str, Any]) -> M:
    """Parse server data into a model, mapping validation failures to a typed error."""
    try:
        return from_wire(model, data)
    except ValidationError as exc:
        raise InvalidResponseError(f"unexpected {model.__name__} from the server: {exc}") from exc


def item_name(item: object) -> object:
    """The name of a list page's item: a name, or a stream / consumer info's.

    A consumer info the server made up for a consumer whose peers are all
    offline has ``"name": ""`` (no omitempty): its name is its config's.
    """
    if isinstance(item, dict):
        config = item.get("config")
        name = item.get("name")
        if not name and isinstance(config, dict):
            name = config.get("name") or config.get("durable_name") or name
        return name
    return item


async def paged(
    api: ApiClient,
    template: str,
    key: str,
    body: dict[str, Any],
    timeout: float | None,
    **parts: str,
) -> AsyncIterator[Any]:
    """Yield every item of a paged list or names API, page by page.

    The server pages at 256 (names: 1024); requests follow ``offset`` until
    ``total`` items were seen or a page comes back empty. In a cluster a page
    leaves out the entries whose leaders did not answer in time (its
    ``missing``) but counts them: the next page starts after them (else it
    repeated entries), and they are logged as a warning. A stream whose peers
    are all offline is in both (its config only) and counted once. A page the same as
    the one before is :class:`InvalidResponseError` (no end otherwise).

    The server sorts the listing by name and pages it by offset, so an entry
    created or deleted before the offset while paging moved the next page by
    one: an entry was listed twice, or one that existed throughout was never
    listed. Each page after the first starts one entry early and must begin
    at or before the last name listed (names up to it are not listed again);
    a page that begins past it is asked for again from further back.
    """
    offset = 0
    previous: list[Any] = []
    last: str | None = None  # the greatest name of the listing seen so far (listed or missing)
    early = False  # whether this page was asked for from one entry before ``last``
    back = 1  # how far a page that starts too late is asked for again from
    retries = 0
    while True:
        reply = await api.call(template, {**body, "offset": offset}, timeout=timeout, **parts)
        items = reply.get(key) or []
        if not isinstance(items, list) or not all(isinstance(i, str | dict) for i in items):
            # (A string was listed letter by letter, [1, null] as '1', 'None'.)
            raise InvalidResponseError(f"invalid {key!r} in a list reply: {shown(items)}")
        # nats-server echoes the offset, clamped to its count (a listing that shrank
        # meanwhile gets an empty page at a lower offset: the end, not an error).
        answered = reply.get("offset", offset)
        if (answered != offset and items) or (offset and items and items == previous):
            # Not a page of nats-server's: a server (or a proxy) answering another
            # offset, or the same page again, would be listed without end.
            raise InvalidResponseError(
                f"{template.split('.{')[0].lower()}: the server answered offset {offset} "
                + (
                    f"with the page at offset {shown(answered)}"
                    if answered != offset
                    else "with the page before it again"
                )
            )
        missing = reply.get("missing") or []
        if not isinstance(missing, list):
            raise InvalidResponseError(f"invalid 'missing' in a list reply: {shown(missing)}")
        total = reply_int(reply.get("total", 0), "list 'total'")
        names: list[Any] = [item_name(item) for item in items]
        # A stream or consumer whose peers are all offline is in both (its config,
        # by hand): counted once, or the next page would start past an entry.
        listed = set(names) if missing else set()
        left_out = [name for name in missing if name not in listed]
        # The page's part of the listing, which the server sorts by name before it
        # pages it (the page itself may not be in that order: a consumer whose peers
        # are offline comes first, its info made up with the name "").
        window = [*names, *left_out]
        named = all(type(name) is str for name in window)
        if (
            early
            and named
            and offset
            and total
            and retries < 16  # (a listing that keeps shrinking: go on after 16 tries)
            and (not window or min(window) > last)
        ):
            # Entries before the offset went away meanwhile: ask from further
            # back. (From offset 0 the page is the listing's true start.)
            back *= 64
            retries += 1
            offset = max(0, min(offset, total) - back)
            previous = []
            continue
        back = 1
        previous = items
        skip = last if named else None  # (listed already, on a page before)
        for item, name in zip(items, names, strict=True):
            if skip is None or name > skip:
                yield item
        what = template.split(".{")[0].lower()
        if left_out:
            logger.warning(
                "%s: %d left out, their leaders did not answer in time: %s",
                what,
                len(left_out),
                ", ".join(map(str, left_out)),
            )
        if len(left_out) < len(missing):
            logger.warning(
                "%s: %d listed with their configuration only, their peers are offline: %s",
                what,
                len(missing) - len(left_out),
                ", ".join(str(name) for name in missing if name in listed),
            )
        end = offset + len(window)
        if not (items or missing) or end >= total:
            return
        if named and window:  # (never backwards: a page asked from further back is behind)
            last = max(window) if last is None else max(last, *window)
        # The next page starts at this one's last entry, to be checked against ``last``.
        early = named and last is not None and len(window) > 1
        offset = end - early
