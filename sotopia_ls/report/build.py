"""The reliability report: one self-contained HTML file plus its tables as CSV.

The report is its sections (``sections.SECTIONS``, in page order); each measure is defined in
the module that computes it. ``build_report`` computes them, ``Report.write`` writes the tables
and the page, plots inlined so the file can be mailed or archived alone.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import pandas as pd

from ..adjudication.reading import (
    ADJUDICATED_FILE,
    SCORE_CHOICES,
    adjudicated_problems,
    with_adjudicated,
)
from ..errors import InvalidInput, Problem
from ..exporter.accounting import Finding, Tally
from ..exporter.cells import neutralized_frame
from ..exporter.export import DEFAULT_READING, ExportResult, Reading, export_file, export_project
from ..folders import replaced_folder
from ..text import counted
from ..labelstudio.client import Client
from ..statistics import DEFAULT_EPSILON
from ..statistics.bootstrap import DEFAULT_RESAMPLES, DEFAULT_SEED, Bootstrap
from .page import document
from .sections import SECTIONS, Inputs, Section, check_needs, needed_by

AUDIT_COLUMNS = [field.name for field in fields(Finding)]


@dataclass(frozen=True)
class Report:
    """The inputs, the sections and each section's result by name; ``report.agreement`` is
    the result of the section named ``agreement``."""

    inputs: Inputs
    sections: tuple[Section, ...]
    results: Mapping[str, Any]

    def __getattr__(self, name: str) -> Any:
        # Only called for a name that is not a field; ``vars`` keeps it from calling itself
        # while the object is being built or copied.
        results = vars(self).get("results", {})
        if name not in results:
            raise AttributeError(f"the report has no section named {name!r}")
        return results[name]

    def tables(self) -> dict[str, pd.DataFrame]:
        """Each section's table, by the name of its CSV."""
        return {section.name: self.results[section.name] for section in self.sections
                if section.table and self.results[section.name] is not None}

    def html(self) -> str:
        """The page: every section in order."""
        return document("".join(
            section.render(self.results[section.name], needed_by(section, self.results),
                           self.inputs, section.note)
            for section in self.sections))

    def write(self, out_dir: Path, *, raw_csv: bool = False) -> Path:
        """Write ``report.html`` and one CSV per table into ``out_dir``, which is replaced as
        one unit (``sotopia_ls.folders``); returns the HTML path. CSV cells a spreadsheet
        would evaluate are neutralized unless ``raw_csv``."""
        page = self.html()
        tables = self.tables()
        owned = {"report.html", *(f"{name}.csv" for name in tables)}
        with replaced_folder(out_dir, owned.__contains__) as staging:
            for name, table in tables.items():
                shown = table if raw_csv else neutralized_frame(table)
                shown.to_csv(staging / f"{name}.csv", index=False)
            (staging / "report.html").write_text(page, encoding="utf-8")
        return out_dir / "report.html"


