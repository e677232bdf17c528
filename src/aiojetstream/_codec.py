"""Typed payloads: the :class:`Codec` protocol, its two built-ins, and the encode/decode steps.

A payload is published as is when it is ``bytes`` (checked first: the hot path
pays one type test), copied when ``bytearray`` or ``memoryview``, encoded by
pydantic's compiled serializer when a ``BaseModel`` (with ``Content-Type:
application/json`` unless the caller set one), and encoded by ``codec`` when
one is given. A ``str`` is refused: text has no single encoding.

Decoding validates straight from bytes (``Model.model_validate_json``); a
payload that does not validate raises :class:`PayloadValidationError`.
"""

from __future__ import annotations

import struct
import weakref
from collections.abc import Mapping
from contextlib import suppress
from typing import (
    TYPE_CHECKING,
    Any,
    Final,
    Protocol,
    TypeVar,
    get_origin,
    runtime_checkable,
)

from ._errors import InvalidOptionError, PayloadValidationError

if TYPE_CHECKING:
    from collections.abc import Callable

T = TypeVar("T")

CONTENT_TYPE: Final = "Content-Type"
JSON: Final = "application/json"


@runtime_checkable
class Codec(Protocol):
    """Turns values into payload bytes and back (for example msgpack or protobuf).

    Pass one as ``codec=`` to the publish calls, ``kv.put`` / ``create`` /
    ``update``, object ``put``, ``decode`` and ``messages`` / ``consume``.
    A codec may also have a ``content_type`` attribute: publishes then carry it
    as their ``Content-Type`` header (unless the caller set one).
    """

    def encode(self, value: Any) -> bytes:
        """The payload of ``value``."""
        ...

    def decode(self, data: bytes, type_: type[T]) -> T:
        """The value of type ``type_`` that ``data`` encodes.

        Raise ``ValueError`` (pydantic's ``ValidationError`` is one) when
        ``data`` is not one: it is reported as :class:`PayloadValidationError`.
        So are ``TypeError``, ``LookupError`` (``KeyError``, ``IndexError``),
        ``struct.error``, an error of a class named ``DecodeError`` (protobuf's)
        and those in the codec's optional ``invalid_errors`` attribute (a tuple
        of exception classes). Anything else (a ``ConnectionError`` of a schema
        registry, an :class:`InvalidOptionError`: ``type_`` cannot be decoded
        at all) is raised as it is, the message left unsettled.
        """
        ...


#: Per model class: whether its JSON is written by alias (see :func:`model_json`).
_BY_ALIAS: weakref.WeakKeyDictionary[type, bool | None] = weakref.WeakKeyDictionary()

#: Core schemas whose ``config`` holds for the fields below them.
_CONFIGURED: Final = frozenset(("model", "dataclass", "typed-dict"))
#: Core schema keys that hold values or what is written only, not what is read.
_NOT_READ: Final = frozenset(
    ("metadata", "default", "serialization", "computed_fields", "config", "cls")
)

Field_ = tuple[str, Any, Any, Mapping[str, Any]]
"""A field of a core schema: its name, validation alias, serialization alias and config."""


def _fields(schema: Any) -> list[Field_]:
    """Every field of core schema ``schema``, nested ones included, each with its config.

    The fields of models, dataclasses and typed dicts, wherever they are: in
    lists, dicts, unions, generics, root models and definitions.
    """
    found: list[Field_] = []
    seen: set[int] = set()
    todo: list[tuple[Any, Mapping[str, Any]]] = [(schema, {})]
    while todo:
        node, config = todo.pop()
        if isinstance(node, list | tuple):
            todo.extend((item, config) for item in node)
            continue
        if not isinstance(node, dict) or id(node) in seen:
            continue
        seen.add(id(node))
        kind = node.get("type")
        if kind in _CONFIGURED and isinstance(node.get("config"), dict):
            config = node["config"]
        fields = node.get("fields")
        if kind in ("model-fields", "typed-dict") and isinstance(fields, dict):
            named = [(name, field) for name, field in fields.items() if isinstance(field, dict)]
        elif kind == "dataclass-args" and isinstance(fields, list):
            named = [(field.get("name", ""), field) for field in fields if isinstance(field, dict)]
        else:
            named = []
        for name, field in named:
            found.append(
                (name, field.get("validation_alias"), field.get("serialization_alias"), config)
            )
            todo.append((field.get("schema"), config))
        skip = "fields" if named else None  # (their schemas are queued above)
        for key, value in node.items():
            if key not in _NOT_READ and key != skip and isinstance(value, dict | list | tuple):
                todo.append((value, config))
    return found


