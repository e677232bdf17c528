"""The exception tree and the single err_code registry."""

from __future__ import annotations

import pickle

import pytest

import aiojetstream
from aiojetstream import (
    APIError,
    ConsumerExistsError,
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
