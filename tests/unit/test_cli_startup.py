"""The command line starts light: ``--version`` and ``--help`` load no command module.

The root (``aiojetstream.cli._app``) knows each command's module and one-line
help (``COMMANDS``) and imports a module when its command is used: the library,
pydantic, nats-py and Rich come with the first command that needs them. These
tests check, in fresh interpreters, what is loaded (never how long it takes:
start-up times are measured by ``benchmarks/run.py``, group ``import``), and
that the root's helps are the commands' own.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

import aiojetstream
from aiojetstream.cli._app import COMMANDS, app, load_command

CLI_DIR = Path(aiojetstream.__file__).parent / "cli"
SRC = CLI_DIR.parents[1]

#: Packages that neither --version nor --help needs (the library's own
#: dependencies, and Rich, which only commands print with).
HEAVY = ("rich", "pydantic", "pydantic_core", "nats", "aiohttp", "pytest")
#: The modules of aiojetstream that --version and --help may load.
ROOT_ONLY = ["aiojetstream", "aiojetstream._version", "aiojetstream.cli", "aiojetstream.cli._app"]


def run_cli(code: str) -> dict[str, Any]:
    """Run ``code`` (it sets ``result``) in a fresh interpreter.

    Returns ``result``, what was printed (stdout and stderr) and the modules
    loaded: aiojetstream's, and which of :data:`HEAVY`.
    """
    script = "\n".join(
        [
            "import contextlib, io, json, sys",
            "from aiojetstream.cli import main",
            "printed = io.StringIO()",
            "with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed):",
            textwrap.indent(textwrap.dedent(code), "    "),
            "print(json.dumps({",
            "    'result': result,",
            "    'printed': printed.getvalue(),",
            "    'aiojetstream': sorted(",
            "        m for m in sys.modules if m.split('.')[0] == 'aiojetstream'",
            "    ),",
            f"    'heavy': sorted({{m.split('.')[0] for m in sys.modules}} & {set(HEAVY)!r}),",
            "}))",
        ]
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
        env={"PYTHONPATH": str(SRC), "COLUMNS": "80", "PATH": "/usr/bin:/bin"},
    )
    found: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return found


@pytest.mark.parametrize("args", [["--version"], ["--help"], ["-h"], []])
def test_version_and_help_load_no_command_module(args: list[str]) -> None:
    found = run_cli(f"result = main({args!r})")
    assert found["heavy"] == []
    assert found["aiojetstream"] == ROOT_ONLY
    if args == ["--version"]:
        assert found["result"] == 0
        assert found["printed"] == f"aiojetstream {aiojetstream.__version__}\n"
    else:  # every command, with its one-line help
        assert found["result"] == (0 if args else 2)  # no arguments: the help, as a usage error
        listed = found["printed"].partition("\nCommands:\n")[2]
        assert [line.split()[0] for line in listed.splitlines()] == list(COMMANDS)
        assert "  stream    Manage streams.\n" in listed


def test_a_command_loads_its_own_module_only() -> None:
    """``stream --help`` loads the stream commands (and their helpers), no other command."""
    found = run_cli("result = main(['stream', '--help'])")
    assert found["result"] == 0
    command_modules = {f"aiojetstream.cli.{entry.module}" for entry in COMMANDS.values()}
    assert command_modules & set(found["aiojetstream"]) == {"aiojetstream.cli._stream"}
    assert "aiojetstream.cli._common" in found["aiojetstream"]


def test_completing_a_command_name_loads_no_command_module() -> None:
    found = run_cli(
        """
        import typer
        from aiojetstream.cli._app import app
        root = typer.main.get_command(app)
        ctx = root.make_context("aiojetstream", [], resilient_parsing=True)
        result = [[item.value, item.help] for item in root.shell_complete(ctx, "co")]
        """
    )
    assert found["result"] == [
        [name, load_command(name).get_short_help_str()] for name in ("consume", "consumer")
    ]
    # Typer itself converts the global options' values with pydantic there.
    assert set(found["heavy"]) <= {"pydantic", "pydantic_core"}
    assert found["aiojetstream"] == ROOT_ONLY


def test_completion_goes_on_into_a_command() -> None:
    root = typer.main.get_command(app)
    ctx = root.make_context("aiojetstream", [], resilient_parsing=True)
    kv = root.get_command(ctx, "kv")  # type: ignore[attr-defined]  # a group
    kv_ctx = kv.make_context("kv", [], parent=ctx, resilient_parsing=True)
    assert [item.value for item in kv.shell_complete(kv_ctx, "p")] == ["put", "purge"]
    options = [item.value for item in root.shell_complete(ctx, "--ti")]
    assert options == ["--timeout"]


@pytest.mark.parametrize("name", list(COMMANDS))
def test_the_root_help_is_the_command_own(name: str) -> None:
    command = load_command(name)
    assert command.name == name
    assert command.get_short_help_str(limit=1000) == COMMANDS[name].help


def test_every_command_module_is_in_the_root() -> None:
    """A module adding commands (a Typer ``app`` or ``register``) is named in ``COMMANDS``."""
    defining: set[str] = set()
    for path in CLI_DIR.glob("_*.py"):
        tree = ast.parse(path.read_text())
        for node in tree.body:
            registers = isinstance(node, ast.FunctionDef) and node.name == "register"
            typer_app = isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "app" for t in node.targets
            )
            if registers or typer_app:
                defining.add(path.stem)
    defining.discard("_app")
    assert defining == {entry.module for entry in COMMANDS.values()}


def test_help_is_the_same_with_the_commands_loaded() -> None:
    """The listing does not change once the commands are loaded (the same process)."""
    runner = CliRunner()
    before = runner.invoke(app, ["--help"], env={"COLUMNS": "80"})
    assert runner.invoke(app, ["stream", "--help"]).exit_code == 0
    after = runner.invoke(app, ["--help"], env={"COLUMNS": "80"})
    assert before.exit_code == after.exit_code == 0
    assert before.stdout == after.stdout


def test_without_rich_the_first_command_names_the_extra() -> None:
    """Rich loads with the first command now: its absence still gives the one-line hint."""
    code = (
        "import sys; sys.modules['rich'] = None; "
        "from aiojetstream.cli import main; sys.exit(main(['stream', 'ls']))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 1
    assert done.stderr == (
        "error: the aiojetstream command line needs 'rich', which is not installed: "
        "pip install 'aiojetstream[cli]'\n"
    )
