"""``sotopia-ls export`` and ``sotopia-ls report``: thin wrappers over the exporter's functions.

Both read either a live project (``--project`` with ``--url``/``--api-key``) or a Label Studio
JSON export file (``--from-file``). The API key is handed to the SDK only; it is never printed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click
import pandas as pd

from ..labelstudio.client import annotator_emails, connect
from ..errors import SotopiaLSError
from ..options import server_options
from .bootstrap import DEFAULT_RESAMPLES, DEFAULT_SEED
from .export import ExportResult, Reading, export_file, export_project
from .parallel import default_workers

_SHOWN_ERRORS = 10


def _source_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """Where the annotations come from, shared by ``export`` and ``report``."""
    decorators = [
        click.option("--project", help="Id or exact title of the project to read."),
        click.option(
            "--from-file", "from_file",
            type=click.Path(exists=True, dir_okay=False, path_type=Path),
            help="Read a Label Studio JSON export file instead of a live project. With --url and "
            "--api-key, annotators are named by email instead of user id.",
        ),
        server_options,
        click.option(
            "--model-name", "model_names", multiple=True, metavar="TAG=LABEL",
            help="Label for scores_wide.csv's model column of episodes with this source tag "
            "(default: the tag itself). Repeatable.",
        ),
        click.option(
            "--with-predictions", is_flag=True,
            help="Also fetch the project's predictions: the model scores of tasks without a "
            "stored evaluation (e.g. a pre-annotation backend's judgements).",
        ),
        click.option("-o", "--output", type=click.Path(file_okay=False, path_type=Path),
                     required=True, help="Folder to write into (created if missing)."),
        click.option("--workers", type=click.IntRange(min=1), default=default_workers(),
                     show_default="one per CPU, at most 8",
                     help="Processes that decode and validate the export in parallel."),
    ]
    for decorator in reversed(decorators):
        command = decorator(command)
    return command


def _model_names(pairs: tuple[str, ...]) -> dict[str, str]:
    names = {}
    for pair in pairs:
        tag, sep, label = pair.partition("=")
        if not sep or not tag:
            raise click.BadParameter(f"{pair!r} is not TAG=LABEL", param_hint="--model-name")
        names[tag] = label
    return names


@contextmanager
def _export_extra() -> Iterator[None]:
    """Library errors as a fix: pyarrow, scipy, pingouin … are the ``export`` extra."""
    try:
        yield
    except ImportError as error:
        raise click.ClickException(
            f"{error}; install the export dependencies: pip install 'sotopia-label-studio[export]'"
        ) from error
    except SotopiaLSError as error:
        raise click.ClickException(str(error)) from error


def _read(
    project: str | None, from_file: Path | None, url: str | None, api_key: str | None,
    model_names: tuple[str, ...], with_predictions: bool, output: Path | None, workers: int,
) -> ExportResult:
    names = _model_names(model_names)
    if (project is None) == (from_file is None):
        raise click.UsageError("give exactly one of --project or --from-file")
    with _export_extra():
        if from_file is not None:
            emails = annotator_emails(connect(url, api_key)) if url and api_key else {}
            return export_file(from_file, output, emails=emails, model_names=names,
                               reading=Reading(workers), progress=True)
        return export_project(connect(url, api_key), project, output, model_names=names,
                              with_predictions=with_predictions, reading=Reading(workers),
                              progress=True)


def _echo_tally(result: ExportResult) -> None:
    tally = result.tally
    click.echo(f"read {tally.tasks} task(s)")
    click.echo(tally.reconciliation())
    extras = [
        f"{tally.duplicates} duplicate(s) refused" if tally.duplicates else "",
        f"{tally.drafts} unsubmitted draft(s) ignored" if tally.drafts else "",
        f"{tally.ground_truth} ground-truth annotation(s)" if tally.ground_truth else "",
        f"{tally.invalid_model_evaluations} invalid stored model evaluation(s) ignored"
        if tally.invalid_model_evaluations else "",
    ]
    if any(extras):
        click.echo("; ".join(extra for extra in extras if extra))
    for error in result.collection.errors[:_SHOWN_ERRORS]:
        click.echo(
            f"  rejected: task {error.task_id} annotation {error.annotation_id} "
            f"({error.annotator}) {error.field}: {error.reason}", err=True,
        )
    if len(result.collection.errors) > _SHOWN_ERRORS:
        click.echo(f"  … {len(result.collection.errors) - _SHOWN_ERRORS} more in errors.jsonl",
                   err=True)


@click.command("export")
@_source_options
def export_command(
    project: str | None, from_file: Path | None, url: str | None, api_key: str | None,
    model_names: tuple[str, ...], with_predictions: bool, output: Path, workers: int,
) -> None:
    """Validate every annotation and write the scores in Sotopia's formats.

    Writes annotations.jsonl (Sotopia AnnotationForEpisode), evaluations.jsonl, episodes.jsonl
    (annotators aggregated), scores_long.csv/.parquet, scores_wide.csv (the oTree *_final.csv
    columns), model_scores.csv, errors.jsonl (each refused annotation with its field and
    reason) and summary.json. Cancelled annotations and drafts are counted, not exported.

    Example:

        export LABEL_STUDIO_URL=http://127.0.0.1:8080 LABEL_STUDIO_API_KEY=...

        sotopia-ls export --project "Pilot study" -o results/

        sotopia-ls export --from-file project-1-export.json -o results/
    """
    result = _read(project, from_file, url, api_key, model_names, with_predictions, output,
                   workers)
    _echo_tally(result)
    click.echo(f"wrote {output}/ ({result.tally.exported} annotation(s))")


_REFERENCE_COLUMNS = {"episode_id", "agent", "dimension", "score"}


def _reference(path: Path | None) -> pd.DataFrame | None:
    if path is None:
        return None
    with _export_extra():
        if path.suffix == ".json":
            return export_file(path).scores_long
        table = pd.read_parquet(path) if path.suffix == ".parquet" else pd.read_csv(path)
    missing = _REFERENCE_COLUMNS - set(table.columns)
    if missing:
        raise click.ClickException(
            f"{path}: not a scores_long table (no {', '.join(sorted(missing))}); give the "
            "scores_long.csv of an earlier export, or a Label Studio JSON export"
        )
    return table


@click.command("report")
@_source_options
@click.option(
    "--reference", type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Reference ratings for qualification: a scores_long .csv/.parquet from an earlier "
    "export, or a Label Studio JSON export. Ground-truth annotations are used as well.",
)
@click.option(
    "--bootstrap", type=click.IntRange(min=0), default=DEFAULT_RESAMPLES, show_default=True,
    metavar="N", help="Resamples of the episodes behind each 95% interval (0: no intervals).",
)
@click.option("--seed", type=int, default=DEFAULT_SEED, show_default=True,
              help="Seed of the bootstrap; the same seed and data give the same intervals.")
def report_command(
    project: str | None, from_file: Path | None, url: str | None, api_key: str | None,
    model_names: tuple[str, ...], with_predictions: bool, output: Path, workers: int,
    reference: Path | None, bootstrap: int, seed: int,
) -> None:
    """Write the agreement report (report.html and its tables as CSV).

    Per dimension, pooled and per model pair and agent position: Krippendorff's interval α,
    ICC(1,1) and ICC(1,k) with bootstrap intervals (episodes resampled), shares of annotator
    pairs agreeing exactly and within ±2, Randolph's κ on rubric-scaled binary codes, spread,
    and near-constant flags; Sotopia-π's pairwise agreement, α and κ computed as its script
    does, for comparison with that paper; human vs model (Pearson and Spearman with
    intervals, MSE, bias) and the model against the spread between humans; qualification
    against reference ratings; per-annotator counts, times and distance from the others; and
    the plots.

    Example:

        sotopia-ls report --project "Pilot study" -o report/

        sotopia-ls report --from-file export.json --reference gold/scores_long.csv -o report/

        sotopia-ls report --from-file export.json --bootstrap 5000 --seed 7 -o report/
    """
    with _export_extra():
        from .report import build_report
    result = _read(project, from_file, url, api_key, model_names, with_predictions, None,
                   workers)
    _echo_tally(result)
    with _export_extra():
        report = build_report(result.scores_long, result.model_scores, result.tally,
                              _reference(reference), bootstrap=bootstrap, seed=seed)
        path = report.write(output)
    click.echo(f"wrote {path}")
