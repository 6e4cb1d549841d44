"""Annotations → validated Sotopia scores and tables.

The export reads top to bottom (``export``): read → validate → encode → write.

- ``source``      an export's bytes: a Label Studio JSON export file, or a live project's
                  snapshot (``sotopia_ls.labelstudio.snapshot``)
- ``chunks``      those bytes cut into JSON arrays of whole tasks
- ``wire``        the task fields the exporter reads, decoded by msgspec
- ``validate``    in a worker: one chunk → score rows (each with the study review's decision
                  from its task's meta), error rows, findings, model rows
- ``encode``      in a worker: one validated chunk → its share of each output file, as bytes
- ``accounting``  ``Tally``, ``ErrorRow``, ``Finding``: what accounts for every annotation
- ``collection``  in the parent: the parts joined in order, then settled: episodes found in
                  several tasks, repeats across tasks, the audit, model scores, the summary
- ``shapes``      Sotopia's AnnotationForEpisode / evaluation / aggregated-episode records
- ``tables``      ``scores_long`` and the oTree ``scores_wide`` layout
- ``parallel``    validate and encode chunks in worker processes, in order
- ``write``       one writer per output file, in a staging folder
- ``rewrite``     the written chunk files rewritten for episodes found in several tasks
- ``protocol``    ``protocol.json`` and ``protocol.md``: what a methods section needs
- ``export``      ``export_project``, ``export_file`` → ``ExportResult`` (DataFrames, files)
- ``review``      the study review's decisions counted, for the report
- ``commands``    ``sotopia-ls export`` and ``sotopia-ls report``

The agreement statistics are ``sotopia_ls.statistics``; the HTML report is ``sotopia_ls.report``.
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
