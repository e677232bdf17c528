"""Credential files checked before connecting (``aiojetstream/_creds.py``) and Spark's copy.

nats-py reads a .creds file only once a server asks for a signature, inside
the event loop: without a ``BEGIN NATS USER JWT`` line it spun forever, and
without a seed block it raised a ``TypeError``. The check reads the file as
nats-py does: what it accepts is exactly what nats-py reads as a JWT and a
user seed (a property tested against nats-py's own reader), and its errors
name the file, never its content. The Spark extension (public API only) keeps
a copy of the check: the two must agree. The same against real servers, with
a bound on the time: tests/integration/test_security.py.
"""

from __future__ import annotations

import re
import uuid
from pathlib import Path

import nkeys  # type: ignore[import-untyped]  # no type hints
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from nats.aio.client import Client, RawCredentials

from aiojetstream import InvalidOptionError
from aiojetstream._creds import (
    JWT_MARKER,
    MAX_CREDS_BYTES,
    SEED_MARKER,
    check_credentials,
    creds_problem,
    seed_problem,
)
from aiojetstream.spark import _credentials as spark_credentials
from aiojetstream.spark._options import parse_source_options
from credentials import Operator, new_nkey, seed_text

_JWT_RE = re.compile(r"[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+")

USER_SEED = seed_text(new_nkey(nkeys.PREFIX_BYTE_USER))
ACCOUNT_SEED = seed_text(new_nkey(nkeys.PREFIX_BYTE_ACCOUNT))
TYPO_SEED = USER_SEED[:10] + ("A" if USER_SEED[10] != "A" else "B") + USER_SEED[11:]
JWT = "eyJ0eXAiOiJKV1QifQ.eyJzdWIiOiJVQUJDIn0.c2lnbmF0dXJl"


@pytest.fixture(scope="module")
def operator(tmp_path_factory: pytest.TempPathFactory) -> Operator:
    return Operator(tmp_path_factory.mktemp("operator"))


@pytest.fixture
def creds_file(operator: Operator) -> Path:
    return operator.user_creds(f"u{uuid.uuid4().hex[:8]}")


def _parts(text: str) -> tuple[str, str]:
    lines = text.splitlines()
    return lines[lines.index(JWT_MARKER) + 1], lines[lines.index(SEED_MARKER) + 1]


def _nats_py_reads(text: str) -> tuple[str, str] | None:
    """The JWT and seed nats-py 2.16 reads from ``text``; None where it fails (never hangs)."""
    if "BEGIN NATS USER JWT" not in text:
        return None  # nats-py's reader would loop forever
    client = Client()
    credentials = RawCredentials(text)
    try:
        jwt = bytes(client._read_creds_user_jwt(credentials)).decode()
        seed = bytes(client._read_creds_user_nkey(credentials)).decode()
        nkeys.from_seed(bytearray(seed.encode()))
    except Exception:
        return None
    return jwt, seed


def _nats_py_takes(text: str, jwt: str = "", seed: str = "") -> bool:
    """Whether nats-py reads a whole JWT and a whole user seed from ``text``.

    ``jwt`` and ``seed``: the ones in it (by default, the generated ones); one
    character short of them is a JWT and a seed no longer.
    """
    read = _nats_py_reads(text)
    if read is None:
        return False
    return read == (jwt or JWT, seed or USER_SEED) and bool(_JWT_RE.fullmatch(read[0]))


_PIECES = st.sampled_from(
    [
        JWT_MARKER,
        JWT,
        "------END NATS USER JWT------",
        SEED_MARKER,
        USER_SEED,
        ACCOUNT_SEED,
        TYPO_SEED,
        "------END USER NKEY SEED------",
        "************************* IMPORTANT *************************",
        "",
        "  " + JWT,
        JWT + " ",
    ]
)


@settings(max_examples=400, deadline=None)
@given(
    pieces=st.lists(_PIECES, max_size=9),
    newline=st.sampled_from(["\n", "\r\n"]),
    final=st.booleans(),
)
def test_the_check_accepts_exactly_what_nats_py_reads(
    pieces: list[str], newline: str, final: bool
) -> None:
    text = newline.join(pieces) + (newline if final else "")
    problem = creds_problem(text)
    assert (problem is None) == _nats_py_takes(text), problem
    assert spark_credentials.creds_problem(text) == problem  # the Spark copy agrees
    if problem is not None:
        for secret in (USER_SEED, ACCOUNT_SEED, TYPO_SEED, JWT):
            assert secret not in problem


