"""Annotations → validated Sotopia scores and tables.

The export reads top to bottom (``export``): read (``source``, ``chunks``, ``wire``) → validate
→ encode (worker processes, ``parallel``) → ``collection`` → ``write`` / ``rewrite``, each
module named for its step; docs/rooms.md maps them. Statistics are ``sotopia_ls.statistics``,
the HTML report ``sotopia_ls.report``. The names below are imported when first read, so that a
module of the package (the live figures' worker) imports no Label Studio client with it.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

# name → the module of this package that defines it.
_DEFINED_IN = {
    "OUTPUT_FILES": "write", "Collection": "collection", "ErrorRow": "accounting",
    "Tally": "accounting", "ExportResult": "export", "Reading": "export",
    "export_file": "export", "export_project": "export", "file_tasks": "source",
    "project_tasks": "source", "long_table": "tables", "scores_long": "tables",
    "wide_table": "tables",
}
__all__ = sorted(_DEFINED_IN)


def __getattr__(name: str) -> Any:
    if name not in _DEFINED_IN:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f".{_DEFINED_IN[name]}", __name__), name)
