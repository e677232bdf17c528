"""Key-value buckets: the backing stream's configuration, and creating, binding and deleting.

The context (``js.create_key_value`` and the rest) calls these functions; it
imports this module lazily, and this module imports the context for types only.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from datetime import timedelta
from typing import TYPE_CHECKING

from .. import _bounds as B
from .._errors import (
    BucketNotFoundError,
    FeatureNotSupportedError,
    InvalidOptionError,
    InvalidStreamConfigError,
    JetStreamError,
    KeyValueError,
    StreamNotFoundError,
)
from .._models import (
    DiscardPolicy,
    StoreCompression,
    StreamConfig,
    StreamSource,
    SubjectTransformConfig,
)
from .._models.kv import (
    KeyValueConfig,
    validate_bucket_name,
)
from .._stream import Stream
from .handle import BUCKET_CHECK_TIMEOUT, KeyValue
from .keys import (
    MARKERS_API_LEVEL,
    MAX_DUPLICATE_WINDOW,
    MAX_MIRROR_DEPTH,
    STREAM_PREFIX,
    bucket_of,
    kv_namespaces,
    mirrored_namespace,
    stream_of,
)

if TYPE_CHECKING:
    from .._store_context import StoreContext


def _sources(
    config: KeyValueConfig, held: Mapping[str, str] | None = None
) -> list[StreamSource] | None:
    """The backing stream's sources: each bucket's keys renamed into this bucket's.

    ``held``: per source name, the namespace its stream holds the keys under when
    that is not its own (a mirror bucket holds its origin's, ``$KV.<origin>.<key>``).
    A source's ``filter_subject`` (in that namespace) becomes the transform's
    source: the server refuses a filter beside transforms.

    Raises:
        InvalidOptionError: a source's ``filter_subject`` is not in its bucket's namespace.

    """
    if not config.sources:
        return None
    out: list[StreamSource] = []
    for src in config.sources:
        if src.subject_transforms:
            # Used as given: the source may be any stream.
            out.append(src)
            continue
        origin = bucket_of(src.name)
        update: dict[str, object] = {"name": stream_of(src.name)}
        if src.external is None or origin != config.bucket:
            namespace = (held or {}).get(src.name, origin)
            prefix = f"$KV.{namespace}."
            source_subject = f"{prefix}>"
            dest = f"$KV.{config.bucket}.>"
            if src.filter_subject:
                if not src.filter_subject.startswith(prefix):
                    raise InvalidOptionError(
                        f"the source {src.name!r} has filter_subject {src.filter_subject!r}, "
                        f"which is not in its keys' subjects ({prefix}<key>)"
                    )
                source_subject = src.filter_subject
                dest = f"$KV.{config.bucket}." + _wildcards_kept(src.filter_subject[len(prefix) :])
                update["filter_subject"] = None
            update["subject_transforms"] = [SubjectTransformConfig(src=source_subject, dest=dest)]
        out.append(src.model_copy(update=update))
    return out


def _wildcards_kept(rest: str) -> str:
    """A filter's tokens after its namespace as a transform's destination.

    nats-server wants each ``*`` of a transform's source named in its
    destination: the n-th becomes ``{{wildcard(n)}}`` (``>`` stays).
    """
    tokens = rest.split(".")
    count = 0
    for index, token in enumerate(tokens):
        if token == "*":
            count += 1
            tokens[index] = f"{{{{wildcard({count})}}}}"
    return ".".join(tokens)


async def _held_namespaces(
    js: StoreContext, config: KeyValueConfig, timeout: float | None
) -> dict[str, str]:
    """Per source of ``config`` that is a mirror bucket here, the namespace it holds keys under.

    Only sources in the same account and domain with no transforms of their own
    are looked up (each within ``BUCKET_CHECK_TIMEOUT`` seconds); a source that
    is missing or not visible keeps its own name.
    """
    held: dict[str, str] = {}
    wait = min(js.timeout if timeout is None else timeout, BUCKET_CHECK_TIMEOUT)
    for src in config.sources or []:
        if src.subject_transforms or src.external is not None:
            continue
        try:
            stream = await js.stream(stream_of(src.name), timeout=wait)
        except JetStreamError:
            continue
        if stream.cached_info.config.mirror is None:
            continue
        chain = [stream, *await _origins(js, stream, wait)]
        held[src.name] = kv_namespaces([s.cached_info.config for s in chain])[0]
    return held


def kv_stream_config(config: KeyValueConfig, held: Mapping[str, str] | None = None) -> StreamConfig:
    """The configuration of the stream backing a bucket (ADR-8, ADR-48; as nats.go).

    Raises:
        InvalidNameError: the bucket's name, or a mirror's or source's, is invalid.
        InvalidOptionError: ``max_value_size`` is out of the server's range.
        InvalidStreamConfigError: ``limit_marker_ttl`` was set on a mirror (the
            server does not allow markers on mirrors).

    """
    if not isinstance(config, KeyValueConfig):
        raise InvalidOptionError(f"config must be a KeyValueConfig, got {type(config).__name__}")
    bucket = validate_bucket_name(config.bucket)
    # The stream's max_msg_size: a Go int32.
    B.count(config.max_value_size, "max_value_size", -1, B.MAX_INT32)
    for origin in [config.mirror, *(config.sources or [])]:
        if origin is not None and not origin.subject_transforms:
            validate_bucket_name(bucket_of(origin.name))  # (others: any stream, as sent)
    ttl = config.ttl if config.ttl else None
    fields: dict[str, object] = {
        "name": STREAM_PREFIX + bucket,
        "description": config.description,
        "max_msgs_per_subject": config.history,
        "max_msgs": -1,
        "max_bytes": config.max_bytes,
        "max_age": ttl or timedelta(0),
        "max_msg_size": config.max_value_size,
        "max_consumers": -1,
        "storage": config.storage,
        "num_replicas": config.replicas,
        "discard": DiscardPolicy.NEW,
        "duplicate_window": min(ttl, MAX_DUPLICATE_WINDOW) if ttl else MAX_DUPLICATE_WINDOW,
        "allow_rollup_hdrs": True,
        "deny_delete": True,
        "deny_purge": False,
        "allow_direct": True,
        "compression": StoreCompression.S2 if config.compression else StoreCompression.NONE,
        "placement": config.placement,
        "republish": config.republish,
        "metadata": config.metadata,
    }
    if config.limit_marker_ttl is not None:
        if config.mirror is not None:
            raise InvalidStreamConfigError(
                "limit_marker_ttl can not be set on a mirror bucket (the server refuses "
                "subject delete markers on mirrors)"
            )
        fields["allow_msg_ttl"] = True
        fields["subject_delete_marker_ttl"] = config.limit_marker_ttl
    if config.mirror is not None:
        # Transforms that hide the keys: refused before anything is sent (KeyValueError).
        mirrored_namespace(config.mirror, bucket_of(config.mirror.name))
        fields["mirror"] = config.mirror.model_copy(update={"name": stream_of(config.mirror.name)})
        fields["mirror_direct"] = True
    else:
        fields["subjects"] = [f"$KV.{bucket}.>"]
        fields["sources"] = _sources(config, held)
    return StreamConfig(**{k: v for k, v in fields.items() if v is not None})


async def _prepare(js: StoreContext, config: KeyValueConfig, timeout: float | None) -> StreamConfig:
    # Refused before anything is sent: all but the sources' filters, which are in the
    # subjects each source holds (a mirror bucket's are its origin's: looked up).
    kv_stream_config(config.model_copy(update={"sources": None}))
    for src in config.sources or []:
        if not src.subject_transforms:
            validate_bucket_name(bucket_of(src.name))
    scfg = kv_stream_config(config, await _held_namespaces(js, config, timeout))
    if config.limit_marker_ttl is not None:
        level = await js.api_level(timeout=timeout)
        if level < MARKERS_API_LEVEL:
            raise FeatureNotSupportedError(
                "limit markers (limit_marker_ttl)", MARKERS_API_LEVEL, level, "2.11"
            )
    return scfg


def _for_update(existing: StreamConfig, config: KeyValueConfig, scfg: StreamConfig) -> StreamConfig:
    """Refuse disabling limit markers; keep ``allow_msg_ttl`` on if the bucket has it."""
    if existing.subject_delete_marker_ttl and config.limit_marker_ttl is None:
        raise KeyValueError(
            f"bucket {config.bucket!r} has limit markers (limit_marker_ttl="
            f"{existing.subject_delete_marker_ttl}); they can be enabled on an existing "
            "bucket but never disabled (ADR-48): keep limit_marker_ttl set"
        )
    if existing.allow_msg_ttl and not scfg.allow_msg_ttl:
        # Per-message TTLs without markers (nats-py turns them on for every bucket):
        # the server never turns allow_msg_ttl off, so keep it rather than fail.
        return scfg.model_copy(update={"allow_msg_ttl": True})
    return scfg


async def _origins(js: StoreContext, stream: Stream, wait: float) -> list[Stream]:
    """The streams ``stream`` mirrors, in order, while each is a mirror in the same account.

    A mirror of a mirror (in the same account and domain) holds the subjects of
    the first origin that is no mirror (``$KV.<origin>.<key>``): each origin is
    looked up, at most ``MAX_MIRROR_DEPTH`` of them, each within ``wait``
    seconds. A look-up that fails (the origin is missing, not visible to this
    user, or did not answer) stops there: the mirror's name is taken as the
    origin's, as for a cross-domain mirror.
    """
    origins: list[Stream] = []
    config = stream.cached_info.config
    seen = {config.name}
    while len(origins) < MAX_MIRROR_DEPTH:
        mirror = config.mirror
        if mirror is None or mirror.external is not None or mirror.name in seen:
            break
        try:
            origin = await js.stream(mirror.name, timeout=wait)
        except JetStreamError:
            break
        config = origin.cached_info.config
        seen.add(config.name)
        origins.append(origin)
    return origins


async def _handle(js: StoreContext, stream: Stream, timeout: float | None) -> KeyValue:
    """The handle on a bucket's stream, a mirror's followed to the stream that holds the keys.

    Writes through a mirror's handle go to the first origin that is no mirror
    (:func:`_origins`; each look-up within ``BUCKET_CHECK_TIMEOUT`` seconds).
    """
    wait = min(js.timeout if timeout is None else timeout, BUCKET_CHECK_TIMEOUT)
    origins = await _origins(js, stream, wait)
    configs = [origin.cached_info.config for origin in origins]
    writes_to = origins[-1] if origins and configs[-1].mirror is None else None
    return KeyValue(js, stream, origins=configs, writes_to=writes_to)


async def _existing(js: StoreContext, bucket: str, timeout: float | None) -> Stream | None:
    try:
        return await js.stream(STREAM_PREFIX + bucket, timeout=timeout)
    except StreamNotFoundError:
        return None


async def create_key_value(
    js: StoreContext, config: KeyValueConfig, timeout: float | None
) -> KeyValue:
    """Create a bucket (see :meth:`JetStreamContext.create_key_value`)."""
    scfg = await _prepare(js, config, timeout)
    stream = await js.create_stream(scfg, timeout=timeout)
    return await _handle(js, stream, timeout)


async def update_key_value(
    js: StoreContext, config: KeyValueConfig, timeout: float | None
) -> KeyValue:
    """Update a bucket (see :meth:`JetStreamContext.update_key_value`)."""
    scfg = await _prepare(js, config, timeout)
    current = await _existing(js, config.bucket, timeout)
    if current is None:
        raise BucketNotFoundError(f"bucket {config.bucket!r} not found", config.bucket)
    scfg = _for_update(current.cached_info.config, config, scfg)
    try:
        stream = await js.update_stream(scfg, timeout=timeout)
    except StreamNotFoundError as exc:
        raise BucketNotFoundError(f"bucket {config.bucket!r} not found", config.bucket) from exc
    return await _handle(js, stream, timeout)


async def create_or_update_key_value(
    js: StoreContext, config: KeyValueConfig, timeout: float | None
) -> KeyValue:
    """Create a bucket or update it (see :meth:`JetStreamContext.create_or_update_key_value`)."""
    scfg = await _prepare(js, config, timeout)
    current = await _existing(js, config.bucket, timeout)
    if current is None:
        return await _handle(js, await js.create_stream(scfg, timeout=timeout), timeout)
    scfg = _for_update(current.cached_info.config, config, scfg)
    return await _handle(js, await js.update_stream(scfg, timeout=timeout), timeout)


async def key_value(js: StoreContext, bucket: str, timeout: float | None) -> KeyValue:
    """Bind to an existing bucket (see :meth:`JetStreamContext.key_value`)."""
    validate_bucket_name(bucket)
    stream = await _existing(js, bucket, timeout)
    if stream is None:
        raise BucketNotFoundError(f"bucket {bucket!r} not found", bucket)
    return await _handle(js, stream, timeout)


async def delete_key_value(js: StoreContext, bucket: str, timeout: float | None) -> None:
    """Delete a bucket (see :meth:`JetStreamContext.delete_key_value`)."""
    validate_bucket_name(bucket)
    try:
        await js.delete_stream(STREAM_PREFIX + bucket, timeout=timeout)
    except StreamNotFoundError as exc:
        raise BucketNotFoundError(f"bucket {bucket!r} not found", bucket) from exc


async def key_value_store_names(js: StoreContext, timeout: float | None) -> AsyncIterator[str]:
    """Async-iterate bucket names (see :meth:`JetStreamContext.key_value_store_names`)."""
    async for name in js.stream_names("$KV.*.>", timeout=timeout):
        if name.startswith(STREAM_PREFIX):
            yield name[len(STREAM_PREFIX) :]
