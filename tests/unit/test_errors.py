"""The exception tree and the single err_code registry."""

from __future__ import annotations

import pickle

import pytest

import aiojetstream
from aiojetstream import (
    APIError,
    ConsumerExistsError,
    ConsumerNotFoundError,
    FetchTimeoutError,
    InvalidOptionError,
    InvalidTTLError,
    JetStreamError,
    KeyExistsError,
    MessageTTLDisabledError,
    MessageTTLInvalidError,
    StreamConfigError,
    StreamNotFoundError,
    WrongLastSequenceError,
)
from aiojetstream._errors import _ERR_CODES, api_error


@pytest.mark.parametrize(
    ("err_code", "cls"),
    [
        (10059, StreamNotFoundError),
        (10165, MessageTTLInvalidError),
        (10166, MessageTTLDisabledError),
        (10052, StreamConfigError),
        (10148, ConsumerExistsError),
        (10071, WrongLastSequenceError),
        (99999, APIError),
    ],
)
def test_api_error_mapping(err_code: int, cls: type[APIError]) -> None:
    err = api_error(400, err_code, "boom")
    assert type(err) is cls
    assert (err.code, err.err_code, err.description) == (400, err_code, "boom")
    assert "boom" in str(err)
    assert "err_code=" in str(err)


def test_every_error_derives_from_the_root() -> None:
    for name in aiojetstream.__all__:
        obj = getattr(aiojetstream, name)
        if isinstance(obj, type) and issubclass(obj, BaseException):
            assert issubclass(obj, JetStreamError), name


def test_client_errors_are_value_errors() -> None:
    assert issubclass(InvalidOptionError, ValueError)
    assert issubclass(InvalidTTLError, ValueError)
    assert issubclass(FetchTimeoutError, TimeoutError)
    assert issubclass(KeyExistsError, WrongLastSequenceError)


def test_registry_only_maps_api_errors() -> None:
    assert all(issubclass(cls, APIError) for cls in _ERR_CODES.values())


def test_api_errors_pickle() -> None:
    err = pickle.loads(pickle.dumps(api_error(404, 10059, "stream not found")))
    assert isinstance(err, StreamNotFoundError)
    assert err.err_code == 10059


def test_stream_full_subclass_by_description() -> None:
    from aiojetstream import (
        MaxBytesExceededError,
        MaxMessagesExceededError,
        MaxMessagesPerSubjectExceededError,
        StreamFullError,
        StreamStoreFailedError,
    )
    from aiojetstream._errors import api_error

    cases = {
        "maximum messages exceeded": MaxMessagesExceededError,
        "maximum bytes exceeded": MaxBytesExceededError,
        "maximum messages per subject exceeded": MaxMessagesPerSubjectExceededError,
        "error opening msg block file": StreamStoreFailedError,
    }
    for description, cls in cases.items():
        err = api_error(503, 10077, description)
        assert type(err) is cls
        assert isinstance(err, StreamStoreFailedError)
        assert isinstance(err, StreamFullError) is (cls is not StreamStoreFailedError)
        assert err.err_code == 10077


def test_not_found_errors_name_what_is_missing() -> None:
    """Issue 26: the names the request gave are in the message; the codes stay."""
    stream = api_error(404, 10059, "stream not found", stream="ORDRES")
    assert type(stream) is StreamNotFoundError
    assert str(stream) == "stream 'ORDRES' not found (code=404, err_code=10059)"
    assert (stream.code, stream.err_code, stream.description) == (404, 10059, "stream not found")
    assert stream.stream == "ORDRES"
    consumer = api_error(404, 10014, "consumer not found", stream="ORDERS", consumer="NEW")
    assert type(consumer) is ConsumerNotFoundError
    assert str(consumer) == (
        "consumer 'NEW' not found on stream 'ORDERS' (code=404, err_code=10014)"
    )
    # Without a name the server's description, as before.
    assert str(api_error(404, 10059, "stream not found")) == (
        "stream not found (code=404, err_code=10059)"
    )
    # Other errors keep the server's text, and carry the names too.
    other = api_error(400, 10058, "stream name already in use", stream="ORDERS")
    assert str(other) == "stream name already in use (code=400, err_code=10058)"
    assert other.stream == "ORDERS"


def test_ttl_disabled_says_how_to_enable_it() -> None:
    err = api_error(400, 10166, "per-message TTL is disabled", stream="EVENTS")
    assert type(err) is MessageTTLDisabledError
    assert str(err) == (
        "a message TTL needs allow_msg_ttl, and stream 'EVENTS' has it off: set "
        "allow_msg_ttl=True (update_stream can enable it, never disable it; CLI: "
        "aiojetstream stream edit EVENTS --allow-msg-ttl) (code=400, err_code=10166)"
    )
    assert err.description == "per-message TTL is disabled"


def test_named_api_errors_pickle_with_their_names() -> None:
    for err in (
        api_error(404, 10014, "consumer not found", stream="S", consumer="C"),
        api_error(404, 10059, "stream not found", stream="S"),
        KeyExistsError(400, 10071, "key 'k' exists: wrong last sequence: 2"),
    ):
        copy = pickle.loads(pickle.dumps(err))
        assert type(copy) is type(err)
        assert str(copy) == str(err)
        assert (copy.stream, copy.consumer) == (err.stream, err.consumer)