def build_report(
    long: pd.DataFrame,
    model_scores: pd.DataFrame,
    tally: Tally,
    reference: pd.DataFrame | None = None,
    bootstrap: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
    audit: pd.DataFrame | None = None,
    sections: tuple[Section, ...] = SECTIONS,
    adjudicated: pd.DataFrame | None = None,
    alt_test_epsilon: float = DEFAULT_EPSILON,
) -> Report:
    """Every section of ``sections`` computed, in order, from ``scores_long`` and the stored
    model scores.

    Ground-truth rows of ``long`` are the reference ratings (with ``reference``, if given, added
    to them); the other rows are the crowd whose agreement is measured. Intervals come from
    ``bootstrap`` resamples of the episodes drawn from ``seed`` (0 resamples: no intervals).
    With ``adjudicated`` (``adjudicated_scores.csv``), each adjudicated rating replaces the
    raters' scores it settled, and the page says so. ``alt_test_epsilon`` is the alternative
    annotator test's ε.
    """
    scores = Inputs.scores
    if adjudicated is not None:
        long = with_adjudicated(long, adjudicated)
        scores = (f"Scores: adjudicated. {counted(len(adjudicated), 'adjudicated rating')} "
                  f"({ADJUDICATED_FILE}) replace the scores they settled (of the annotations "
                  "sent to adjudication), so agreement counts each settled disagreement as "
                  "none; the other scores, a rating made after its episode was sent included, "
                  "are the raters' own.")
    is_reference = long["ground_truth"].astype(bool)
    references = [frame for frame in (long[is_reference], reference) if frame is not None]
    inputs = Inputs(
        long=long[~is_reference],
        model_scores=model_scores,
        reference=pd.concat(references, ignore_index=True) if references else None,
        tally=tally,
        audit=audit if audit is not None else pd.DataFrame(columns=AUDIT_COLUMNS),
        bootstrap=Bootstrap(resamples=bootstrap, seed=seed),
        scores=scores,
        alt_test_epsilon=alt_test_epsilon,
    )
    check_needs(sections)
    results: dict[str, Any] = {}
    for section in sections:
        results[section.name] = section.compute(inputs, needed_by(section, results))
    return Report(inputs, sections, results)


# --- one public call per input ---------------------------------------------------------------

_REFERENCE_COLUMNS = {"episode_id", "agent", "dimension", "score"}


def read_reference(path: Path) -> pd.DataFrame:
    """Reference ratings: a ``scores_long`` .csv/.parquet of an earlier export, or a Label
    Studio JSON export (``.json``)."""
    if path.suffix == ".json":
        return export_file(path).scores_long
    try:
        table = pd.read_parquet(path) if path.suffix == ".parquet" else pd.read_csv(path)
    except (ValueError, OSError, UnicodeDecodeError) as error:
        raise InvalidInput([Problem(str(path), "", f"cannot read it as a table: {error}")]) from None
    missing = _REFERENCE_COLUMNS - set(table.columns)
    if missing:
        raise InvalidInput([Problem(
            str(path), "", f"not a scores_long table (no {', '.join(sorted(missing))}); give "
            "the scores_long.csv of an earlier export, or a Label Studio JSON export")])
    return table


def _build_and_write(long: pd.DataFrame, model_scores: pd.DataFrame, tally: Tally,
                     audit: pd.DataFrame, out_dir: Path, reference: Path | None,
                     bootstrap: int, seed: int, raw_csv: bool,
                     adjudicated: pd.DataFrame | None = None,
                     alt_test_epsilon: float = DEFAULT_EPSILON) -> Report:
    report = build_report(
        long, model_scores, tally,
        read_reference(reference) if reference is not None else None,
        bootstrap=bootstrap, seed=seed, audit=audit, adjudicated=adjudicated,
        alt_test_epsilon=alt_test_epsilon,
    )
    report.write(out_dir, raw_csv=raw_csv)
    return report


def _tables(result: ExportResult) -> tuple[pd.DataFrame, pd.DataFrame, Tally, pd.DataFrame]:
    """What the report reads of an export just made: long scores, model scores, tally, audit."""
    audit = pd.DataFrame([f.to_dict() for f in result.collection.audit_findings()],
                         columns=AUDIT_COLUMNS)
    return result.scores_long, result.model_scores, result.tally, audit


def report_project(
    client: Client, project: str | int, out_dir: Path, *,
    reference: Path | None = None, with_predictions: bool = False,
    keep_identities: bool = False, exclude_rejected: bool = False,
    bootstrap: int = DEFAULT_RESAMPLES, seed: int = DEFAULT_SEED,
    raw_csv: bool = False, reading: Reading = DEFAULT_READING, progress: bool = False,
    alt_test_epsilon: float = DEFAULT_EPSILON,
) -> Report:
    """The report of a live project (read as ``export_project`` reads it), written to
    ``out_dir``."""
    result = export_project(client, project, with_predictions=with_predictions,
                            keep_identities=keep_identities, exclude_rejected=exclude_rejected,
                            reading=reading, progress=progress)
    return _build_and_write(*_tables(result), out_dir, reference, bootstrap, seed, raw_csv,
                            alt_test_epsilon=alt_test_epsilon)


