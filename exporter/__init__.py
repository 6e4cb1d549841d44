"""Annotations → validated Sotopia scores, tables and an agreement report.

- ``source``      tasks streamed from a live project or a JSON export file (ijson)
- ``records``     one annotation's result list → the 28 oTree fields, or field-level errors
- ``collect``     the one validation pass; ``Tally`` accounts for every annotation
- ``tables``      ``scores_long`` and the oTree ``scores_wide`` layout
- ``shapes``      Sotopia's AnnotationForEpisode / evaluation / aggregated-episode records
- ``export``      ``export_project``, ``export_file`` → ``ExportResult`` (DataFrames, files)
- ``agreement``   α, ICC, exact/±2 agreement, Randolph's κ and spread per dimension
- ``comparison``  human vs model, qualification, per-annotator figures
- ``report``      the self-contained HTML report
- ``commands``    ``sotopia-ls export`` and ``sotopia-ls report``
"""

from .collect import Collection, Tally, collect
from .export import OUTPUT_FILES, ExportResult, export_file, export_project
from .records import ErrorRow, read_scores
from .source import annotator_emails, file_tasks, project_tasks
from .tables import scores_long, scores_wide

__all__ = [
    "OUTPUT_FILES",
    "Collection",
    "ErrorRow",
    "ExportResult",
    "Tally",
    "annotator_emails",
    "collect",
    "export_file",
    "export_project",
    "file_tasks",
    "project_tasks",
    "read_scores",
    "scores_long",
    "scores_wide",
]
