"""The cases of ``make bench``, a module a group (``run.py --only``'s names).

* :mod:`cases.measure`: alternating rounds, rates, the two libraries' connections,
  measurements in a fresh interpreter (``run.py --child``).
* :mod:`cases.report`: the row type, the targets, the table.
* :mod:`cases.publish` (``publish``), :mod:`cases.consume` (``consume``),
  :mod:`cases.typed` and :mod:`cases.otel` (the typed and instrumented rows of
  ``consume`` and ``publish``), :mod:`cases.kv` (``kv``), :mod:`cases.memory`
  (``memory``), :mod:`cases.spark` (``spark``), :mod:`cases.startup` (``import``).

``run.py`` runs as a script, with ``benchmarks/`` on ``sys.path``: the cases
import the bare-socket clients (``bare_reader``, ``bare_publisher``) and
``spark_noop`` as top-level modules.
"""
