"""``sotopia-ls export`` and ``sotopia-ls report``: thin wrappers over the exporter's functions.

Both read a live project (``--project`` with ``--url``/``--api-key``) or a Label Studio JSON
export file (``--from-file``); ``report`` also reads the folder an export wrote
(``--from-export``). The API key is handed to the SDK only; it is never printed. An option
that would do nothing in the combination given is refused, not ignored.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
from click.core import ParameterSource

from ..adjudication.reading import (
    ADJUDICATED_FILE,
    ADJUDICATION_ERRORS_FILE,
    SCORE_CHOICES,
)
from ..extras import missing_extra, require_extra
from ..labelstudio.client import annotator_emails, connect
from ..options import failures_as_messages, server_options
from ..statistics import DEFAULT_EPSILON, DEFAULT_PLAN_RESAMPLES
from ..statistics.bootstrap import DEFAULT_RESAMPLES, DEFAULT_SEED
from ..study.settings import DATABASE_ENV
from .export import ExportResult, Reading, export_file, export_project
from .parallel import default_workers
from .request import ExportRequest, check_source

_SHOWN_ERRORS = 10


def _options(*decorators: Callable[..., Any]) -> Callable[..., Any]:
    def apply(command: Callable[..., Any]) -> Callable[..., Any]:
        for decorator in reversed(decorators):
            command = decorator(command)
        return command

    return apply


_source_options = _options(
    click.option("--project", help="Id or exact title of the project to read."),
    click.option(
        "--from-file", "from_file",
        type=click.Path(exists=True, dir_okay=False, path_type=Path),
        help="Read a Label Studio JSON export file instead of a live project. With --url and "
        "--api-key, the private identity map gets the annotators' emails.",
    ),
    server_options,
    click.option(
        "--with-predictions", is_flag=True,
        help="Also fetch a live project's predictions: the model scores of tasks without a "
        "stored evaluation (e.g. a pre-annotation backend's judgements).",
    ),
    click.option(
        "--keep-identities", is_flag=True,
        help="Name annotators by email in every output. Default: the pseudonym "
        "annotator-<user id>, with the emails in the private annotator_identities.csv.",
    ),
    click.option(
        "--raw-csv", is_flag=True,
        help="Write CSV cells starting with = + - @ or a tab as they are. Default: such a cell "
        "gets a leading ' so that a spreadsheet shows it as text instead of running it.",
    ),
    click.option(
        "--exclude-rejected", is_flag=True,
        help="Leave out the annotations the study review marked reject (task meta "
        "sotopia_review) from every table and figure, and say how many. Default: they stay, "
        "marked in the review_decision column.",
    ),
    click.option("-o", "--output", type=click.Path(file_okay=False, path_type=Path),
                 required=True, help="Folder to write (created, or replaced as a whole)."),
    click.option("--workers", type=click.IntRange(min=1), default=default_workers(),
                 show_default="one per CPU, at most 8",
                 help="Processes that decode and validate the export in parallel."),
)


def _identities(url: str | None, api_key: str | None) -> dict[int, str]:
    return annotator_emails(connect(url, api_key)) if url and api_key else {}


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
    review = result.collection.review()
    if any(review.values()):
        click.echo("review: " + ", ".join(f"{count} {decision}"
                                          for decision, count in review.items()))
    audit = {kind: count for kind, count in result.collection.audit().items() if count}
    if audit:
        click.echo("audit: " + ", ".join(f"{count} {kind.replace('_', ' ')}"
                                         for kind, count in audit.items())
                   + " (audit.jsonl)", err=True)
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
@click.option(
    "--model-name", "model_names", multiple=True, metavar="TAG=LABEL",
    help="Label for scores_wide.csv's model column of episodes with this source tag "
    "(default: the tag itself). Repeatable.",
)
@click.option(
    "--overlap", type=click.IntRange(min=1),
    help="With --from-file: the project's annotations per task, so that tasks with more are "
    "audited (a live project's own setting is read).",
)
@click.option(
    "--study", "studies", multiple=True,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="A study file (`sotopia-ls study init`): its design and what its gateway database "
    "recorded go into protocol.json and protocol.md, and each annotation made through its "
    "gateway gets its time on task (assigned_at, first_shown_at, submitted_at, "
    "visible_minutes). Repeatable: a qualification round and its main study.",
)
@click.option(
    "--database", envvar=DATABASE_ENV, show_envvar=True,
    help="With --study: the gateway's database URL, instead of the study files' (a password "
    "belongs here, or in PGPASSWORD or ~/.pgpass, never in the file).",
)
@click.option(
    "--adjudication-project", "adjudication",
    help="Id or exact title of the adjudication project (`sotopia-ls adjudicate`): its "
    "adjudicated ratings go into adjudicated_scores.csv (refused ones into "
    "adjudication_errors.jsonl); the raw scores are written as without it.",
)
def export_command(**options: Any) -> None:
    """Validate every annotation and write the scores in Sotopia's formats.

    Writes annotations.jsonl (Sotopia AnnotationForEpisode), evaluations.jsonl, episodes.jsonl
    (annotators aggregated), scores_long.csv/.parquet, scores_wide.csv (the oTree *_final.csv
    columns), model_scores.csv, errors.jsonl (each refused annotation with its field and
    reason), audit.jsonl, summary.json, protocol.json and protocol.md (what a methods section
    needs: raters per episode, minutes per episode, review decisions, exclusions; with
    --study, the study's design and gateway records too), and the private
    annotator_identities.csv. Cancelled annotations and drafts are counted, not exported. With
    --adjudication-project, also adjudicated_scores.csv (episode, agent, dimension, adjudicated
    score, note and the raw scores it settled). The output folder is replaced as a whole, or
    left as it was if anything fails.

    Example:

        export LABEL_STUDIO_URL=http://127.0.0.1:8080 LABEL_STUDIO_API_KEY=...

        sotopia-ls export --project "Pilot study" -o results/

        sotopia-ls export --from-file project-1-export.json -o results/

        sotopia-ls export --project 3 --exclude-rejected -o results/

        sotopia-ls export --project 3 --study study.json -o results/

        sotopia-ls export --project 3 --adjudication-project 4 -o results/
    """
    require_extra("export")
    given = click.get_current_context().get_parameter_source("database")
    with failures_as_messages():
        request = ExportRequest.from_options(
            database_from_environment=given is not ParameterSource.COMMANDLINE, **options)
        result = run_export(request, progress=True)
    _echo_tally(result)
    _echo_adjudicated(result)
    excluded = (f"; {result.tally.excluded} marked reject in review excluded"
                if request.exclude_rejected else "")
    click.echo(f"wrote {request.output}/ ({result.tally.exported} annotation(s){excluded})")


def run_export(request: ExportRequest, *, progress: bool = False) -> ExportResult:
    """Export what ``request`` asks for: its studies' records read first, then the export
    file or the live project."""
    records, times = _study_records(request.studies, request.database)
    common: dict[str, Any] = {
        "model_names": request.model_names, "keep_identities": request.keep_identities,
        "raw_csv": request.raw_csv, "exclude_rejected": request.exclude_rejected,
        "studies": records, "time_on_task": times, "reading": Reading(request.workers),
        "progress": progress}
    if request.from_file is not None:
        return export_file(request.from_file, request.output,
                           identities=_identities(request.url, request.api_key),
                           overlap=request.overlap, **common)
    return export_project(connect(request.url, request.api_key), request.project,
                          request.output, with_predictions=request.with_predictions,
                          adjudication=request.adjudication, **common)


def _echo_adjudicated(result: ExportResult) -> None:
    if result.adjudicated is None:
        return
    click.echo(f"{len(result.adjudicated.scores)} adjudicated rating(s) "
               f"({ADJUDICATED_FILE}), {len(result.adjudicated.problems)} refused")
    if result.adjudicated.other_studies:
        click.echo(f"{result.adjudicated.other_studies} adjudication task(s) sent from other "
                   "study projects left out")
    for problem in result.adjudicated.problems[:_SHOWN_ERRORS]:
        click.echo(f"  refused adjudication: {problem}", err=True)
    if len(result.adjudicated.problems) > _SHOWN_ERRORS:
        click.echo(f"  … {len(result.adjudicated.problems) - _SHOWN_ERRORS} more in "
                   f"{ADJUDICATION_ERRORS_FILE}", err=True)


def _study_records(studies: tuple[Path, ...], database: str | None
                   ) -> tuple[list[dict[str, Any]], dict[int, dict[str, Any]]]:
    """The study side of the protocol record, and the time on task of each annotation made
    through the gateway, read before the export so that a study file or database that cannot
    be read stops it before anything is written."""
    if not studies:
        return [], {}
    require_extra("study")
    from ..study.protocol import studies_protocol
    from ..study.screening.timing import annotation_times

    return studies_protocol(studies, database), annotation_times(studies, database)


@click.command("report")
@_source_options
@click.option(
    "--from-export", "from_export", type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="Read the folder `sotopia-ls export` wrote (nothing is read from Label Studio again).",
)
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
@click.option(
    "--scores", type=click.Choice(SCORE_CHOICES), default="raw", show_default=True,
    help="raw: each rater's own scores. adjudicated (with --from-export): where the export's "
    "adjudicated_scores.csv settles a disagreement, its score replaces the raters'. The report "
    "says which it used.",
)
@click.option(
    "--alt-test-epsilon", type=click.FloatRange(0, 1), default=DEFAULT_EPSILON,
    show_default=True, metavar="ε",
    help="The alternative annotator test's margin for the judge's lower cost: 0.1 for crowd "
    "workers, 0.15 for trained annotators, 0.2 for experts (the paper's rule of thumb).",
)
def report_command(
    project: str | None, from_file: Path | None, url: str | None, api_key: str | None,
    with_predictions: bool, keep_identities: bool, raw_csv: bool, exclude_rejected: bool,
    output: Path, workers: int, from_export: Path | None, reference: Path | None,
    bootstrap: int, seed: int, scores: str, alt_test_epsilon: float,
) -> None:
    """Write the agreement report (report.html and its tables as CSV).

    Per dimension, pooled and per model pair and agent position: Krippendorff's interval α,
    ICC(1,1) and ICC(1,k) with bootstrap intervals (episodes resampled), shares of annotator
    pairs agreeing exactly and within ±2, Randolph's κ on rubric-scaled binary codes, spread,
    and near-constant flags; Sotopia-π's pairwise agreement, α and κ computed as its script
    does, for comparison with that paper; human vs model (Pearson and Spearman with
    intervals, MSE, bias), how many episodes had a model evaluation, and the model against
    the spread between humans; whether each judge can replace a person (the alternative
    annotator test); the study-integrity audit; qualification against reference ratings;
    per-annotator counts, times and distance from the others; each agent model's mean scores
    from people, each judge, and prediction-powered (the ppi extra); and the plots.

    Example:

        sotopia-ls report --from-export results/ -o report/

        sotopia-ls report --project "Pilot study" -o report/

        sotopia-ls report --from-file export.json --reference gold/scores_long.csv -o report/

        sotopia-ls report --from-export results/ --scores adjudicated -o report/
    """
    require_extra("export")
    from ..report.build import report_export, report_file, report_project

    with failures_as_messages():
        check_source(project, from_file, with_predictions, from_export)
    if from_export is not None and keep_identities:
        raise click.UsageError("--keep-identities does nothing with --from-export: the report "
                               "keeps the names the export gave")
    if from_export is not None and exclude_rejected:
        raise click.UsageError("--exclude-rejected does nothing with --from-export: the report "
                               "reads what the export kept (export with --exclude-rejected)")
    if scores != "raw" and from_export is None:
        raise click.UsageError("--scores adjudicated reads the adjudicated_scores.csv of an "
                               "export folder: export with --adjudication-project, then give "
                               "--from-export")
    settings = {"reference": reference, "bootstrap": bootstrap, "seed": seed, "raw_csv": raw_csv,
                "alt_test_epsilon": alt_test_epsilon}
    with failures_as_messages():
        if from_export is not None:
            report = report_export(from_export, output, scores=scores, **settings)
        elif from_file is not None:
            report = report_file(from_file, output, identities=_identities(url, api_key),
                                 keep_identities=keep_identities,
                                 exclude_rejected=exclude_rejected, reading=Reading(workers),
                                 progress=True, **settings)
        else:
            report = report_project(connect(url, api_key), project, output,
                                    with_predictions=with_predictions,
                                    keep_identities=keep_identities,
                                    exclude_rejected=exclude_rejected, reading=Reading(workers),
                                    progress=True, **settings)
    click.echo(report.inputs.tally.reconciliation())
    click.echo(report.inputs.scores)
    if missing := missing_extra("ppi", included=False):
        click.echo(f"warning: each agent model's scores not computed: sotopia-ls report "
                   f"{missing}", err=True)
    click.echo(f"wrote {output / 'report.html'}")



@click.command("plan")
@click.option(
    "--from-export", "from_export", required=True,
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="The pilot's export folder (`sotopia-ls export` of a project the judges evaluated).",
)
@click.option("--width", type=click.FloatRange(min=0, min_open=True), required=True,
              help="Target width of each dimension's 95% interval of the mean, in points.")
@click.option("--study-episodes", type=click.IntRange(min=2),
              help="Episodes of the whole study, every one scored by the judge [default: as "
              "many as the judge scored in the pilot].")
@click.option("--alt-test-epsilon", type=click.FloatRange(0, 1), default=DEFAULT_EPSILON,
              show_default=True, metavar="ε", help="The alternative annotator test's ε.")
@click.option("--resamples", type=click.IntRange(min=10), default=DEFAULT_PLAN_RESAMPLES,
              show_default=True, help="Resamples of the pilot behind each figure.")
@click.option("--seed", type=int, default=0, show_default=True,
              help="Seed of the resampling; the same seed and pilot give the same figures.")
def plan_command(from_export: Path, width: float, study_episodes: int | None,
                 alt_test_epsilon: float, resamples: int, seed: int) -> None:
    """How many people to pay for, from a pilot: per judge, agent model (all together, then
    each) and dimension, the episodes people must rate for a 95% interval of the mean --width points wide, alone and with the judge's
    scores on every episode (prediction-powered); and the units with three raters on which
    the judge passes the alternative annotator test in 80% of the resamples. Found by
    resampling the pilot; the assumptions are printed under the table.

    Example:

        sotopia-ls plan --from-export results/ --width 1

        sotopia-ls plan --from-export results/ --width 0.5 --study-episodes 400

        sotopia-ls plan --from-export results/ --width 1 --alt-test-epsilon 0.15 --seed 7
    """
    require_extra("export")
    require_extra("ppi", included=False)
    from ..report.plan import plan_export

    with failures_as_messages():
        planned = plan_export(from_export, width, study_episodes=study_episodes,
                              epsilon=alt_test_epsilon, resamples=resamples, seed=seed)
    click.echo(planned.table.astype(object).fillna("–").to_string(index=False))
    for line in planned.assumptions:
        click.echo(f"- {line}")
