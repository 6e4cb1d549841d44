"""Annotations → validated Sotopia scores and tables.

The export reads top to bottom (``export``): read (``source``, ``chunks``, ``wire``) → validate
→ encode (worker processes, ``parallel``) → ``collection`` → ``write`` / ``rewrite``, each
module named for its step; docs/rooms.md maps them. Statistics are ``sotopia_ls.statistics``,
the HTML report ``sotopia_ls.report``.
"""

from .accounting import ErrorRow, Tally
from .collection import Collection
from .export import ExportResult, Reading, export_file, export_project
from .source import file_tasks, project_tasks
from .tables import long_table, scores_long, wide_table
from .write import OUTPUT_FILES

__all__ = [
    "OUTPUT_FILES",
    "Collection",
    "ErrorRow",
    "ExportResult",
    "Reading",
    "Tally",
    "export_file",
    "export_project",
    "file_tasks",
    "long_table",
    "project_tasks",
    "scores_long",
    "wide_table",
]
