"""A module of the package whose extra is not installed: an error that names the extra.

``import aiojetstream.spark`` without pyarrow, or ``import aiojetstream.otel``
without OpenTelemetry, raised a bare "No module named 'pyarrow'" naming no
extra. They raise an error that does (``aiojetstream.otel``: :func:`missing_extra`;
``aiojetstream.spark`` words it itself, importing no private module): still a
``ModuleNotFoundError`` with the missing module's ``name`` (handlers written
for the bare one still work), saying which extra to install. Importing this module imports no extra.
"""

from __future__ import annotations

import sys
from typing import Any, Final

__all__ = ["EXTRAS", "install_hint", "missing_extra", "spark_source", "unavailable_source"]

#: The packages each extra brings that its modules import, and what it installs.
EXTRAS: Final = {
    "otel": (("opentelemetry",), "opentelemetry-api"),
}


def install_hint(extra: str) -> str:
    """The command that installs ``extra``."""
    return f"pip install 'aiojetstream[{extra}]'"


def missing_extra(exc: ModuleNotFoundError, module: str, extra: str) -> ModuleNotFoundError | None:
    """The error ``module`` raises when importing it failed with ``exc``.

    None when ``exc`` is about a module that is no package of ``extra``
    (re-raise it as it is).
    """
    packages, needs = EXTRAS[extra]
    name = exc.name or ""
    if not any(name == p or name.startswith(p + ".") for p in packages):
        return None
    return ModuleNotFoundError(
        f"{module} needs the {extra!r} extra ({needs}): {exc}; install it with "
        f"{install_hint(extra)}",
        name=exc.name,
        path=exc.path,
    )


def spark_source(attribute: str, format_name: str, module: str) -> Any:
    """``module.DefaultSource``: ``aiojetstream.spark``'s ``attribute``, or a stub saying why not.

    For the ``pyspark_jetstream*`` modules Spark registers its formats from
    (:func:`unavailable_source` when ``aiojetstream.spark`` cannot be imported).
    """
    try:
        from . import spark
    except ImportError as exc:  # aiojetstream without its spark extra (no pyarrow)
        return unavailable_source(format_name, exc, module)
    return getattr(spark, attribute)


def unavailable_source(format_name: str, exc: ImportError, module: str) -> Any:
    """A Spark data source named ``format_name`` that fails, saying why, when it is used.

    For ``pyspark_jetstream*`` when ``aiojetstream.spark`` cannot be imported
    (``exc``): Spark finds the format, and reading or writing it raises
    ``exc``'s message, which names the extra (without the stub Spark said
    ``DATA_SOURCE_NOT_FOUND``). The class is ``module.DefaultSource``, so
    Spark pickles it by reference. None when pyspark has no Python data
    sources (not installed, or older than 4.0): nothing to register.
    """
    try:
        from pyspark.sql.datasource import DataSource
    except ImportError:
        return None
    reason = str(exc)

    class DefaultSource(DataSource):
        __doc__ = f"``format({format_name!r})`` without ``aiojetstream.spark``: {reason}"

        def __init__(self, options: dict[str, str]) -> None:
            raise ModuleNotFoundError(
                f"format({format_name!r}) is not available in the Python that runs "
                f"Spark's workers ({sys.executable}): {reason}",
                name=exc.name,
            )

        @classmethod
        def name(cls) -> str:
            return format_name

    DefaultSource.__module__ = module
    DefaultSource.__qualname__ = "DefaultSource"
    return DefaultSource