def report_file(
    path: Path, out_dir: Path, *, identities: Mapping[int, str] | None = None,
    reference: Path | None = None, keep_identities: bool = False,
    exclude_rejected: bool = False, bootstrap: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED, raw_csv: bool = False,
    reading: Reading = DEFAULT_READING, progress: bool = False,
    alt_test_epsilon: float = DEFAULT_EPSILON,
) -> Report:
    """The report of a Label Studio JSON export file, written to ``out_dir``."""
    result = export_file(path, identities=identities, keep_identities=keep_identities,
                         exclude_rejected=exclude_rejected, reading=reading, progress=progress)
    return _build_and_write(*_tables(result), out_dir, reference, bootstrap, seed, raw_csv,
                            alt_test_epsilon=alt_test_epsilon)


def report_export(
    folder: Path, out_dir: Path, *, reference: Path | None = None,
    bootstrap: int = DEFAULT_RESAMPLES, seed: int = DEFAULT_SEED, raw_csv: bool = False,
    scores: str = "raw", alt_test_epsilon: float = DEFAULT_EPSILON,
) -> Report:
    """The report of an export folder ``sotopia-ls export`` wrote: nothing is read again from
    Label Studio. Annotators keep the names that export gave them. ``scores`` is ``raw``
    (the raters' own) or ``adjudicated`` (with the folder's ``adjudicated_scores.csv``)."""
    if scores not in SCORE_CHOICES:
        raise ValueError(f"scores must be one of {', '.join(SCORE_CHOICES)}, got {scores!r}")
    if scores == "adjudicated" and not (folder / ADJUDICATED_FILE).is_file():
        raise InvalidInput([Problem(str(folder), "", f"no {ADJUDICATED_FILE}: export with "
                                    "--adjudication-project to write one")])

    def read(name: str, reader: Callable[[Path], Any]) -> Any:
        return read_export(folder, name, reader)

    def tally(path: Path) -> Tally:
        summary = json.loads(path.read_text(encoding="utf-8"))
        return Tally(**{name: summary[name] for name in Tally.__dataclass_fields__
                        if name in summary})

    counts = read("summary.json", tally)  # first: it tells an export folder from another
    audit = read("audit.jsonl", lambda path: pd.DataFrame(
        [json.loads(line) for line in path.open(encoding="utf-8") if line.strip()],
        columns=AUDIT_COLUMNS))
    return _build_and_write(
        read("scores_long.parquet", pd.read_parquet), read("model_scores.csv", model_scores_csv),
        counts, audit, out_dir, reference, bootstrap, seed, raw_csv,
        read(ADJUDICATED_FILE, _adjudicated) if scores == "adjudicated" else None,
        alt_test_epsilon,
    )


def read_export(folder: Path, name: str, reader: Callable[[Path], Any]) -> Any:
    """The file ``name`` of an export folder, read by ``reader``; a missing or unreadable one
    is a problem naming it."""
    path = folder / name
    if not path.is_file():
        raise InvalidInput([Problem(str(folder), "", f"no {name}: not a sotopia-ls export "
                                    "folder (sotopia-ls export -o FOLDER writes one)")])
    try:
        return reader(path)
    except (ValueError, OSError, TypeError) as error:
        raise InvalidInput([Problem(str(path), "", f"cannot read it: {error}")]) from None


def model_scores_csv(path: Path) -> pd.DataFrame:
    """An export's ``model_scores.csv``, its ids read as text."""
    return pd.read_csv(path, dtype={"episode_id": str, "evaluator": str})


def _adjudicated(path: Path) -> pd.DataFrame:
    """``adjudicated_scores.csv`` as written, its scores checked again: the file may have
    been edited since."""
    table = pd.read_csv(path, dtype={"episode_id": str}, keep_default_na=False)
    problems = adjudicated_problems(table, str(path))
    if problems:
        raise InvalidInput(problems)
    return table