def _reads(written: str, name: str, alias: Any, config: Mapping[str, Any]) -> bool:
    """Whether a field is read back from the key ``written`` (as pydantic looks it up)."""
    if alias is None:
        return written == name
    if written == name and config.get("validate_by_name", config.get("populate_by_name", False)):
        return True
    if not config.get("validate_by_alias", True):
        return False
    if isinstance(alias, str):
        return written == alias
    if not isinstance(alias, list) or not alias:
        return False
    # AliasChoices: a list of paths; AliasPath: one path (a list of keys and
    # indices). A top-level key reads back as the path [key].
    paths = [alias] if isinstance(alias[0], str | int) else alias
    return [written] in paths


def _by_alias(cls: type) -> bool | None:
    """How ``cls`` is written so that ``model_validate_json`` reads it back, nested models too.

    By alias when every field of the schema, nested ones included, is read
    back under the key it is then written by (a plain ``Field(alias=...)`` or
    an ``alias_generator``, with or without ``populate_by_name``: the wire
    form is the alias, as before); else pydantic's default (``None``: each
    model's own ``serialize_by_alias``, else by field name); else by name (a
    ``serialization_alias`` read by name, a model read by name only). A model
    that sets ``serialize_by_alias`` has its choice tried first. When no choice
    reads every field back (a ``validation_alias`` alone), pydantic's default.
    Decided once per class (the schema is walked).
    """
    schema = getattr(cls, "__pydantic_core_schema__", None)
    if not isinstance(schema, dict):
        return None
    fields = _fields(schema)
    # By alias first (what the models say on the wire: camelCase for an
    # alias_generator, as other languages' readers expect), unless a model
    # chose with serialize_by_alias: then its choice (pydantic's default) first.
    chosen = any("serialize_by_alias" in config for _, _, _, config in fields)
    for by_alias in (None, True, False) if chosen else (True, None, False):
        if all(
            _reads(
                serialized
                if serialized
                and (config.get("serialize_by_alias", False) if by_alias is None else by_alias)
                else name,
                name,
                alias,
                config,
            )
            for name, alias, serialized, config in fields
        ):
            return by_alias
    return None


def model_json(serializer: Any, value: Any) -> bytes:
    """A model's JSON from its compiled serializer, as :func:`_by_alias` says."""
    cls = type(value)
    try:
        by_alias = _BY_ALIAS[cls]
    except KeyError:
        by_alias = _BY_ALIAS[cls] = _by_alias(cls)
    data: bytes = serializer.to_json(value, by_alias=by_alias)
    return data


class JsonCodec:
    """JSON through pydantic: models by their compiled serializer, other values by a TypeAdapter.

    The default for ``BaseModel`` payloads and types.
    """

    content_type: Final = JSON

    def encode(self, value: Any) -> bytes:
        """``value`` as JSON (``model_dump_json`` for a model)."""
        serializer = getattr(type(value), "__pydantic_serializer__", None)
        if serializer is not None:
            return model_json(serializer, value)
        from pydantic_core import to_json

        return to_json(value)

    def decode(self, data: bytes, type_: type[T]) -> T:
        """``data`` validated as ``type_`` (``model_validate_json`` for a model).

        Raises:
            InvalidOptionError: pydantic cannot validate JSON as ``type_``.

        """
        value: T = json_validator(type_)(data)
        return value


class RawCodec:
    """Bytes as they are: ``encode`` accepts bytes-like values, ``decode`` returns bytes."""

    def encode(self, value: Any) -> bytes:
        """``value`` as bytes (bytes, bytearray or memoryview; ``str`` is refused)."""
        if type(value) is bytes:
            return value
        if isinstance(value, bytearray | memoryview):
            return bytes(value)
        raise InvalidOptionError(_refusal(value))

    def decode(self, data: bytes, type_: type[T]) -> T:
        """``data`` itself (``type_`` must be ``bytes``)."""
        return data  # type: ignore[return-value]


_JSON: Final = JsonCodec()
#: Per type: its TypeAdapter, or why pydantic cannot build one (a str: not tried again).
_ADAPTERS: dict[Any, Any] = {}


