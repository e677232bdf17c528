"""``import aiojetstream`` is lazy: public names load their module on first access.

The package's ``__init__`` imports only ``_version``; every other public name
is found through ``_SOURCES`` by a module ``__getattr__`` (PEP 562), while type
checkers and IDEs read the ``if TYPE_CHECKING:`` imports. These tests keep the
two views equal and check, in fresh interpreters, what an import loads (never
how long it takes: speed is measured by ``benchmarks/run.py``).
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import aiojetstream

INIT = Path(aiojetstream.__file__)


def type_checking_imports() -> dict[str, str]:
    """Public name -> module (relative, without the dot) of the ``if TYPE_CHECKING:`` block."""
    tree = ast.parse(INIT.read_text())
    found: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for stmt in node.body:
                assert isinstance(stmt, ast.ImportFrom), ast.unparse(stmt)
                assert stmt.level == 1
                assert stmt.module is not None
                for alias in stmt.names:
                    assert alias.asname is None
                    found[alias.name] = stmt.module
    return found


def loaded_after(code: str) -> list[str]:
    """The modules of aiojetstream, pydantic and nats-py loaded after running ``code``."""
    script = textwrap.dedent(
        f"""
        import json, sys
        {code}
        print(json.dumps(sorted(
            m for m in sys.modules
            if m.split(".")[0] in ("aiojetstream", "pydantic", "pydantic_core", "nats")
        )))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60
    )
    modules: list[str] = json.loads(done.stdout.strip().splitlines()[-1])
    return modules


def test_sources_match_the_type_checking_imports() -> None:
    sources = aiojetstream._SOURCES
    assert type_checking_imports() == sources
    assert set(sources) | {"__version__"} == set(aiojetstream.__all__)


def test_every_source_defines_its_name() -> None:
    sources = aiojetstream._SOURCES
    for name, module in sources.items():
        assert getattr(aiojetstream, name) is getattr(
            __import__(f"aiojetstream.{module}", fromlist=[name]), name
        )


def test_dir_lists_every_public_name_before_it_is_loaded() -> None:
    script = (
        "import json, aiojetstream; "
        "print(json.dumps([sorted(aiojetstream.__all__), dir(aiojetstream)]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60
    )
    public, listed = json.loads(done.stdout)
    assert set(public) <= set(listed)
    assert listed == sorted(listed)


def test_unknown_names_raise_attribute_error() -> None:
    with pytest.raises(AttributeError, match="NoSuchName"):
        aiojetstream.NoSuchName  # type: ignore[attr-defined]  # noqa: B018
    assert not hasattr(aiojetstream, "NoSuchName")


def test_import_loads_neither_pydantic_nor_nats() -> None:
    assert loaded_after("import aiojetstream") == ["aiojetstream", "aiojetstream._version"]


def test_testing_module_loads_neither_pydantic_nor_nats() -> None:
    # The pytest plugin: imported by every pytest session.
    assert loaded_after("import aiojetstream.testing") == [
        "aiojetstream",
        "aiojetstream._version",
        "aiojetstream.testing",
        "aiojetstream.testing._binary",
        "aiojetstream.testing._cli",
        "aiojetstream.testing._cluster",
        "aiojetstream.testing._config",
        "aiojetstream.testing._plugin",
        "aiojetstream.testing._probes",
        "aiojetstream.testing._process",
        "aiojetstream.testing._server",
    ]


def test_errors_load_without_pydantic_or_nats() -> None:
    modules = loaded_after("from aiojetstream import JetStreamError, KeyNotFoundError")
    assert modules == ["aiojetstream", "aiojetstream._errors", "aiojetstream._version"]


def test_connect_leaves_key_value_and_object_store_unloaded() -> None:
    modules = loaded_after("from aiojetstream import connect")
    assert "aiojetstream._context" in modules
    for deferred in (
        "aiojetstream._kv",
        "aiojetstream._object",
        "aiojetstream._models.kv",
        "aiojetstream._models.obj",
        "aiojetstream._counter",
        "aiojetstream._batch",
        "aiojetstream._schedule",
        # the consumer, ordered consumer and stream handles: on the first call returning one
        "aiojetstream._consumer",
        "aiojetstream._pull_engine",
        "aiojetstream._ordered",
        "aiojetstream._stream",
    ):
        assert deferred not in modules, deferred


def test_first_program_import_builds_no_model_and_loads_no_extra() -> None:
    # What `import_ratio_over_nats` (benchmarks/run.py) times: the names of the
    # README's first program. No pydantic model is built (validators and
    # serializers come on first use, pydantic's plugin scan with them), and
    # neither the account models, key-value, object store, CLI, Spark nor
    # Pulsar modules are loaded.
    script = textwrap.dedent(
        """
        import json, sys
        from aiojetstream import connect, StreamConfig, ConsumerConfig, Msg
        from pydantic import BaseModel

        def models(cls):
            for sub in cls.__subclasses__():
                yield sub
                yield from models(sub)

        built = sorted(
            c.__qualname__ for c in models(BaseModel)
            if c.__module__.startswith("aiojetstream") and c.__pydantic_complete__
        )
        print(json.dumps([built, sorted(sys.modules)]))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60
    )
    built, modules = json.loads(done.stdout.strip().splitlines()[-1])
    assert built == []
    assert "aiojetstream._context" in modules
    assert "aiojetstream._models.stream" in modules
    assert "aiojetstream._models.consumer" in modules
    for absent in (
        "aiojetstream._models.account",
        "aiojetstream._models.kv",
        "aiojetstream._models.obj",
        "aiojetstream._kv",
        "aiojetstream._object",
        "aiojetstream.cli",
        "aiojetstream.spark",
        "aiojetstream.pulsar",
        "aiojetstream.testing",
        "aiojetstream._consumer",
        "aiojetstream._ordered",
        "aiojetstream._stream",
        "pydantic.plugin._loader",
        "pyarrow",
        "pyspark",
        "typer",
        "click",
        "email_validator",
    ):
        assert absent not in modules, absent


def test_account_models_load_on_first_use() -> None:
    modules = loaded_after("from aiojetstream._models import AccountInfo, APIStats, Tier")
    assert "aiojetstream._models.account" in modules
    from aiojetstream._models import AccountInfo
    from aiojetstream._models.account import AccountInfo as Defined

    assert AccountInfo is Defined
    assert aiojetstream.AccountInfo is Defined
    with pytest.raises(AttributeError, match="NoSuchModel"):
        __import__("aiojetstream._models", fromlist=["x"]).NoSuchModel  # noqa: B018
