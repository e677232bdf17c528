"""A fetch's messages as Arrow columns (:meth:`MessageBatch.collect_columns`; needs pyarrow).

On the fast path the router hands a fetch in column mode whole runs of its
plain messages (``MSG``, no headers) instead of one :class:`Msg` each: a
:class:`Framer` frames them in bulk with pyarrow kernels, straight from the
read buffer, into a :class:`Run` (subjects, reply subjects and payloads as
Arrow arrays). Messages with headers, and every message on the fallback,
stay :class:`Msg` objects; :func:`build` puts both into one record batch, in
arrival order.

Bulk framing splits the bytes at every CRLF and takes the segments as
alternating control lines and payloads. A run is the longest prefix of
messages for which that reading is the protocol's own: each line is
``MSG <subject> <sid> <reply> <size>`` with single blanks, the sink's sid
written as the router found it, a reply, a size of 1 to 18 ASCII digits and
no other whitespace (the lines the router's own loop parses the same way),
and each payload segment exactly ``<size>`` bytes long and followed by a
CRLF, so no CRLF lies inside a payload. By induction each accepted message
starts where the size-based framing says it does. Anything else (a payload
containing a CRLF, a header message, another subscription's message, a
message not all in yet) ends the run, and the router's own loop goes on
from there.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from itertools import repeat
from typing import Any, Final

import pyarrow as pa
import pyarrow.compute as pc

from ._message import Acker, Msg

__all__ = ["COLUMNS", "Framer", "Run", "build"]

#: The schema of :meth:`MessageBatch.collect_columns`.
COLUMNS: Final = pa.schema(
    [
        pa.field("subject", pa.string()),
        pa.field("reply", pa.string()),
        pa.field("headers", pa.map_(pa.string(), pa.string())),
        pa.field("data", pa.binary()),
    ]
)
_HEADERS: Final = COLUMNS.field("headers").type
_CRLF: Final = b"\r\n"
#: A field of a control line: no ASCII whitespace (what ``bytes.split()`` splits at).
_TOKEN: Final = "[^ \\t\\n\\x0b\\x0c\\r]+"
#: The most bytes one framing looks at past its first message (a run needs no
#: more: the rest is framed by the next call).
WINDOW: Final = 1 << 20
#: Failed framings in a row make the next ones wait: 1, 2, 4, ... messages, at most this.
_MAX_SKIP: Final = 64
_INT32: Final = (1 << 31) - 1


class Run:
    """Messages of one subscription framed in bulk, in order (see the module docstring).

    Plain ones, or (``keys`` and ``values`` set) ones with one header each.
    """

    __slots__ = ("count", "data", "end", "keys", "payload_bytes", "replies", "subjects", "values")

    def __init__(
        self,
        subjects: pa.Array,
        replies: pa.Array,
        data: pa.Array,
        end: int,
        payload_bytes: int,
        keys: pa.Array | None = None,
        values: pa.Array | None = None,
    ) -> None:
        self.subjects = subjects
        self.replies = replies
        self.data = data
        #: Each message's one header, when they have one (binary).
        self.keys = keys
        self.values = values
        #: How many messages.
        self.count = len(data)
        #: Where the read buffer's next frame starts.
        self.end = end
        #: Their payloads' bytes in all.
        self.payload_bytes = payload_bytes

    def __len__(self) -> int:
        return self.count

    def truncate(self, keep: int) -> None:
        """Keep the first ``keep`` messages only."""
        self.subjects = self.subjects.slice(0, keep)
        self.replies = self.replies.slice(0, keep)
        self.data = self.data.slice(0, keep)
        if self.keys is not None and self.values is not None:
            self.keys = self.keys.slice(0, keep)
            self.values = self.values.slice(0, keep)
        self.count = keep

    def tail_size(self, last: int) -> int:
        """The summed :attr:`Msg.size` of the last ``last`` messages."""
        start = self.count - last
        total = 0
        columns = [self.subjects, self.replies, self.data]
        if self.keys is not None and self.values is not None:
            columns += [self.keys, self.values]
            total += last * _HEADER_BYTES
        for column in columns:
            total += pc.sum(pc.binary_length(column.slice(start, last))).as_py() or 0
        return total

    def messages(self, acker: Acker) -> list[Msg]:
        """The messages as :class:`Msg` objects."""
        blocks: Iterable[bytes | None] = repeat(None)
        if self.keys is not None and self.values is not None:
            blocks = [
                b"NATS/1.0\r\n%b: %b\r\n\r\n" % (key, value)
                for key, value in zip(self.keys.to_pylist(), self.values.to_pylist(), strict=True)
            ]
        return list(
            map(
                Msg,
                self.subjects.to_pylist(),
                self.replies.to_pylist(),
                self.data.to_pylist(),
                blocks,
                repeat(acker),
            )
        )


_EVENS: list[pa.Array] = [pa.array([], pa.int64())]
#: The bytes of a one-header block besides its key and value ("NATS/1.0", ": ", CRLFs).
_HEADER_BYTES: Final = 16
#: One header line whose key and value decode_headers reads as they are: a token,
#: ": ", then printable ASCII without blanks around it (anything else: one by one).
_HEADER_LINE: Final = (
    "^[!#$%&'*+\\-.^_`|~0-9A-Za-z]+: [\\x21-\\x7e](?:[\\x20-\\x7e]*[\\x21-\\x7e])?$"
)
_NATS: Final = b"NATS/1.0"


def _evens(count: int) -> pa.Array:
    """``0, 2, 4, ...``: ``count`` of them (a slice of a cached array)."""
    evens = _EVENS[0]
    if len(evens) < count:
        evens = _EVENS[0] = pa.array(range(0, 4 * count, 2), pa.int64())
    return evens.slice(0, count)


def _strided(count: int, stride: int, start: int = 0) -> pa.Array:
    """``start, start + stride, ...``: ``count`` of them."""
    return pc.add(pc.multiply(pc.divide(_evens(count), 2), stride), start)


def _prefix(good: pa.Array, count: int) -> int:
    """How many of the first ``count`` entries of ``good`` are true before the first false."""
    first = pc.index(good, False).as_py()
    return count if first < 0 else min(first, count)


def _all_plain_lines(lines: pa.Array, fields: pa.Array, sid: bytes) -> list[pa.Array] | None:
    """The subjects, replies and sizes when every line matches :func:`frame`'s regex; else None.

    That is ``^MSG {_TOKEN} <sid> {_TOKEN} [0-9]{1,18}$``, tested on the
    whole column with cheap kernels and aggregates (the regex costs more than
    all of them): five blank-separated ``fields`` (the line split at blanks),
    the first ``MSG``, the third the sid, the second and fourth not empty (no
    two blanks in a row), the fifth 1 to 18 ASCII digits, and only printable
    ASCII (no tab, LF, VT, FF or CR). None says nothing about which line
    differs (the regex tells).
    """
    lengths = pc.min_max(pc.list_value_length(fields)).as_py()
    if lengths["min"] != 5 or lengths["max"] != 5:
        return None
    if not pc.all(pc.starts_with(lines, b"MSG ")).as_py():
        return None
    if not pc.all(pc.equal(pc.list_element(fields, 2), pa.scalar(sid, pa.binary()))).as_py():
        return None
    subjects, replies, sizes = (pc.list_element(fields, i) for i in (1, 3, 4))
    if not (
        pc.min(pc.binary_length(subjects)).as_py() and pc.min(pc.binary_length(replies)).as_py()
    ):
        return None
    # (is_decimal is false for an empty field too)
    if not pc.all(pc.ascii_is_decimal(sizes.view(pa.string()))).as_py():
        return None
    if pc.max(pc.binary_length(sizes)).as_py() > 18:
        return None
    if not pc.all(pc.ascii_is_printable(lines.view(pa.string()))).as_py():
        return None
    return [subjects, replies, sizes]


def frame(view: bytes, pos: int, end: int, sid: bytes) -> Run | None:
    """The run of plain messages for ``sid`` that starts at ``view[pos]`` (None: not one).

    Only bytes before ``end`` are looked at; a message not all in before it
    ends the run.
    """
    end = min(end, len(view))
    if end > _INT32 or not sid.isdigit():
        return None
    offsets = pa.py_buffer(struct.pack("<ii", pos, end))
    whole = pa.Array.from_buffers(pa.binary(), 1, [None, offsets, pa.py_buffer(view)])
    segments = pc.split_pattern(whole, _CRLF).flatten()
    # Segment pairs (line, payload), each followed by a CRLF: the last segment
    # (after the last CRLF) belongs to no complete message.
    count = (len(segments) - 1) // 2
    if count <= 0:
        return None
    # Every other segment from the first: the lines, and the payloads after them.
    lines_at = _evens(count)
    lines = pc.take(segments, lines_at)
    # Every line "MSG <subject> <sid> <reply> <size>" (the usual case): checked
    # over the whole column at once; otherwise line by line, with the regex.
    fields = pc.split_pattern(lines, b" ")
    tokens = _all_plain_lines(lines, fields, sid)
    if tokens is None:
        # The whole line in one pass: "MSG", the sid, single blanks, no other
        # whitespace (bytes.split() would split there), a size of ASCII digits.
        line = f"^MSG {_TOKEN} {sid.decode()} {_TOKEN} [0-9]{{1,18}}$"
        count = _prefix(pc.match_substring_regex(lines, line), count)
        if not count:
            return None
        fields = fields.slice(0, count)
        tokens = [pc.list_element(fields, i) for i in (1, 3, 4)]
    subjects, replies, size_tokens = tokens
    sizes = pc.cast(size_tokens, pa.int64())
    data = pc.take(segments, pc.add(lines_at.slice(0, count), 1))
    count = _prefix(pc.equal(pc.binary_length(data), sizes), count)
    if not count:
        return None
    if count < len(data):
        data = data.slice(0, count)
        sizes = sizes.slice(0, count)
    payload_bytes = pc.sum(sizes).as_py()
    line_bytes = pc.sum(pc.binary_length(lines.slice(0, count))).as_py()
    return Run(
        subjects.slice(0, count),
        replies.slice(0, count),
        data,
        pos + line_bytes + payload_bytes + 4 * count,
        payload_bytes,
    )


def frame_headers(view: bytes, pos: int, end: int, sid: bytes) -> Run | None:
    """As :func:`frame`, for messages with one header each (``HMSG``; a msg id, say).

    Each is then five CRLF-ended segments: the line ``HMSG <subject> <sid>
    <reply> <header size> <total size>``, ``NATS/1.0`` (no status), the header
    line (``_HEADER_LINE``), an empty line and the payload; the sizes must be
    those of the segments. Anything else ends the run.
    """
    end = min(end, len(view))
    if end > _INT32 or not sid.isdigit():
        return None
    offsets = pa.py_buffer(struct.pack("<ii", pos, end))
    whole = pa.Array.from_buffers(pa.binary(), 1, [None, offsets, pa.py_buffer(view)])
    segments = pc.split_pattern(whole, _CRLF).flatten()
    count = (len(segments) - 1) // 5
    if count <= 0:
        return None
    lines_at = _strided(count, 5)
    lines = pc.take(segments, lines_at)
    line = f"^HMSG {_TOKEN} {sid.decode()} {_TOKEN} [0-9]{{1,18}} [0-9]{{1,18}}$"
    count = _prefix(pc.match_substring_regex(lines, line), count)
    if not count:
        return None
    lines_at = lines_at.slice(0, count)
    lines = lines.slice(0, count)
    fields = pc.split_pattern(lines, b" ")
    header_size = pc.cast(pc.list_element(fields, 4), pa.int64())
    total_size = pc.cast(pc.list_element(fields, 5), pa.int64())
    first = pc.take(segments, pc.add(lines_at, 1))
    header = pc.take(segments, pc.add(lines_at, 2))
    blank = pc.take(segments, pc.add(lines_at, 3))
    data = pc.take(segments, pc.add(lines_at, 4))
    good = pc.and_(
        pc.and_(
            pc.equal(first, pa.scalar(_NATS, pa.binary())),
            pc.equal(pc.binary_length(blank), 0),
        ),
        pc.and_(
            pc.match_substring_regex(header, _HEADER_LINE),
            pc.and_(
                pc.equal(header_size, pc.add(pc.binary_length(header), _HEADER_BYTES - 2)),
                pc.equal(pc.subtract(total_size, header_size), pc.binary_length(data)),
            ),
        ),
    )
    count = _prefix(good, count)
    if not count:
        return None
    pairs = pc.split_pattern(header.slice(0, count), b": ", max_splits=1)
    payload_bytes = pc.sum(pc.binary_length(data.slice(0, count))).as_py()
    line_bytes = pc.sum(pc.binary_length(lines.slice(0, count))).as_py()
    message_bytes = pc.sum(total_size.slice(0, count)).as_py()
    return Run(
        pc.list_element(fields, 1).slice(0, count),
        pc.list_element(fields, 3).slice(0, count),
        data.slice(0, count),
        pos + line_bytes + message_bytes + 4 * count,
        payload_bytes,
        pc.list_element(pairs, 0),
        pc.list_element(pairs, 1),
    )


class Framer:
    """Frames runs for a sink (``RawSink.bulk``); backs off after failures.

    A run that cannot start where asked (the first message's payload holds a
    CRLF, say) costs a framing of up to :data:`WINDOW` bytes: after one, the
    next 1, 3, 7, ... (at most 64) messages of the sink of that kind (plain,
    or with headers) are left to the router's loop before framing is tried
    again; any run resets that.
    """

    __slots__ = ("_backoff", "_skip")

    def __init__(self) -> None:
        # [plain, with headers]
        self._skip = [0, 0]
        self._backoff = [0, 0]

    def __call__(self, view: bytes, pos: int, size: int, sid: bytes, first_end: int) -> Run | None:
        """The run at ``view[pos:size]`` (``first_end``: where its first message ends)."""
        kind = 1 if view.startswith(b"HMSG ", pos) else 0
        if self._skip[kind]:
            self._skip[kind] -= 1
            return None
        framing = frame_headers if kind else frame
        run = framing(view, pos, min(size, max(pos + WINDOW, first_end)), sid)
        if run is None:
            self._backoff[kind] = min(_MAX_SKIP, 2 * self._backoff[kind] + 1)
            self._skip[kind] = self._backoff[kind]
        else:
            # (A run of one is no failure: a read may hold no more of them.)
            self._backoff[kind] = 0
        return run


def _text(column: pa.Array) -> pa.Array:
    """Binary as UTF-8 strings; bytes that are not UTF-8 replaced (as :class:`Msg` decodes)."""
    try:
        return column.cast(pa.string())
    except (pa.ArrowInvalid, UnicodeDecodeError):
        return pa.array(
            [None if b is None else b.decode("utf-8", "replace") for b in column.to_pylist()],
            pa.string(),
        )


def _message_columns(msgs: list[Msg]) -> list[pa.Array]:
    headers = [m.headers for m in msgs]
    return [
        pa.array([m._subject for m in msgs], pa.binary()),
        pa.array([m._reply for m in msgs], pa.binary()),
        pa.array(headers, _HEADERS)
        if any(h is not None for h in headers)
        else pa.nulls(len(msgs), _HEADERS),
        pa.array([m.data for m in msgs], pa.binary()),
    ]


def _run_headers(run: Run) -> pa.Array:
    """The headers column of a run: nulls, or a map of each message's one header."""
    if run.keys is None or run.values is None:
        return pa.nulls(run.count, _HEADERS)
    offsets = pc.cast(pc.divide(_evens(run.count + 1), 2), pa.int32())
    return pa.MapArray.from_arrays(
        offsets, run.keys.cast(pa.string()), run.values.cast(pa.string()), type=_HEADERS
    )


