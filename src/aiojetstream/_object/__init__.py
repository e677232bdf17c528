"""Object stores over JetStream (ADR-20): large objects stored in chunks.

A bucket ``B`` is the stream ``OBJ_B`` listening on ``$O.B.C.>`` (chunks) and
``$O.B.M.>`` (object infos). Each put takes a new nuid: the object's data goes
in chunks (128 KiB by default) to ``$O.B.C.<nuid>`` through the asynchronous
publish window, then its info (JSON, as nats.go writes it) to
``$O.B.M.<base64url(name)>`` with ``Nats-Rollup: sub``, which replaces the
previous info, and ``Nats-Expected-Last-Subject-Sequence``, so that it replaces
only the info it read. Reads stream the chunks through an ordered consumer with
a small buffer and check the chunk count, size and SHA-256 digest at the end.

The package: :mod:`.names` (names, subjects, digests, infos; pure),
:mod:`.write` (chunking, info writes, the put saga), :mod:`.read`
(:class:`ObjectResult`, downloads, :class:`ObjectWatcher`) and :mod:`.store`
(:class:`ObjectStore` and the bucket functions the context calls).
"""

from .names import (
    encode_name,
    format_digest,
    meta_body,
    object_stream_config,
    parse_digest,
    parse_info,
    validate_object_name,
)
from .read import ObjectResult, ObjectWatcher
from .store import (
    ObjectStore,
    create_object_store,
    delete_object_store,
    object_store,
    object_store_names,
    update_object_store,
)
from .write import rechunk

__all__ = [
    "ObjectResult",
    "ObjectStore",
    "ObjectWatcher",
    "create_object_store",
    "delete_object_store",
    "encode_name",
    "format_digest",
    "meta_body",
    "object_store",
    "object_store_names",
    "object_stream_config",
    "parse_digest",
    "parse_info",
    "rechunk",
    "update_object_store",
    "validate_object_name",
]
