"""``requires_spark``: a test of a newer Spark feature fails in `make test`, skips in the matrix."""

from __future__ import annotations

import pytest

from spark import spark_helpers
from spark.spark_helpers import SPARK_MATRIX_ENV, requires_spark


def test_too_old_fails_outside_the_matrix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(SPARK_MATRIX_ENV, raising=False)
    monkeypatch.setattr(spark_helpers, "SPARK_VERSION", (4, 0))
    mark = requires_spark((4, 1), "filter push-down").mark
    assert mark.name == "spark_minimum"  # tests/spark/conftest.py fails the test
    assert mark.kwargs["too_old"] is True
    assert "filter push-down needs Spark >= 4.1" in mark.kwargs["reason"]
    assert requires_spark((4, 0), "x").mark.kwargs["too_old"] is False


def test_too_old_skips_in_the_matrix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SPARK_MATRIX_ENV, "1")
    monkeypatch.setattr(spark_helpers, "SPARK_VERSION", (4, 0))
    mark = requires_spark((4, 2), "AvailableNow batches").mark
    assert mark.name == "skipif"
    assert mark.args == (True,)


@pytest.mark.xfail(strict=True, raises=pytest.fail.Exception, reason="failed at set-up")
@pytest.mark.spark_minimum(reason="a feature needs Spark >= 99.0", too_old=True)
def test_the_hook_fails_a_marked_test() -> None:
    raise AssertionError("tests/spark/conftest.py should have failed this test at set-up")
