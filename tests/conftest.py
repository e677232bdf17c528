"""Test-suite configuration: load the aiojetstream pytest plugin exactly once.

The plugin (``aiojetstream.testing``: the ``nats_server``, ``nats_url`` and
``js`` fixtures) is normally loaded through the package's ``pytest11`` entry
point. When the package is not installed (``PYTHONPATH=src``) or plugin
autoloading is disabled, register it here instead; registering it twice would
make pluggy fail, hence the check rather than ``pytest_plugins``.
"""

from __future__ import annotations

import pytest

import aiojetstream.testing


def pytest_configure(config: pytest.Config) -> None:
    if not config.pluginmanager.is_registered(aiojetstream.testing):
        config.pluginmanager.register(aiojetstream.testing, "aiojetstream.testing")
