"""Secrets in the Spark options, parsed (issue 24): refused where they would show, never quoted.

``servers`` URLs with credentials are refused; ``credsSecret`` (the text of a
.creds file) and ``nkeySecret`` (an NKey seed) are checked before anything
connects, by errors that never quote them; the options' repr leaves every
secret out while equality, hashing and pickling still see them. The real
servers, and every place Spark could show a secret, are in
tests/spark/test_spark_secrets.py.
"""

from __future__ import annotations

import importlib.util
import pickle
import uuid
from collections import UserString
from collections.abc import Callable
from importlib.machinery import ModuleSpec
from pathlib import Path
from typing import Any

import nkeys  # type: ignore[import-untyped]  # no type hints
import pytest
from nats.aio.client import Client
from pyspark import cloudpickle

from aiojetstream import InvalidOptionError
from aiojetstream.spark._options import (
    ConnectOptions,
    KVOptions,
    SinkOptions,
    SourceOptions,
    parse_kv_options,
    parse_sink_options,
    parse_source_options,
)
from credentials import Operator, new_nkey, public_key, seed_text

#: How Spark ships the options to its Python workers.
cloud_dumps: Callable[[object], bytes] = cloudpickle.dumps

# Fixed (not random): it is part of parametrized test ids, which the two pytest-xdist
# workers must collect alike.
SECRET = "pa:ss/w@rd%40x-5f3c9a1e7b2d"
CORE = SECRET[-12:]


def _source(**options: str) -> ConnectOptions:
    return parse_source_options({"stream": "S", **options}, streaming=False).connect


def _refused(what: str, secrets: list[str], **options: str) -> str:
    """The error parsing ``options`` raises: it matches ``what`` and quotes none of ``secrets``."""
    with pytest.raises(InvalidOptionError, match=what) as info:
        _source(**options)
    message = str(info.value)
    for secret in (s for s in secrets if len(s) >= 4):
        assert secret not in message
        if len(secret) > 16:
            middle = len(secret) // 2
            assert secret[middle - 8 : middle + 8] not in message
    return message


@pytest.fixture(scope="module")
def operator(tmp_path_factory: pytest.TempPathFactory) -> Operator:
    return Operator(tmp_path_factory.mktemp("operator"))


@pytest.fixture
def creds_text(operator: Operator) -> str:
    return operator.user_creds(f"u{uuid.uuid4().hex[:8]}").read_text()


def _parts(text: str) -> tuple[str, str]:
    lines = text.splitlines()
    return (
        lines[lines.index("-----BEGIN NATS USER JWT-----") + 1],
        lines[lines.index("-----BEGIN USER NKEY SEED-----") + 1],
    )


# --------------------------------------------------------------------------- servers


@pytest.mark.parametrize(
    "url",
    [
        f"nats://alice:{SECRET}@127.0.0.1:4222",
        f"nats://{SECRET}@127.0.0.1:4222",  # a token
        f"alice:{SECRET}@127.0.0.1:4222",  # no scheme
        f"tls://alice:{SECRET}@[::1]:4443",
        f"ws://alice:{SECRET}@127.0.0.1:8080/path",
        f"nats://alice:{SECRET.replace('@', '%40')}@127.0.0.1:4222",
        "nats://alice@127.0.0.1:4222",  # a user alone
    ],
)
def test_credentials_in_a_servers_url_are_refused(url: str) -> None:
    for servers, position in ((url, "URL 1 of 1"), (f"nats://ok:4222,{url}", "URL 2 of 2")):
        message = _refused("option 'servers'", [SECRET, CORE, servers, url], servers=servers)
        assert f"{position} has credentials in it" in message
        assert "127.0.0.1" not in message  # no part of the URL
        for option in ("'user'", "'password'", "'token'", "'credsSecret'", "'nkeySecret'"):
            assert option in message


def test_a_password_with_a_comma_is_refused_whole() -> None:
    # "a,b" splits the URL in two: the first half has no '@' and still stays out.
    message = _refused(
        "URL 2 of 2 has credentials", ["alice:a", "a,b", "b@h"], servers="nats://alice:a,b@h:1"
    )
    assert "nats://" not in message


@pytest.mark.parametrize(
    ("servers", "entry"),
    [("nats://a:1,", "entry 2 of 2"), (",nats://a:1", "entry 1 of 2"), ("", "entry 1 of 1")],
)
def test_an_empty_servers_entry_is_refused_without_quoting(servers: str, entry: str) -> None:
    message = _refused(f"option 'servers':.* {entry} is empty", ["nats://a:1"], servers=servers)
    assert "got" not in message