def _unusable(type_: Any, why: object) -> InvalidOptionError:
    name = repr(type_) if get_origin(type_) else getattr(type_, "__name__", None) or repr(type_)
    why = str(why).strip().partition("\n")[0]  # pydantic's first line (then links, hints)
    return InvalidOptionError(
        f"pydantic cannot validate JSON as {name} (model= takes a pydantic model or a type "
        f"pydantic validates; give codec= to decode others): {why}"
    )


def _adapter(type_: Any) -> Any:
    """The TypeAdapter of ``type_``, built once.

    Raises:
        InvalidOptionError: pydantic cannot build one (no schema for the type,
            remembered; or a forward reference it cannot resolve yet).

    """
    try:
        adapter = _ADAPTERS.get(type_)
    except TypeError:  # unhashable (an Annotated with unhashable metadata): not kept
        return _build(type_)
    if adapter is None:
        adapter = _ADAPTERS[type_] = _build(type_)
    elif isinstance(adapter, str):
        raise InvalidOptionError(adapter)
    return adapter


def _build(type_: Any) -> Any:
    from pydantic import TypeAdapter
    from pydantic.errors import PydanticSchemaGenerationError

    try:
        adapter = TypeAdapter(type_)
        if getattr(adapter, "pydantic_complete", True) is False:  # pydantic >= 2.10
            adapter.rebuild(raise_errors=True)
    except PydanticSchemaGenerationError as exc:  # no schema: it never will have one
        error = _unusable(type_, exc)
        with suppress(TypeError):
            _ADAPTERS[type_] = str(error)
        raise error from exc
    except Exception as exc:  # a forward reference not defined yet, and the like
        raise _unusable(type_, exc) from exc
    return adapter


def json_validator(type_: Any) -> Callable[[bytes], Any]:
    """What validates JSON bytes as ``type_``, checked once, before the first payload.

    ``model_validate_json`` for a model, else a TypeAdapter's ``validate_json``
    (built once per type).

    Raises:
        InvalidOptionError: pydantic cannot validate ``type_`` (no schema for it,
            or a model not fully defined): said at once, not on every message.

    """
    validate = getattr(type_, "model_validate_json", None)
    if validate is None:
        return _adapter(type_).validate_json  # type: ignore[no-any-return]
    if getattr(type_, "__pydantic_complete__", True) is False:
        try:  # what pydantic would try on each message, failing each time
            type_.model_rebuild(raise_errors=True)
        except Exception as exc:
            raise _unusable(type_, exc) from exc
    return validate  # type: ignore[no-any-return]


def _refusal(payload: object) -> str:
    if isinstance(payload, str):
        return (
            "payload must be bytes, bytearray, memoryview, a pydantic model, or any value "
            "with codec=; got str: publish text as bytes, for example payload.encode() (UTF-8)"
        )
    got = (
        f"the class {payload.__name__} (pass an instance)"
        if isinstance(payload, type)
        else type(payload).__name__
    )
    return (
        "payload must be bytes, bytearray, memoryview, a pydantic model, "
        f"or any value with codec=; got {got}"
    )


def encode(
    payload: object, codec: Codec | None, headers: Mapping[str, Any] | None
) -> tuple[bytes, dict[str, Any] | None]:
    """The payload bytes of a non-``bytes`` payload (or any with ``codec``), and its headers.

    A model (or a codec with a ``content_type``) adds ``Content-Type`` to the
    headers unless they have one (any case).

    Raises:
        InvalidOptionError: a ``str`` (how to publish text is in the message),
            another value no codec was given for, or a value pydantic or the
            codec could not encode (their error is its ``__cause__``).

    """
    if codec is None:
        if isinstance(payload, bytes | bytearray | memoryview):
            return bytes(payload), None if headers is None else dict(headers)
        serializer = getattr(type(payload), "__pydantic_serializer__", None)
        if serializer is None or isinstance(payload, type):
            raise InvalidOptionError(_refusal(payload))
        try:
            data = model_json(serializer, payload)
        except Exception as exc:  # pydantic's PydanticSerializationError, a serializer's own
            raise InvalidOptionError(
                f"could not encode the {type(payload).__name__} payload as JSON: {exc}"
            ) from exc
        content_type: str | None = JSON
    else:
        if not callable(getattr(codec, "encode", None)):
            raise InvalidOptionError(f"codec must have encode() and decode(), got {codec!r}")
        try:
            data = codec.encode(payload)
        except InvalidOptionError:
            raise
        except Exception as exc:  # the codec's own error, kept as the cause
            raise InvalidOptionError(
                f"codec {type(codec).__name__}.encode failed on the "
                f"{type(payload).__name__} payload: {exc}"
            ) from exc
        if type(data) is not bytes:
            if not isinstance(data, bytearray | memoryview):
                raise InvalidOptionError(
                    f"codec {type(codec).__name__}.encode returned {type(data).__name__}, not bytes"
                )
            data = bytes(data)
        content_type = getattr(codec, "content_type", None)
    if not isinstance(headers, Mapping | None):
        return data, headers  # refused by the publish's header check (InvalidHeaderError)
    if content_type and not (
        headers and any(isinstance(k, str) and k.lower() == "content-type" for k in headers)
    ):
        return data, {**headers, CONTENT_TYPE: content_type} if headers else {
            CONTENT_TYPE: content_type
        }
    return data, None if headers is None else dict(headers)


