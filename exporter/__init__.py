"""Annotations → validated Sotopia scores, tables and an agreement report.

- ``source``      an export's bytes, streamed from a live project or a JSON export file
- ``chunks``      those bytes cut into JSON arrays of whole tasks
- ``wire``        the task fields the exporter reads, decoded by msgspec
- ``records``     one annotation's result list → the 28 oTree fields, or field-level errors
- ``collect``     the one validation pass, a chunk at a time; ``Tally`` accounts for every
                  annotation
- ``parallel``    chunks read in worker processes, in order
- ``tables``      ``scores_long`` and the oTree ``scores_wide`` layout
- ``shapes``      Sotopia's AnnotationForEpisode / evaluation / aggregated-episode records
- ``export``      ``export_project``, ``export_file`` → ``ExportResult`` (DataFrames, files)
- ``agreement``   α, ICC, exact/±2 agreement, Randolph's κ and spread per dimension
- ``comparison``  human vs model, qualification, per-annotator figures
- ``report``      the self-contained HTML report
- ``commands``    ``sotopia-ls export`` and ``sotopia-ls report``
"""

from .collect import Collection, Tally
from .export import OUTPUT_FILES, ExportResult, Reading, export_file, export_project
from .records import ErrorRow, read_scores
from .source import annotator_emails, file_tasks, project_tasks
from .tables import long_table, scores_long, wide_table

__all__ = [
    "OUTPUT_FILES",
    "Collection",
    "ErrorRow",
    "ExportResult",
    "Reading",
    "Tally",
    "annotator_emails",
    "export_file",
    "export_project",
    "file_tasks",
    "project_tasks",
    "read_scores",
    "long_table",
    "scores_long",
    "wide_table",
]
