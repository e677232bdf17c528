"""Telemetry is opt-in: nothing loads OpenTelemetry unless it is turned on (issue 28)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap


def otel_modules_after(code: str) -> list[str]:
    script = textwrap.dedent(
        f"""
        import json, sys
        {code}
        print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] == "opentelemetry")))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60
    )
    modules: list[str] = json.loads(done.stdout.strip().splitlines()[-1])
    return modules


def test_importing_the_package_never_loads_opentelemetry() -> None:
    code = (
        "import aiojetstream\n"
        "        from aiojetstream import connect, StreamConfig, ConsumerConfig, Msg\n"
        "        import aiojetstream._context, aiojetstream._consumer, aiojetstream._publish"
    )
    assert otel_modules_after(code) == []


def test_the_otel_module_loads_it() -> None:
    assert "opentelemetry.trace" in otel_modules_after("import aiojetstream.otel")
