"""The forms of a server URL: what connects, and what is refused before dialing, saying why.

nats-py prefixes ``nats://`` to any URL without ``nats://``, ``tls://``,
``ws://`` or ``wss://`` in it: ``http://127.0.0.1:4222`` (the monitoring
port's form) and the typo ``nats:/127.0.0.1:4222`` became the host ``http``
or ``nats`` and failed with a false DNS error.
"""

from __future__ import annotations

import pytest

import aiojetstream
from aiojetstream import InvalidOptionError
from aiojetstream.testing import NatsServer


def _port(server: NatsServer) -> int:
    return int(server.url.rsplit(":", 1)[1])


@pytest.mark.parametrize(
    ("form", "refusal"),
    [
        ("http://127.0.0.1:{port}", "unsupported URL scheme 'http' in http://127.0.0.1:"),
        ("https://127.0.0.1:{port}", "unsupported URL scheme 'https' in https://127.0.0.1:"),
        ("nats:/127.0.0.1:{port}", "malformed server URL in nats:/127.0.0.1:.*nats://host:port"),
        ("tls:///127.0.0.1:{port}", "malformed server URL in tls:///127.0.0.1:.*tls://host:port"),
    ],
)
async def test_another_scheme_is_refused_naming_the_accepted_ones(
    nats_server: NatsServer, form: str, refusal: str
) -> None:
    url = form.format(port=_port(nats_server))
    with pytest.raises(InvalidOptionError, match=refusal) as info:
        await aiojetstream.connect(url)
    if "unsupported" in refusal:
        assert "nats://, tls://, ws:// or wss://" in str(info.value)


async def test_a_refused_url_shows_no_credentials(nats_server: NatsServer) -> None:
    port = _port(nats_server)
    for url in (f"http://bob:s3cret-pw@127.0.0.1:{port}", f"t0k3n://rest@127.0.0.1:{port}"):
        with pytest.raises(InvalidOptionError, match="unsupported URL scheme") as info:
            await aiojetstream.connect(["nats://127.0.0.1:1", url])
        text = str(info.value)
        for secret in ("bob", "s3cret-pw", "t0k3n", "rest"):
            assert secret not in text, text
        assert f"***@127.0.0.1:{port}" in text


@pytest.mark.parametrize(
    "form", ["127.0.0.1:{port}", "nats://127.0.0.1:{port}", "NATS://127.0.0.1:{port}"]
)
async def test_the_accepted_forms_connect(nats_server: NatsServer, form: str) -> None:
    """``host:port`` is nats://; a scheme in capitals is the scheme (nats-py read it as a host)."""
    async with await aiojetstream.connect(form.format(port=_port(nats_server))) as js:
        assert await js.api_level() >= 1


async def test_a_websocket_url_without_aiohttp_says_to_install_it(
    nats_server: NatsServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Was a ConnectionFailedError after two attempts, quoting nats-py's ImportError."""
    from nats.aio import transport

    monkeypatch.setattr(transport, "aiohttp", None)
    with pytest.raises(InvalidOptionError, match=r"need aiohttp.*pip install aiohttp"):
        await aiojetstream.connect(f"ws://127.0.0.1:{_port(nats_server)}")