def decode(
    data: bytes,
    type_: type[T],
    codec: Codec | None,
    where: Callable[[], tuple[str, int | None]],
) -> T:
    """``data`` as a ``type_``: by ``codec``, else JSON through pydantic.

    ``where()`` gives the subject and sequence an error reports (asked only then).

    Raises:
        PayloadValidationError: the payload is not a valid ``type_``.
        InvalidOptionError: pydantic cannot validate JSON as ``type_`` (no codec).

    """
    validate = json_validator(type_) if codec is None else None
    try:
        if validate is not None:
            value: T = validate(data)
            return value
        return codec.decode(data, type_)  # type: ignore[union-attr]
    except Exception as exc:  # pydantic's ValidationError, a codec's invalid payload
        if not invalid_payload(exc, codec):
            raise
        raise invalid(exc, type_, *where()) from exc


#: The errors of a decode that say the payload is invalid (see Codec.decode).
_INVALID_PAYLOAD: Final = (ValueError, TypeError, LookupError, struct.error)


def invalid_payload(exc: BaseException, codec: object | None = None) -> bool:
    """Whether ``exc``, raised by decoding, says the payload is invalid (pure).

    ``ValueError`` (pydantic's ``ValidationError``, ``UnicodeError``, JSON's
    and msgpack's errors), ``TypeError``, ``LookupError``, ``struct.error``, a
    class named ``DecodeError`` (protobuf's) or one of ``codec``'s
    ``invalid_errors``. Not an :class:`InvalidOptionError` (the codec cannot
    decode at all) nor any other error (a schema registry's ``ConnectionError``,
    a ``MemoryError``): those leave the message unsettled, to come again.
    """
    if isinstance(exc, InvalidOptionError) or not isinstance(exc, Exception):
        return False
    if isinstance(exc, _INVALID_PAYLOAD):
        return True
    if any(cls.__name__ == "DecodeError" for cls in type(exc).__mro__):
        return True
    declared = getattr(codec, "invalid_errors", None)
    return isinstance(declared, tuple) and isinstance(exc, declared)


def invalid(
    exc: Exception, type_: object, subject: str, sequence: int | None
) -> PayloadValidationError:
    """The :class:`PayloadValidationError` of a payload ``exc`` refused.

    ``exc``: pydantic's ``ValidationError`` (its errors are kept), or a codec's
    error (one ``{"msg": ...}``; named by its type unless a ``ValueError``).
    """
    errors: list[Any] | None = None
    errors_of = getattr(exc, "errors", None)
    if callable(errors_of):
        try:
            errors = list(errors_of(include_url=False))
        except Exception:  # not pydantic's errors(): the message below
            errors = None
    if errors is None:
        text = str(exc) if isinstance(exc, ValueError) else f"{type(exc).__name__}: {exc}"
        errors = [{"msg": text}]
    name = getattr(type_, "__name__", repr(type_))
    where = f"{subject!r}" + (f" (sequence {sequence})" if sequence is not None else "")
    first = errors[0].get("msg", "") if errors and isinstance(errors[0], dict) else ""
    return PayloadValidationError(
        f"payload on {where} is not a valid {name}: {len(errors)} error(s), first: {first}",
        subject=subject,
        sequence=sequence,
        errors=errors,
    )
