"""pyspark installed without the ``spark`` extra (no pyarrow): the formats say what to install.

Spark finds ``format("jetstream")`` through the installed ``pyspark_jetstream``
module; without pyarrow it found nothing there and said ``DATA_SOURCE_NOT_FOUND``.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from spark.spark_processes import DRIVERS, run_process, spark_env

HINT = "pip install 'aiojetstream[spark]'"


def test_formats_without_pyarrow_name_the_extra(tmp_path: Path) -> None:
    blocker = tmp_path / "no_pyarrow"
    blocker.mkdir()
    # Run at start-up by the driver and by every Python worker Spark starts.
    (blocker / "sitecustomize.py").write_text("import sys\nsys.modules['pyarrow'] = None\n")
    path = os.pathsep.join(p for p in (str(blocker), os.environ.get("PYTHONPATH")) if p)
    out = tmp_path / "result.json"
    run_process(
        [sys.executable, str(DRIVERS / "missing_extra.py"), "--out", str(out)],
        tmp_path / "driver.log",
        spark_env(PYTHONPATH=path),
        timeout=180,
    )
    errors = json.loads(out.read_text(encoding="utf-8"))
    assert errors["import aiojetstream.spark"].startswith("ModuleNotFoundError: aiojetstream.spark")
    for what, error in errors.items():
        assert HINT in error, (what, error)
        assert "No module named 'pyarrow'" in error or "import of pyarrow halted" in error
        assert "DATA_SOURCE_NOT_FOUND" not in error, (what, error)
    assert "format('jetstream_kv')" in errors["read jetstream_kv"]
