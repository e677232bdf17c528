"""An encrypted TLS client key (one with a passphrase) is refused, never asked for by OpenSSL.

``load_cert_chain`` without a ``password`` lets OpenSSL ask for the
passphrase itself: "Enter PEM pass phrase:" on the terminal, reading standard
input, which blocked on a pipe (a command's data, a scheduler's open pipe),
and in a Spark worker (input ``/dev/null``) failed with ``[Errno 22] Invalid
argument``, which says nothing of a passphrase. The Spark options refuse such
a key with ``InvalidOptionError`` naming the option; the command line asks
for the passphrase itself, on a terminal only. Run in fresh processes with no
controlling terminal and an open, silent pipe as input, bounded: a regression
fails here instead of waiting for a passphrase.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import aiojetstream
from aiojetstream import InvalidOptionError
from aiojetstream.cli._common import CliError, Options
from aiojetstream.spark._options import parse_kv_options
from credentials import CertificateAuthority, ServerCertificate, encrypted_client_certificate

SRC = Path(aiojetstream.__file__).resolve().parents[1]
BOUND = 60.0  # seconds, for a fresh interpreter on a loaded machine
PASSPHRASE = "pass-phrase-9f2c"

_SPARK = """
import sys
from aiojetstream.spark._options import parse_kv_options
options = {"bucket": "B", "tlsCertFile": sys.argv[1]}
if len(sys.argv) > 2:
    options["tlsKeyFile"] = sys.argv[2]
try:
    parse_kv_options(options).connect.connect_kwargs()
except Exception as exc:
    print(f"{type(exc).__name__}: {exc}")
else:
    print("loaded")
"""


@pytest.fixture(scope="module")
def encrypted(tmp_path_factory: pytest.TempPathFactory) -> ServerCertificate:
    return encrypted_client_certificate(tmp_path_factory.mktemp("encrypted"), PASSPHRASE)


def _run(args: list[str], *, silent_pipe: bool) -> subprocess.CompletedProcess[str]:
    """``python args`` without a terminal, its input an open pipe nobody writes (or /dev/null)."""
    read, write = os.pipe()
    try:
        return subprocess.run(
            [sys.executable, *args],
            stdin=read if silent_pipe else subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=BOUND,
            start_new_session=True,  # no controlling terminal: OpenSSL cannot open /dev/tty
            env={**os.environ, "PYTHONPATH": str(SRC)},
        )
    finally:
        os.close(read)
        os.close(write)


@pytest.mark.parametrize("silent_pipe", [True, False], ids=["open-pipe", "dev-null"])
def test_spark_refuses_an_encrypted_key(encrypted: ServerCertificate, silent_pipe: bool) -> None:
    run = _run(
        ["-c", _SPARK, str(encrypted.cert_file), str(encrypted.key_file)], silent_pipe=silent_pipe
    )
    assert run.stdout.startswith(
        f"InvalidOptionError: option 'tlsKeyFile': the private key in {str(encrypted.key_file)!r}"
        " is encrypted (it has a passphrase)"
    ), run.stdout + run.stderr
    assert "pass phrase" not in run.stderr.lower()


def test_spark_names_tls_cert_file_when_the_key_is_in_it(
    encrypted: ServerCertificate, tmp_path: Path
) -> None:
    both = tmp_path / "both.pem"
    both.write_bytes(encrypted.cert_file.read_bytes() + encrypted.key_file.read_bytes())
    run = _run(["-c", _SPARK, str(both)], silent_pipe=True)
    assert run.stdout.startswith("InvalidOptionError: option 'tlsCertFile': the private key in")


def test_spark_loads_a_key_without_passphrase(tmp_path: Path) -> None:
    plain = CertificateAuthority(tmp_path).issue("client", "DNS:client.invalid")
    opts = parse_kv_options(
        {"bucket": "B", "tlsCertFile": str(plain.cert_file), "tlsKeyFile": str(plain.key_file)}
    )
    assert opts.connect.connect_kwargs()["tls"] is not None


def test_spark_session_raises_the_error_as_it_is(encrypted: ServerCertificate) -> None:
    """Not as ``options 'tlsCaFile' / 'tlsCertFile' / 'tlsKeyFile': ...`` around it."""
    from aiojetstream.spark._runtime import Session

    opts = parse_kv_options(
        {
            "bucket": "B",
            "servers": "nats://127.0.0.1:1",
            "tlsCertFile": str(encrypted.cert_file),
            "tlsKeyFile": str(encrypted.key_file),
        }
    )
    with pytest.raises(InvalidOptionError, match=r"^option 'tlsKeyFile': the private key"):
        Session(opts.connect)


# --------------------------------------------------------------------------- the command line


def test_cli_without_a_terminal_refuses_an_encrypted_key(encrypted: ServerCertificate) -> None:
    run = _run(
        [
            "-m",
            "aiojetstream",
            "--server",
            "nats://127.0.0.1:1",
            "--tls-cert",
            str(encrypted.cert_file),
            "--tls-key",
            str(encrypted.key_file),
            "stream",
            "ls",
        ],
        silent_pipe=True,
    )
    assert run.returncode == 1, run.stderr
    assert run.stderr.strip() == (
        f"error: --tls-key {encrypted.key_file}: the private key is encrypted (it has a "
        "passphrase) and there is no terminal to ask for it: run the command from one, or "
        "store the key decrypted (openssl pkey -in ENCRYPTED.key -out KEY.key), readable "
        "only by you"
    )


def test_cli_asks_for_the_passphrase_on_a_terminal(
    encrypted: ServerCertificate, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list[str] = []

    def getpass(prompt: str) -> str:
        asked.append(prompt)
        return PASSPHRASE

    monkeypatch.setattr("getpass.getpass", getpass)
    monkeypatch.setattr(sys.stdin, "isatty", lambda: True)
    options = Options(tls_cert=encrypted.cert_file, tls_key=encrypted.key_file)
    assert options.connect_kwargs()["tls"] is not None
    assert asked == [f"Passphrase for the private key in {encrypted.key_file}: "]
    # A wrong one: the error of the files, as for any key that does not load.
    monkeypatch.setattr("getpass.getpass", lambda prompt: "wrong")
    with pytest.raises(CliError, match=r"^--tls-cert .*encrypted\.pem, .*encrypted\.key: "):
        options.connect_kwargs()