def test_servers_are_kept_trimmed() -> None:
    assert _source(servers=" nats://a:1 , tls://b:2 ").servers == "nats://a:1,tls://b:2"
    assert _source().servers == "nats://127.0.0.1:4222"


@pytest.mark.parametrize(
    ("servers", "shown"),
    [
        ("nats://a:4222,nats://b:4222", "nats://a:4222,nats://b:4222"),
        (f"nats://alice:{SECRET}@a:4222,nats://b:4222", "nats://***@a:4222,nats://b:4222"),
        (f"nats://b:4222,nats://{SECRET}@a:4222", "nats://***@a:4222"),
        (f"alice:{SECRET}@a:4222,tls://b:1", "***@a:4222,tls://b:1"),
        ("nats://alice:a,b@a:4222", "nats://***@a:4222"),
    ],
)
def test_describe_never_shows_credentials(servers: str, shown: str) -> None:
    """Options made without the parser (which refuses them) are described safely too."""
    assert ConnectOptions(servers=servers).describe() == shown


# --------------------------------------------------------------------------- nkeySecret


def test_nkey_secret_reaches_nats_py() -> None:
    seed = seed_text(new_nkey(nkeys.PREFIX_BYTE_USER))
    opts = _source(nkeySecret=f"  {seed}\n")
    assert opts.nkey_secret == seed
    kwargs = opts.connect_kwargs()
    assert kwargs["nkeys_seed_str"] == seed
    assert "user_credentials" not in kwargs


def _typo(seed: str) -> str:
    return seed[:20] + ("A" if seed[20] != "A" else "B") + seed[21:]


@pytest.mark.parametrize(
    ("make", "what"),
    [
        (lambda kp: public_key(kp), "a user's public key"),
        (lambda kp: seed_text(new_nkey(nkeys.PREFIX_BYTE_ACCOUNT)), r"an account key \('SA"),
        (lambda kp: seed_text(new_nkey(nkeys.PREFIX_BYTE_OPERATOR)), r"an operator key \('SO"),
        (lambda kp: _typo(seed_text(kp)), "checksum"),
        (lambda kp: seed_text(kp)[:-1], "58 characters"),
        (lambda kp: seed_text(kp).lower(), "58 characters"),
        (lambda kp: "", "58 characters"),
        (lambda kp: f"{seed_text(kp)} {seed_text(kp)}", "58 characters"),
    ],
)
def test_a_bad_nkey_secret_is_refused_without_quoting(
    make: Callable[[Any], str], what: str
) -> None:
    kp = new_nkey(nkeys.PREFIX_BYTE_USER)
    value = make(kp)
    _refused(
        f"option 'nkeySecret': not an NKey user seed: .*{what}",
        [value, seed_text(kp)],
        nkeySecret=value,
    )


def test_the_seed_check_agrees_with_nkeys() -> None:
    """Every one-character change of a seed is refused unless nkeys itself accepts it."""
    seed = seed_text(new_nkey(nkeys.PREFIX_BYTE_USER))
    accepted = 0
    for index in range(2, len(seed)):
        for char in "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567":
            changed = seed[:index] + char + seed[index + 1 :]
            if changed == seed:
                continue
            try:
                _source(nkeySecret=changed)
            except InvalidOptionError:
                continue
            accepted += 1
            nkeys.from_seed(bytearray(changed.encode()))  # nkeys takes it too
    assert accepted <= 3  # only the unused low bits of the last character


# --------------------------------------------------------------------------- credsSecret


def _nats_py_reads(credentials: UserString) -> tuple[str, str]:
    """The JWT and the seed nats-py 2.16 takes from in-memory credentials."""
    client = Client()
    jwt = bytes(client._read_creds_user_jwt(credentials)).decode()  # type: ignore[arg-type]
    seed = bytes(client._read_creds_user_nkey(credentials)).decode()
    return jwt, seed


@pytest.mark.parametrize(
    "form",
    [
        lambda text: text,
        lambda text: text.replace("\n", "\r\n"),
        lambda text: "\n".join("    " + line for line in text.splitlines()),  # indented (YAML)
        lambda text: text.replace("\n", "\\n"),  # line breaks kept escaped by a secret store
        lambda text: text.rstrip("\n"),
    ],
    ids=["as-written", "crlf", "indented", "escaped-newlines", "no-final-newline"],
)
def test_creds_secret_reaches_nats_py(creds_text: str, form: Callable[[str], str]) -> None:
    jwt, seed = _parts(creds_text)
    opts = _source(credsSecret=form(creds_text))
    credentials = opts.connect_kwargs()["user_credentials"]
    assert isinstance(credentials, UserString)  # nats-py reads those as the text
    assert _nats_py_reads(credentials) == (jwt, seed)
    assert seed not in repr(credentials)
    assert "nkeys_seed_str" not in opts.connect_kwargs()


