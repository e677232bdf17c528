"""What an install without an extra says: the extra to install, and nothing left open.

The development environment has every extra; its absence is simulated by a
``None`` entry in ``sys.modules`` (what ``import`` then refuses).
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

import aiojetstream
from aiojetstream import InvalidOptionError
from aiojetstream.testing import NatsServer
from helpers import unique_name, wait_until


def _unload(monkeypatch: pytest.MonkeyPatch, package: str) -> None:
    """Forget ``package`` and its submodules for this test (imported again when asked for)."""
    for name in list(sys.modules):
        if name == package or name.startswith(package + "."):
            monkeypatch.delitem(sys.modules, name)


def _without(monkeypatch: pytest.MonkeyPatch, package: str, *users: str) -> None:
    """Make ``package`` unimportable for this test, and ``users`` load again without it."""
    for name in (package, *users):
        _unload(monkeypatch, name)
    monkeypatch.setitem(sys.modules, package, None)


async def _connections_named(server: NatsServer, name: str) -> list[Any]:
    connz = await server.monitor("connz")
    return [c for c in connz.get("connections") or () if c.get("name") == name]


async def test_telemetry_without_otel_is_refused_before_connecting(
    nats_server: NatsServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    _without(monkeypatch, "opentelemetry", "aiojetstream.otel")
    name = unique_name("telemetry")
    with pytest.raises(InvalidOptionError, match=r"pip install 'aiojetstream\[otel\]'") as info:
        await aiojetstream.connect(nats_server.url, telemetry=True, name=name)
    assert isinstance(info.value.__cause__, ModuleNotFoundError)
    # Refused before connecting: no connection the caller could not close.
    assert await _connections_named(nats_server, name) == []


async def test_telemetry_failing_to_instrument_closes_the_connection(
    nats_server: NatsServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    import aiojetstream.otel

    def broken(js: object) -> object:
        raise RuntimeError("instrumenting failed")

    monkeypatch.setattr(aiojetstream.otel, "instrument", broken)
    name = unique_name("telemetry")
    with pytest.raises(RuntimeError, match="instrumenting failed"):
        await aiojetstream.connect(nats_server.url, telemetry=True, name=name)

    async def gone() -> bool:
        return await _connections_named(nats_server, name) == []

    await wait_until(gone, message=f"the connection {name} closed")


def _import_error(module: str, blocked: str) -> dict[str, Any]:
    """What ``import module`` raises in a Python where ``blocked`` is not installed."""
    code = (
        f"import json, sys; sys.modules[{blocked!r}] = None\n"
        "try:\n"
        f"    import {module}\n"
        "except ImportError as exc:\n"
        "    print(json.dumps({'type': type(exc).__name__, 'name': exc.name, 'text': str(exc),"
        " 'cause': type(exc.__cause__).__name__}))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    found: dict[str, Any] = json.loads(result.stdout)
    return found


@pytest.mark.parametrize(
    ("module", "blocked", "extra"),
    [
        ("aiojetstream.otel", "opentelemetry", "otel"),
        ("aiojetstream.spark", "pyarrow", "spark"),
        ("aiojetstream.spark", "pyspark", "spark"),
    ],
)
def test_a_module_without_its_extra_names_the_extra(module: str, blocked: str, extra: str) -> None:
    error = _import_error(module, blocked)
    # Still a ModuleNotFoundError for the missing module: existing handlers keep working.
    assert error["type"] == "ModuleNotFoundError"
    assert error["name"].partition(".")[0] == blocked  # ("pyspark.sql" when pyspark is None)
    assert error["cause"] == "ModuleNotFoundError"
    assert error["text"].startswith(f"{module} needs the {extra!r} extra")
    assert f"pip install 'aiojetstream[{extra}]'" in error["text"]


def test_the_spark_registration_without_the_extra_names_it() -> None:
    """``pyspark_jetstream`` still defines the format, which says what to install when used."""
    code = (
        "import json, pickle, sys; sys.modules['pyarrow'] = None\n"
        "import pyspark_jetstream, pyspark_jetstream_kv\n"
        "from pyspark import cloudpickle\n"
        "found = {}\n"
        "for module in (pyspark_jetstream, pyspark_jetstream_kv):\n"
        "    source = module.DefaultSource\n"
        "    assert pickle.loads(cloudpickle.dumps(source)) is source  # by reference\n"
        "    try:\n"
        "        source(options={})\n"
        "    except ModuleNotFoundError as exc:\n"
        "        found[source.name()] = str(exc)\n"
        "print(json.dumps(found))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    found = json.loads(result.stdout)
    assert sorted(found) == ["jetstream", "jetstream_kv"]
    for name, text in found.items():
        assert text.startswith(f"format({name!r}) is not available"), text
        assert "pip install 'aiojetstream[spark]'" in text