def build(items: Iterable[Any]) -> pa.RecordBatch:
    """One record batch (:data:`COLUMNS`) of buffered :class:`Run` and :class:`Msg` items."""
    parts: list[list[pa.Array]] = []
    msgs: list[Msg] = []
    for item in items:
        if type(item) is Run:
            if msgs:
                parts.append(_message_columns(msgs))
                msgs = []
            parts.append([item.subjects, item.replies, _run_headers(item), item.data])
        else:
            msgs.append(item)
    if msgs:
        parts.append(_message_columns(msgs))
    if not parts:
        return empty()
    columns = [
        pa.concat_arrays([part[i] for part in parts]) if len(parts) > 1 else parts[0][i]
        for i in range(4)
    ]
    columns[0] = _text(columns[0])
    columns[1] = _text(columns[1])
    return pa.RecordBatch.from_arrays(columns, schema=COLUMNS)


def empty() -> pa.RecordBatch:
    """A record batch of :data:`COLUMNS` without rows."""
    return pa.RecordBatch.from_arrays([pa.array([], f.type) for f in COLUMNS], schema=COLUMNS)


# --------------------------------------------------------------------------- publishing


def is_arrow(column: object) -> bool:
    """True for a pyarrow array or chunked array."""
    return isinstance(column, pa.Array | pa.ChunkedArray)


