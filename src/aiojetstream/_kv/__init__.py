"""Key-value buckets over JetStream (ADR-8), with per-key TTLs and limit markers (ADR-48).

A bucket ``B`` is the stream ``KV_B`` listening on ``$KV.B.>``; key ``k`` is the
subject ``$KV.B.k``. Every revision is a message: a value (``PUT``), or a marker
written by a client (``KV-Operation: DEL`` / ``PURGE``) or by the server when a
limit removed the key's last value (``Nats-Marker-Reason: MaxAge`` / ``Purge`` /
``Remove``). Reads go through direct get; listings (keys, history, watch) through
an ordered consumer filtered on the server.

The package: :mod:`.keys` (keys, revisions, bucket names; pure), :mod:`.buckets`
(the backing stream, creating and binding), :mod:`.handle` (:class:`KeyValue`,
:class:`KeyWatcher`). The reader that listings and watches use is shared with
the object store (:mod:`aiojetstream._watch`).
"""

from .._watch import WATCH_HEARTBEAT, bucket_gone
from .buckets import (
    create_key_value,
    create_or_update_key_value,
    delete_key_value,
    key_value,
    key_value_store_names,
    kv_stream_config,
    update_key_value,
)
from .handle import KeyValue, KeyWatcher
from .keys import (
    STREAM_PREFIX,
    entry_operation,
    key_pattern,
    plain_reply,
    stretch_told,
    validate_key,
    validate_key_filter,
)

__all__ = [
    "STREAM_PREFIX",
    "WATCH_HEARTBEAT",
    "KeyValue",
    "KeyWatcher",
    "bucket_gone",
    "create_key_value",
    "create_or_update_key_value",
    "delete_key_value",
    "entry_operation",
    "key_pattern",
    "key_value",
    "key_value_store_names",
    "kv_stream_config",
    "plain_reply",
    "stretch_told",
    "update_key_value",
    "validate_key",
    "validate_key_filter",
]