def test_creds_file_path_is_passed_as_it_is(operator: Operator) -> None:
    """The path goes to nats-py as it is (checked first: tests/unit/test_creds_files.py)."""
    path = str(operator.user_creds(f"u{uuid.uuid4().hex[:8]}"))
    assert _source(creds=path).connect_kwargs()["user_credentials"] == path


@pytest.mark.parametrize(
    ("change", "what"),
    [
        (lambda text: "/etc/nats/alice.creds", "expected the text of a .creds file.*'creds'"),
        (lambda text: text.split("-----BEGIN USER NKEY SEED")[0], "expected the text"),
        (lambda text: text.split("************")[1], "expected the text"),  # no JWT block
        (
            lambda text: text.replace(_parts(text)[0], _parts(text)[0].replace(".", "")),
            "is not a JWT",
        ),
        (lambda text: text.replace(_parts(text)[1], _typo(_parts(text)[1])), "checksum"),
        (
            lambda text: text.replace(
                _parts(text)[1], seed_text(new_nkey(nkeys.PREFIX_BYTE_ACCOUNT))
            ),
            "an account key",
        ),
        (lambda text: "", "expected the text"),
    ],
)
def test_a_bad_creds_secret_is_refused_without_quoting(
    creds_text: str, change: Callable[[str], str], what: str
) -> None:
    jwt, seed = _parts(creds_text)
    value = change(creds_text)
    _refused(f"option 'credsSecret': .*{what}", [jwt, seed, value[20:60] or jwt], credsSecret=value)


def test_secrets_that_exclude_each_other(creds_text: str) -> None:
    seed = seed_text(new_nkey(nkeys.PREFIX_BYTE_USER))
    jwt, creds_seed = _parts(creds_text)
    secrets = [seed, jwt, creds_seed]
    _refused(
        "'creds' and 'credsSecret' exclude each other",
        secrets,
        creds="/c.creds",
        credsSecret=creds_text,
    )
    _refused("'nkeySecret' cannot go with", secrets, creds="/c.creds", nkeySecret=seed)
    _refused("'nkeySecret' cannot go with", secrets, credsSecret=creds_text, nkeySecret=seed)


def test_nkey_options_need_the_nkeys_package(
    monkeypatch: pytest.MonkeyPatch, creds_text: str
) -> None:
    real = importlib.util.find_spec

    def find_spec(name: str, package: str | None = None) -> ModuleSpec | None:
        return None if name == "nkeys" else real(name, package)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    seed = seed_text(new_nkey(nkeys.PREFIX_BYTE_USER))
    for options in ({"nkeySecret": seed}, {"credsSecret": creds_text}, {"creds": "/c.creds"}):
        with pytest.raises(InvalidOptionError, match="needs the Python package 'nkeys'") as info:
            _source(**options)
        assert seed not in str(info.value)
        assert _parts(creds_text)[1] not in str(info.value)


# --------------------------------------------------------------------------- repr, equality


def test_repr_leaves_secrets_out_and_equality_keeps_them(creds_text: str, tmp_path: Path) -> None:
    seed = seed_text(new_nkey(nkeys.PREFIX_BYTE_USER))
    jwt, creds_seed = _parts(creds_text)
    base = {"servers": "nats://a:1", "user": "alice", "password": SECRET, "token": SECRET + "t"}
    parsed: list[SourceOptions | SinkOptions | KVOptions] = [
        parse_source_options({**base, "stream": "S", "nkeySecret": seed}, streaming=True),
        parse_sink_options({**base, "credsSecret": creds_text}),
        parse_kv_options({**base, "bucket": "B", "nkeySecret": seed}),
    ]
    for opts in parsed:
        for text in (repr(opts), str(opts), repr(opts.connect)):
            for secret in (SECRET, CORE, seed, jwt, creds_seed):
                assert secret not in text
            assert "user='alice'" in text
            assert "servers='nats://a:1'" in text
        # Pickled to executors (by cloudpickle) and used as dict keys (the connection cache).
        for copy in (pickle.loads(pickle.dumps(opts)), pickle.loads(cloud_dumps(opts))):
            assert copy == opts
            assert hash(copy) == hash(opts)
            assert {copy: 1}[opts] == 1
        assert opts.connect.password == SECRET
    one = _source(nkeySecret=seed)
    other = _source(nkeySecret=seed_text(new_nkey(nkeys.PREFIX_BYTE_USER)))
    assert one != other  # the secret counts for equality though not shown
    assert repr(one) == repr(other)
    assert _source(password="a", user="u") != _source(password="b", user="u")