def payload_column(column: pa.Array | pa.ChunkedArray) -> pa.Array:
    """Payloads given as Arrow: a binary array without nulls (``large_binary`` kept).

    Raises:
        InvalidOptionError: not binary (a string column must be cast or
            encoded explicitly, as a ``str`` payload must), or a null.

    """
    from ._errors import InvalidOptionError

    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    if not (pa.types.is_binary(column.type) or pa.types.is_large_binary(column.type)):
        raise InvalidOptionError(f"payloads must be a binary array, got {column.type}")
    if column.null_count:
        raise InvalidOptionError(
            f"payloads: a null at row {pc.index(pc.is_null(column), True).as_py()} "
            "(an empty payload is b'')"
        )
    return column


#: A msg id's header block is this, the id and a blank line (``header_block`` of it).
_MSG_ID_HEAD: Final = b"NATS/1.0\r\nNats-Msg-Id: "
_MSG_ID_TAIL: Final = b"\r\n\r\n"
#: Msg ids taken as a column as they are: printable ASCII, no blank (so the
#: header checks pass and stripping changes nothing). Others go one by one.
_PLAIN_ID: Final = "^[\\x21-\\x7e]+$"


def plain_msg_ids(ids: object) -> pa.Array | None:
    """The msg ids as a string array when every one is plain (see ``_PLAIN_ID``), else None.

    None also for a null, a value that is not a string, or an id the per-id
    checks must judge (their errors are the ones raised).
    """
    column: Any
    try:
        column = ids if is_arrow(ids) else pa.array(ids, pa.string())
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, UnicodeError):
        return None  # (a lone surrogate: UnicodeEncodeError)
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    if pa.types.is_large_string(column.type):
        column = column.cast(pa.string())
    if not pa.types.is_string(column.type) or column.null_count:
        return None
    if len(column) and not pc.all(pc.match_substring_regex(column, _PLAIN_ID)).as_py():
        return None
    return column