def test_the_layout_nsc_writes_is_accepted(creds_file: Path) -> None:
    text = creds_file.read_text()
    assert creds_problem(text) is None
    assert _nats_py_takes(text, *_parts(text))
    check_credentials({"user_credentials": str(creds_file)})
    check_credentials({"user_credentials": creds_file})
    check_credentials({"user_credentials": RawCredentials(text)})
    spark_credentials.check_creds_file(str(creds_file))


@given(st.text(alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", min_size=56, max_size=58))
def test_the_seed_checks_agree(text: str) -> None:
    for seed in (text, "S" + text[1:], "SU" + text[2:]):
        assert spark_credentials.seed_problem(seed) == seed_problem(seed)


# --------------------------------------------------------------------------- the core


def _malformed(creds_text: str) -> dict[str, str]:
    jwt, seed = _parts(creds_text)
    jwt_block = creds_text.split("*" * 25, 1)[0]
    return {
        "empty": "",
        "a bare seed": seed + "\n",
        "the seed block alone": f"{SEED_MARKER}\n{seed}\n------END USER NKEY SEED------\n",
        "the JWT block alone": jwt_block,
        "crlf": creds_text.replace("\n", "\r\n"),
        "no line break after the seed": creds_text.split("\n------END USER NKEY SEED")[0],
        "an account seed": creds_text.replace(seed, ACCOUNT_SEED),
        "a typo in the seed": creds_text.replace(
            seed, seed[:10] + ("A" if seed[10] != "A" else "B") + seed[11:]
        ),
        "no JWT": creds_text.replace(jwt, "not-a-jwt"),
    }


MALFORMED = [
    ("empty", "it is empty"),
    ("a bare seed", f"no '{JWT_MARKER}' and no '{SEED_MARKER}' line"),
    ("the seed block alone", f"no '{JWT_MARKER}' line"),
    ("the JWT block alone", f"no '{SEED_MARKER}' line"),
    ("crlf", "Windows line breaks"),
    ("no line break after the seed", "the seed's line does not end with a line break"),
    ("an account seed", "not an NKey user seed: it is the seed of an account key"),
    ("a typo in the seed", "not an NKey user seed: (its checksum|expected)"),
    ("no JWT", f"the line after '{JWT_MARKER}' is not a JWT"),
]


@pytest.mark.parametrize(("case", "what"), MALFORMED)
def test_a_malformed_creds_file_is_refused_naming_it(
    creds_file: Path, tmp_path: Path, case: str, what: str
) -> None:
    jwt, seed = _parts(creds_file.read_text())
    text = _malformed(creds_file.read_text())[case]
    bad = tmp_path / "bad.creds"
    bad.write_bytes(text.encode())
    with pytest.raises(InvalidOptionError, match=f"^.creds file '{bad}': .*{what}") as info:
        check_credentials({"user_credentials": str(bad)})
    for secret in (seed, jwt, ACCOUNT_SEED, seed[:20], seed[-20:]):
        assert secret not in str(info.value)
    assert info.value.__cause__ is None
    assert info.value.__context__ is None
    with pytest.raises(InvalidOptionError, match=f"^user_credentials \\(the text .*{what}"):
        check_credentials({"user_credentials": RawCredentials(text)})
    # Spark's option 'creds': the same check, naming the option.
    with pytest.raises(InvalidOptionError, match=f"^option 'creds': the .creds file .*{what}"):
        spark_credentials.check_creds_file(str(bad))


def test_a_file_that_cannot_be_read_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere.creds"
    cases: list[tuple[dict[str, object], str]] = [
        ({"user_credentials": str(missing)}, f".creds file '{missing}' cannot be read"),
        ({"user_credentials": missing}, f".creds file '{missing}' cannot be read"),
        ({"user_credentials": str(tmp_path)}, f".creds file '{tmp_path}' cannot be read"),
        (
            {"user_credentials": (str(missing), str(missing))},
            f"user JWT file '{missing}' cannot be read",
        ),
        ({"nkeys_seed": str(missing)}, f"NKey seed file '{missing}' cannot be read"),
    ]
    for options, what in cases:
        with pytest.raises(InvalidOptionError, match=re.escape(what)):
            check_credentials(options)
    with pytest.raises(InvalidOptionError, match=r"option 'creds'.*cannot be read on .*every node"):
        spark_credentials.check_creds_file(str(missing))


def test_a_large_file_is_no_creds_file(tmp_path: Path) -> None:
    big = tmp_path / "big.creds"
    big.write_bytes(b"x" * (MAX_CREDS_BYTES + 1))
    with pytest.raises(InvalidOptionError, match=r"over 64 KiB: not a \.creds file"):
        check_credentials({"user_credentials": str(big)})


def test_a_creds_text_given_as_a_path_is_not_quoted(creds_file: Path) -> None:
    text = creds_file.read_text()
    for value in (text, _parts(text)[1]):
        with pytest.raises(InvalidOptionError, match="this is no path") as info:
            check_credentials({"user_credentials": value})
        assert _parts(text)[1] not in str(info.value)


def test_no_credentials_nothing_to_check() -> None:
    check_credentials({})
    check_credentials({"user_credentials": None, "nkeys_seed_str": USER_SEED})
    check_credentials({"user_credentials": None, "nkeys_seed_str": f"  {USER_SEED}\n"})


def test_a_malformed_nkey_seed_is_refused_without_quoting_it(tmp_path: Path) -> None:
    """``nkeys_seed_str`` and an ``nkeys_seed`` file's content are checked as nats-py
    reads them (stripped): nats-py raised an untyped ``nkeys.ErrInvalidSeed``."""
    seed_file = tmp_path / "user.nk"
    for bad, what in (
        (USER_SEED[:20], "expected 58 characters"),
        (TYPO_SEED, "checksum does not match"),
        (ACCOUNT_SEED, "seed of an account key"),
        ("not a seed at all", "expected 58 characters"),
    ):
        with pytest.raises(InvalidOptionError, match=f"^nkeys_seed_str is not .*{what}") as info:
            check_credentials({"nkeys_seed_str": bad})
        assert bad not in str(info.value)
        seed_file.write_text(bad + "\n")
        with pytest.raises(InvalidOptionError, match=f"holds no NKey user seed: .*{what}") as info:
            check_credentials({"nkeys_seed": str(seed_file)})
        assert str(info.value).startswith(f"NKey seed file {str(seed_file)!r}")
        assert bad not in str(info.value)
    seed_file.write_text(USER_SEED + "\n")
    check_credentials({"nkeys_seed": str(seed_file)})
    # nats-py signs with the .creds file, or nkeys_seed_str, when given: not with the file.
    seed_file.write_text("garbage")
    check_credentials({"nkeys_seed": str(seed_file), "nkeys_seed_str": USER_SEED})


# --------------------------------------------------------------------------- Spark


def test_spark_checks_the_creds_file_where_it_connects(creds_file: Path, tmp_path: Path) -> None:
    """Parsing reads no file; the connection's kwargs (driver, executors) do."""
    opts = parse_source_options({"stream": "S", "creds": str(creds_file)}, streaming=False)
    assert opts.connect.connect_kwargs()["user_credentials"] == str(creds_file)
    bad = tmp_path / "seedonly.creds"
    bad.write_text(f"{SEED_MARKER}\n{USER_SEED}\n------END USER NKEY SEED------\n")
    opts = parse_source_options({"stream": "S", "creds": str(bad)}, streaming=False)
    with pytest.raises(InvalidOptionError, match=f"^option 'creds': .*no '{JWT_MARKER}'") as info:
        opts.connect.connect_kwargs()
    assert USER_SEED not in str(info.value)


def test_a_spark_session_raises_the_creds_error_as_it_is(tmp_path: Path) -> None:
    """Not wrapped as an error of the TLS options (which the session did to every ValueError)."""
    from aiojetstream.spark._runtime import Session

    bad = tmp_path / "empty.creds"
    bad.write_text("")
    opts = parse_source_options(
        {"stream": "S", "creds": str(bad), "servers": "nats://127.0.0.1:1"}, streaming=False
    )
    with pytest.raises(InvalidOptionError, match=r"^option 'creds': .*it is empty"):
        Session(opts.connect)
