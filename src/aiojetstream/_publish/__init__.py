"""Publishing: option validation, ``publish``, and ``publish_async`` with a bounded window.

The package, by concern:

* :mod:`.options`: the publish options validated into headers, the header
  block, sizes against ``max_payload``, and client-side waits (pure);
* :mod:`.single`: one publish at a time (the acknowledgement and its retries)
  and holding while the stream is full (``hold_when_full``);
* :mod:`.acks`: counting many acknowledgements without a future each (the
  tally, spans, :class:`PublishSummary`, runs of plain acknowledgements);
* :mod:`.window`: :class:`AsyncPublisher`, the asynchronous publish window.

The context facade and the bulk paths import this package, never its modules.
"""

from .acks import AckRun, AckRuns, AckSpan, AckTally, AckTarget, PublishSummary
from .options import (
    build_headers,
    check_size,
    check_sizes,
    duration_seconds,
    header_block,
    held_msg_id,
    hold_seconds,
    new_msg_id,
    payload_bytes,
)
from .single import (
    HOLD_FIRST_WAIT,
    HOLD_MAX_WAIT,
    HOLD_MIN_WAIT,
    IN_PROCESS_FIRST_WAIT,
    IN_PROCESS_MAX_WAIT,
    PUBLISH_RETRY_ATTEMPTS,
    PUBLISH_RETRY_WAIT,
    ack_from_reply,
    hold_when_full,
    no_stream_text,
    parse_pub_ack,
    publish,
)
from .window import AsyncPublisher

__all__ = [
    "HOLD_FIRST_WAIT",
    "HOLD_MAX_WAIT",
    "HOLD_MIN_WAIT",
    "IN_PROCESS_FIRST_WAIT",
    "IN_PROCESS_MAX_WAIT",
    "PUBLISH_RETRY_ATTEMPTS",
    "PUBLISH_RETRY_WAIT",
    "AckRun",
    "AckRuns",
    "AckTally",
    "AckTarget",
    "AsyncPublisher",
    "PublishSummary",
    "AckSpan",
    "ack_from_reply",
    "no_stream_text",
    "build_headers",
    "check_size",
    "check_sizes",
    "duration_seconds",
    "header_block",
    "hold_seconds",
    "hold_when_full",
    "held_msg_id",
    "new_msg_id",
    "parse_pub_ack",
    "payload_bytes",
    "publish",
]