def msg_id_block(msg_id: str) -> bytes:
    """The header block of a plain msg id."""
    return _MSG_ID_HEAD + msg_id.encode() + _MSG_ID_TAIL


def _message_sizes(data: pa.Array, ids: pa.Array | None) -> pa.Array:
    lengths = pc.binary_length(data)
    if ids is None:
        return lengths
    return pc.add(lengths, pc.add(pc.binary_length(ids), len(_MSG_ID_HEAD) + len(_MSG_ID_TAIL)))


def longest_message(data: pa.Array, ids: pa.Array | None = None) -> int:
    """The size of the largest message, its msg id's header block included (0 for none)."""
    return pc.max(_message_sizes(data, ids)).as_py() or 0


def first_longer(data: pa.Array, ids: pa.Array | None, limit: int) -> int:
    """The index of the first message larger than ``limit``."""
    return int(pc.index(pc.greater(_message_sizes(data, ids), limit), True).as_py())


def pub_commands(
    subject: bytes | pa.Array, reply: bytes, data: pa.Array, ids: pa.Array | None = None
) -> tuple[bytes, int]:
    """The PUB commands of ``data`` (one reply subject for all), joined; and the payload bytes.

    ``subject``: one for all, or a binary array with one per payload.
    ``ids``: plain msg ids (:func:`plain_msg_ids`), one per payload: HPUB
    commands with a ``Nats-Msg-Id`` header each, as ``pub_command`` builds
    them. Built with pyarrow kernels: no Python object per message.
    """
    lengths = pc.binary_length(data)
    payload_bytes = pc.sum(lengths).as_py() or 0
    count = len(data)
    big = payload_bytes + count * (160 + len(reply)) > _INT32 // 2
    kind = pa.large_binary() if big else pa.binary()
    data = data.cast(kind)
    crlf = pa.scalar(_CRLF, kind)
    if ids is None:
        verb = b"PUB"
        sizes = [pc.cast(pc.cast(lengths, pa.string()), kind), crlf]
    else:
        verb = b"HPUB"
        header = pc.add(pc.binary_length(ids), len(_MSG_ID_HEAD) + len(_MSG_ID_TAIL))
        sizes = [
            pc.cast(pc.cast(header, pa.string()), kind),
            pa.scalar(b" ", kind),
            pc.cast(pc.cast(pc.add(header, lengths), pa.string()), kind),
            pa.scalar(_CRLF + _MSG_ID_HEAD, kind),
            ids.cast(kind),
            pa.scalar(_MSG_ID_TAIL, kind),
        ]
    if isinstance(subject, bytes):
        parts = [pa.scalar(b"%b %b %b " % (verb, subject, reply), kind), *sizes, data, crlf]
    else:
        parts = [
            pa.scalar(verb + b" ", kind),
            subject.cast(kind),
            pa.scalar(b" %b " % reply, kind),
            *sizes,
            data,
            crlf,
        ]
    joined = pc.binary_join_element_wise(*parts, pa.scalar(b"", kind))
    width = 8 if big else 4
    offsets = joined.buffers()[1]
    at = joined.offset
    fmt = "<q" if big else "<i"
    start = struct.unpack_from(fmt, offsets, at * width)[0]
    stop = struct.unpack_from(fmt, offsets, (at + count) * width)[0]
    return joined.buffers()[2][start:stop].to_pybytes(), payload_bytes
