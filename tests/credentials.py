"""Test credentials made at test time, offline: TLS certificates, nkeys, JWTs, creds files.

* :class:`CertificateAuthority` runs ``openssl`` (OpenSSL 3) to make a CA and
  server certificates signed by it, with the subject alternative names a test
  asks for (``IP:127.0.0.1`` for a valid one, a DNS name only for a hostname
  mismatch); :func:`encrypted_client_certificate` a certificate whose key has
  a passphrase.
* :func:`new_nkey` makes an nkey seed of a role (operator, account, user).
* :class:`Operator` issues the operator, account and user JWTs of a
  decentralised-auth server (``operator`` plus a ``MEMORY`` resolver) and
  writes ``.creds`` files, signing with the ``nkeys`` package the way
  ``nsc`` and the Go ``jwt`` library do (ed25519 over
  ``base64url(header).base64url(claims)``).

Import as ``from credentials import CertificateAuthority`` (the tests directory
is on ``sys.path``).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nkeys  # type: ignore[import-untyped]  # no type hints

__all__ = [
    "CertificateAuthority",
    "Operator",
    "ServerCertificate",
    "encrypted_client_certificate",
    "new_nkey",
]

OPENSSL = "/usr/bin/openssl"


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(
        [OPENSSL, *args], cwd=cwd, check=True, capture_output=True, timeout=60, text=True
    )


@dataclass(frozen=True)
class ServerCertificate:
    """A server certificate and its key (PEM files)."""

    cert_file: Path
    key_file: Path


class CertificateAuthority:
    """A throw-away certificate authority in ``directory`` (EC P-256 keys, 1 day).

    Args:
        directory: where the PEM files go (a pytest ``tmp_path``).
        name: the CA's common name, also its file name prefix.

    """

    def __init__(self, directory: Path, name: str = "ca") -> None:
        self.directory = directory
        self.cert_file = directory / f"{name}.pem"
        self.key_file = directory / f"{name}.key"
        _openssl(
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            str(self.key_file),
            "-out",
            str(self.cert_file),
            "-days",
            "1",
            "-subj",
            f"/CN=aiojetstream test {name}",
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
            cwd=directory,
        )

    def issue(self, name: str, alt_names: str) -> ServerCertificate:
        """A server certificate signed by this CA.

        Args:
            name: the file name prefix and common name.
            alt_names: the subjectAltName value, e.g. ``"IP:127.0.0.1"`` or
                ``"DNS:elsewhere.invalid"``.

        """
        key = self.directory / f"{name}.key"
        csr = self.directory / f"{name}.csr"
        cert = self.directory / f"{name}.pem"
        ext = self.directory / f"{name}.ext"
        ext.write_text(
            f"subjectAltName={alt_names}\n"
            "extendedKeyUsage=serverAuth\n"
            "keyUsage=critical,digitalSignature,keyEncipherment\n"
        )
        _openssl(
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            str(key),
            "-out",
            str(csr),
            "-subj",
            f"/CN={name}",
            cwd=self.directory,
        )
        _openssl(
            "x509",
            "-req",
            "-in",
            str(csr),
            "-CA",
            str(self.cert_file),
            "-CAkey",
            str(self.key_file),
            "-CAcreateserial",
            "-out",
            str(cert),
            "-days",
            "1",
            "-extfile",
            str(ext),
            cwd=self.directory,
        )
        return ServerCertificate(cert, key)


def encrypted_client_certificate(directory: Path, passphrase: str) -> ServerCertificate:
    """A self-signed client certificate whose key is encrypted with ``passphrase`` (PKCS#8)."""
    key = directory / "encrypted.key"
    cert = directory / "encrypted.pem"
    _openssl(
        "req",
        "-x509",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-passout",
        f"pass:{passphrase}",
        "-keyout",
        str(key),
        "-out",
        str(cert),
        "-days",
        "1",
        "-subj",
        "/CN=aiojetstream test client",
        cwd=directory,
    )
    return ServerCertificate(cert, key)


# --------------------------------------------------------------------------- nkeys and JWTs


def new_nkey(role: int) -> nkeys.KeyPair:
    """A new nkey pair of a role: ``nkeys.PREFIX_BYTE_OPERATOR``, ``_ACCOUNT`` or ``_USER``."""
    return nkeys.from_seed(nkeys.encode_seed(os.urandom(32), role))


def public_key(kp: nkeys.KeyPair) -> str:
    """The public key (``O...``, ``A...``, ``U...``) of an nkey pair, as text."""
    key: bytes = kp.public_key
    return key.decode()


def seed_text(kp: nkeys.KeyPair) -> str:
    """The seed (``SO...``, ``SA...``, ``SU...``) of an nkey pair, as text."""
    seed: bytes = kp.seed
    return seed.decode()


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def encode_jwt(claims: dict[str, Any], issuer: nkeys.KeyPair) -> str:
    """Sign ``claims`` as a NATS JWT (``ed25519-nkey``), filling in ``iss``, ``iat`` and ``jti``."""
    body = dict(claims)
    body["iss"] = public_key(issuer)
    body["iat"] = int(time.time())
    body["jti"] = ""
    digest = hashlib.new("sha512_256", json.dumps(body, sort_keys=True).encode()).digest()
    body["jti"] = base64.b32encode(digest).decode().rstrip("=")
    header = _b64(json.dumps({"typ": "JWT", "alg": "ed25519-nkey"}).encode())
    payload = _b64(json.dumps(body).encode())
    signature: bytes = issuer.sign(f"{header}.{payload}".encode())
    return f"{header}.{payload}.{_b64(signature)}"


class Operator:
    """An operator with a JetStream-enabled account and a system account (decentralised auth).

    :meth:`server_config` is the ``NatsServer(config=...)`` mapping (the
    operator JWT in a file, a ``MEMORY`` resolver preloaded with the account);
    :meth:`user_creds` writes a ``.creds`` file for a new user of the account.
    """

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.operator = new_nkey(nkeys.PREFIX_BYTE_OPERATOR)
        self.account = new_nkey(nkeys.PREFIX_BYTE_ACCOUNT)
        operator_pub = public_key(self.operator)
        self.operator_jwt = encode_jwt(
            {
                "sub": operator_pub,
                "name": "test-operator",
                "nats": {"type": "operator", "version": 2},
            },
            self.operator,
        )
        self.account_jwt = encode_jwt(
            {
                "sub": public_key(self.account),
                "name": "test-account",
                "nats": {
                    "type": "account",
                    "version": 2,
                    "limits": {
                        "subs": -1,
                        "data": -1,
                        "payload": -1,
                        "imports": -1,
                        "exports": -1,
                        "wildcards": True,
                        "conn": -1,
                        "leaf": -1,
                        "mem_storage": -1,
                        "disk_storage": -1,
                        "streams": -1,
                        "consumer": -1,
                    },
                },
            },
            self.operator,
        )
        # JetStream in operator mode needs a system account.
        self.system = new_nkey(nkeys.PREFIX_BYTE_ACCOUNT)
        self.system_jwt = encode_jwt(
            {
                "sub": public_key(self.system),
                "name": "SYS",
                "nats": {"type": "account", "version": 2},
            },
            self.operator,
        )
        self.operator_file = directory / "operator.jwt"
        self.operator_file.write_text(self.operator_jwt)

    def server_config(self) -> dict[str, Any]:
        """The server settings of decentralised auth with this operator and account."""
        return {
            "operator": str(self.operator_file),
            "resolver": "MEMORY",
            "system_account": public_key(self.system),
            "resolver_preload": {
                public_key(self.account): self.account_jwt,
                public_key(self.system): self.system_jwt,
            },
        }

    def user_creds(
        self,
        name: str,
        *,
        signer: nkeys.KeyPair | None = None,
        expires: int | None = None,
        user: nkeys.KeyPair | None = None,
    ) -> Path:
        """Write ``<name>.creds`` for a user of the account (signed by ``signer``).

        ``signer`` defaults to the account; another key makes a user the
        server does not trust. ``expires`` is the JWT's ``exp`` (Unix seconds).
        ``user`` is the user's key pair (default: a new user); given again, the
        file is rewritten with a new JWT for the same user (a rotation).
        """
        user = user or new_nkey(nkeys.PREFIX_BYTE_USER)
        expiry = {} if expires is None else {"exp": expires}
        user_jwt = encode_jwt(
            {
                "sub": public_key(user),
                "name": name,
                **expiry,
                "nats": {
                    "type": "user",
                    "version": 2,
                    "pub": {},
                    "sub": {},
                    "subs": -1,
                    "data": -1,
                    "payload": -1,
                },
            },
            signer or self.account,
        )
        path = self.directory / f"{name}.creds"
        path.write_text(
            "-----BEGIN NATS USER JWT-----\n"
            f"{user_jwt}\n"
            "------END NATS USER JWT------\n\n"
            "************************* IMPORTANT *************************\n"
            "NKEY Seed printed below can be used to sign and prove identity.\n\n"
            "-----BEGIN USER NKEY SEED-----\n"
            f"{seed_text(user)}\n"
            "------END USER NKEY SEED------\n"
        )
        path.chmod(0o600)
        return path
