"""A griffe extension for the documentation build: every public name has a docstring.

mkdocstrings renders the API reference from the docstrings; a public module,
class, function, method or property without one would show up as a bare
signature. This extension logs a warning for each (``mkdocs build --strict``
turns warnings into a failed build), so ``make docs`` fails on a missing
docstring. Public means: reachable from a package's ``__all__`` (or, without
one, not starting with ``_``), and for class members, not starting with ``_``.
Attributes are left to ``tests/unit/test_model_docstrings.py``; enum members
and inherited members are not checked.
"""

from __future__ import annotations

from typing import Any

import griffe

__all__ = ["RequireDocstrings"]

_logger = griffe.get_logger("griffe_docstrings")
_CHECKED = (griffe.Kind.MODULE, griffe.Kind.CLASS, griffe.Kind.FUNCTION)


class RequireDocstrings(griffe.Extension):
    """Warn about every public module, class, function and method without a docstring."""

    def __init__(self) -> None:
        self._seen: set[str] = set()

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        """Check a package once it is loaded (aliases are resolved by then)."""
        self._check(pkg)

    def _check(self, obj: griffe.Object | griffe.Alias) -> None:
        try:
            target = obj.final_target if isinstance(obj, griffe.Alias) else obj
        except griffe.AliasResolutionError:
            return  # outside the loaded packages (a re-exported third-party name)
        if target.path in self._seen:
            return
        self._seen.add(target.path)
        if target.kind in _CHECKED and not target.docstring:
            _logger.warning(
                "%s:%s: public %s %s has no docstring",
                target.relative_filepath,
                target.lineno,
                target.kind.value,
                target.path,
            )
        if target.kind is griffe.Kind.MODULE:
            for member in target.members.values():
                if (member.is_public and not member.is_alias) or _exported(target, member):
                    self._check(member)
        elif target.kind is griffe.Kind.CLASS:
            for name, member in target.members.items():
                if not name.startswith("_") and not member.is_alias:
                    self._check(member)


def _exported(module: griffe.Object, member: griffe.Object | griffe.Alias) -> bool:
    exports = module.exports
    return exports is not None and member.name in exports
