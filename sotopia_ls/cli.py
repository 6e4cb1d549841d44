"""``sotopia-ls``: the command line. Each command is a thin wrapper over one public function."""

from __future__ import annotations

import importlib
import json
import os
import shutil
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


import click

from . import samples
from .adjudication.screen import (
    ADJUDICATION_CONFIG_FILE,
    adjudication_config_is_current,
    write_adjudication_config,
)
from .config import (
    LABELING_CONFIG_FILE,
    instructions_html,
    labeling_config_is_current,
    write_labeling_config,
)
from .errors import InvalidInput, redacted
from .evaluate import WRITE_BATCH, evaluate_project
from .extras import require_extra
from .folders import replaced_folder, write_file
from .importer import FORMATS, LoadResult, load_episodes
from .importer.load import parse_agent_models, with_agent_models
from .judge import MAX_REASONING_CHARS, LLMJudge
from .labelstudio import migrated, server
from .labelstudio.client import add_annotators, address, connect, invite_links
from .labelstudio.push import (
    DEFAULT_BATCH_SIZE,
    PushReport,
    check_project,
    import_episodes,
    write_tasks,
)
from .ml_backend import is_loopback
from .options import chat_endpoint, endpoint_options, failures_as_messages, server_options
from .scores import DISAGREEMENT_THRESHOLD

DEFAULT_TITLE = "Sotopia human evaluation"


class LazyGroup(click.Group):
    """A group whose commands kept in other modules are imported only when one runs or help
    lists them (click's lazy-loading pattern): ``study serve`` then never imports the export's
    libraries. ``lazy`` maps a command's name to ``module:attribute``."""

    def __init__(self, *args: Any, lazy: dict[str, str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy = lazy

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted([*super().list_commands(ctx), *self.lazy])

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in self.lazy:
            return super().get_command(ctx, name)
        module, attribute = self.lazy[name].split(":")
        return getattr(importlib.import_module(module, __package__), attribute)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]}, lazy={
    "export": ".exporter.commands:export_command",
    "report": ".exporter.commands:report_command",
    "plan": ".exporter.commands:plan_command",
    "ml-backend": ".ml_backend.commands:ml_backend_command",
    "connect": ".ml_backend.commands:connect_command",
    "study": ".study.commands:study_command",
})
@click.version_option(package_name="sotopia-label-studio")
def main() -> None:
    """Human evaluation of Sotopia episodes in Label Studio.

    Import episodes as tasks, let annotators rate both agents on the SOTOPIA-EVAL
    dimensions of the rubric, then export validated scores and agreement.
    """


@main.command("config")
@click.option(
    "-o", "--output", type=click.Path(dir_okay=False, path_type=Path),
    default=Path(LABELING_CONFIG_FILE), show_default=True,
    help="Where to write the labeling config.",
)
@click.option("--check", is_flag=True, help="Do not write; exit 1 if a file is out of date.")
@click.option(
    "--instructions", type=click.Path(dir_okay=False, path_type=Path),
    help="Also write the annotator instructions (HTML) to this file.",
)
@click.option(
    "--adjudication-output", type=click.Path(dir_okay=False, path_type=Path),
    show_default=f"{ADJUDICATION_CONFIG_FILE} beside the labeling config",
    help="Where to write the adjudication project's labeling config (`sotopia-ls adjudicate`).",
)
def config_command(output: Path, check: bool, instructions: Path | None,
                   adjudication_output: Path | None) -> None:
    """Write the labeling configs generated from the dimension rubric: the raters' and the
    adjudicators'.

    Example:

        sotopia-ls config -o labeling_config.xml --instructions instructions.html
    """
    adjudication_output = adjudication_output or output.with_name(ADJUDICATION_CONFIG_FILE)
    if check:
        for path, current in ((output, labeling_config_is_current),
                              (adjudication_output, adjudication_config_is_current)):
            if not current(path):
                raise click.ClickException(f"{path} is out of date: run sotopia-ls config")
            click.echo(f"{path} is up to date")
        return
    with failures_as_messages():
        click.echo(f"wrote {write_labeling_config(output)}")
        click.echo(f"wrote {write_adjudication_config(adjudication_output)}")
        if instructions is not None:
            click.echo(f"wrote {write_file(instructions, instructions_html())}")


def _echo_load(result: LoadResult) -> None:
    for source, count in result.counts.items():
        click.echo(f"  {source}: {count} episode(s)")
    if result.duplicates:
        click.echo(f"  {result.duplicates} duplicate episode(s) ignored (same episode id)")
    click.echo(f"parsed {len(result.episodes)} episode(s), {len(result.problems)} invalid record(s)")
    for gap, count in result.evaluation_gaps().items():
        click.echo(f"  the stored evaluation of {count} episode(s) has no {gap} score: kept, "
                   "that score left empty")
    for problem in result.problems:
        click.echo(f"  invalid: {problem}", err=True)


def _write_rejects(path: Path, result: LoadResult) -> None:
    write_file(path, "".join(json.dumps(problem.__dict__) + "\n" for problem in result.problems))


def _echo_repairs(report: PushReport) -> None:
    if report.retried_batches:
        click.echo(f"{report.retried_batches} request(s) failed after the server may have "
                   "saved them: checked what was saved and sent only the rest")
    if report.removed:
        click.echo(f"repaired: removed {len(report.removed)} surplus task(s) that repeated an "
                   f"episode and held no annotation (task ids {_ids(report.removed)})")
    _warn_worked_on(report.kept_copies)


def _warn_worked_on(worked_on: dict[str, list[int]]) -> None:
    for episode, tasks in worked_on.items():
        click.echo(f"warning: episode {episode} is in {len(tasks)} annotated tasks "
                   f"({_ids(tasks)}); all kept, the export counts each annotator once",
                   err=True)


def _ids(ids: list[int]) -> str:
    shown = ", ".join(map(str, ids[:10]))
    return shown + (f" and {len(ids) - 10} more" if len(ids) > 10 else "")


def _echo_push(report: PushReport, url: str) -> None:
    """What the import did, and the project's whole address (``url``: the server's)."""
    click.echo(
        f"imported {report.imported} task(s) in {report.batches} batch(es); "
        f"{report.already_present} already in the project"
        + (f"; {report.with_predictions} with predictions" if report.with_predictions else "")
    )
    _echo_repairs(report)
    click.echo(f"project: {url}/projects/{report.project_id}/data")


@main.command("import")
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
@click.option(
    "--format", "format_", type=click.Choice(FORMATS),
    help="Read every file as this format instead of detecting it per file.",
)
@server_options
@click.option("--project", help="Id or exact title of an existing project to import into.")
@click.option(
    "--title", default=DEFAULT_TITLE, show_default=True,
    help="Title of the project to reuse or create when --project is not given.",
)
@click.option(
    "--annotations-per-task", type=click.IntRange(min=1), default=2, show_default=True,
    help="Annotators per episode, for a project created by this command.",
)
@click.option(
    "--with-predictions", is_flag=True,
    help="Attach each episode's stored model evaluation as a prediction. Off by default: "
    "pre-filled answers anchor annotators.",
)
@click.option(
    "--skip-invalid", is_flag=True,
    help="Import the valid episodes even if some records are invalid; the invalid ones go "
    "to the rejects file.",
)
@click.option(
    "--rejects", type=click.Path(dir_okay=False, path_type=Path),
    default=Path("rejects.jsonl"), show_default=True,
    help="Where --skip-invalid writes the invalid records (file, record, reason, field).",
)
@click.option("--dry-run", is_flag=True, help="Parse and write tasks to --output; no server.")
@click.option(
    "-o", "--output", type=click.Path(dir_okay=False, path_type=Path),
    help="With --dry-run: the Label Studio task JSON to write.",
)
@click.option(
    "--batch-size", type=click.IntRange(min=1), default=DEFAULT_BATCH_SIZE, show_default=True,
    help="Tasks per bulk import request.",
)
@click.option(
    "--models", "agent_models", multiple=True, metavar="TAG=MODEL1,MODEL2|PLACEHOLDER=MODEL",
    help="The models of agent 1 and agent 2 in the episodes with this source tag, where the "
    "file names none (oTree CSVs); or the model a placeholder the files give stands for "
    "(custom_model=mistral-instruct), whichever agent it plays. Repeatable.",
)
def import_command(
    paths: tuple[Path, ...],
    format_: str | None,
    url: str | None,
    api_key: str | None,
    project: str | None,
    title: str,
    annotations_per_task: int,
    with_predictions: bool,
    skip_invalid: bool,
    rejects: Path,
    dry_run: bool,
    output: Path | None,
    batch_size: int,
    agent_models: tuple[str, ...],
) -> None:
    """Import Sotopia episodes (files or folders) as Label Studio tasks.

    Formats are detected per file: oTree episode JSON, Sotopia EpisodeLog JSON/JSONL, the
    released-dump JSONL, and oTree human-eval CSVs. Reruns are safe: episodes already in the
    project (same episode id) are not imported again. If any record is invalid nothing is
    imported unless --skip-invalid is given.

    Example:

        export LABEL_STUDIO_URL=http://127.0.0.1:8080 LABEL_STUDIO_API_KEY=...

        sotopia-ls import episodes/ dump.jsonl --title "Pilot study"

        sotopia-ls import episodes/ --dry-run -o tasks.json

        sotopia-ls import human_eval/ --models mistral=mistral-instruct,gpt-3.5-turbo

        sotopia-ls import otree_episodes/ --models custom_model=mistral-instruct
    """
    if dry_run and output is None:
        raise click.UsageError("--dry-run needs -o/--output for the task file")
    with failures_as_messages():
        models = parse_agent_models(agent_models)
        result = load_episodes(paths, format=format_)
        result.episodes = with_agent_models(result.episodes, models)
        _echo_load(result)
        if result.problems:
            if not skip_invalid:
                raise InvalidInput(result.problems)
            _write_rejects(rejects, result)
            click.echo(f"wrote {len(result.problems)} rejected record(s) to {rejects}")
        if dry_run:
            count = write_tasks(result.episodes, output, with_predictions=with_predictions)
            click.echo(f"wrote {count} task(s) to {output}")
            return
        client = connect(url, api_key)
        target, created, report = import_episodes(
            client, result.episodes, project=project, title=title,
            annotations_per_task=annotations_per_task, with_predictions=with_predictions,
            batch_size=batch_size,
        )
    if created:
        click.echo(f"created project {target.id} {target.title!r}")
    _echo_push(report, address(client))


@main.command("check")
@server_options
@click.option("--project", required=True, help="Id or exact title of the project to check.")
@click.option(
    "--repair/--no-repair", default=True, show_default=True,
    help="Delete surplus copies of an episode that nobody has worked on, or only report them.",
)
def check_command(url: str | None, api_key: str | None, project: str, repair: bool) -> None:
    """Check that a project holds each episode once, and repair it.

    Of several tasks of one episode, the first one anyone worked on (else the oldest) stays;
    the other copies are deleted when nobody has annotated, skipped or drafted them, and
    listed, never deleted, when somebody has.

    Example:

        sotopia-ls check --project "Pilot study"

        sotopia-ls check --project 3 --no-repair
    """
    with failures_as_messages():
        project_id, copies = check_project(connect(url, api_key), project, repair=repair)
    if not copies.surplus and not copies.worked_on:
        click.echo(f"project {project_id}: every episode is in exactly one task")
    if copies.surplus:
        done = "removed" if repair else "found (run again without --no-repair to remove them)"
        click.echo(f"{len(copies.surplus)} surplus task(s) that repeat an episode and hold no "
                   f"annotation {done}: task ids {_ids(copies.surplus)}")
    _warn_worked_on(copies.worked_on)


@main.command("up")
@click.argument("paths", nargs=-1, type=click.Path(exists=True, path_type=Path))
@click.option(
    "--data-dir", type=click.Path(file_okay=False, path_type=Path),
    default=server.DEFAULT_DATA_DIR, show_default=True,
    envvar=server.DATA_DIR_ENV, show_envvar=True,
    help="Label Studio's SQLite database, files and the demo login; kept between runs, "
    "private to you. Relative to the current folder. While up runs, commands started in the "
    "current folder use this server and its key when given no --url and --api-key.",
)
@click.option("--host", default=server.DEFAULT_HOST, show_default=True, help="Address to bind.")
@click.option("--port", type=int, default=8080, show_default=True, help="Port to listen on.")
@click.option(
    "--title", default=f"{DEFAULT_TITLE} (demo)", show_default=True,
    help="Title of the demo project (reused when it exists).",
)
@click.option(
    "--allow-local-backends", is_flag=True,
    help="Let Label Studio call a pre-annotation backend on 127.0.0.1 or a private address "
    "(its guard against that is on by default). Only with a loopback --host.",
)
@click.option(
    "--task-lock-minutes", type=click.IntRange(min=1), default=60, show_default=True,
    help="How long a task opened in the label stream stays reserved for its annotator "
    "(Label Studio's own default is a day, which stalls abandoned tasks).",
)
@click.option(
    "--serve/--no-serve", default=True, show_default=True,
    help="Keep the server running until Ctrl-C (or SIGTERM, SIGHUP), or stop it once the "
    "project is ready.",
)
def up_command(
    paths: tuple[Path, ...], data_dir: Path, host: str, port: int, title: str,
    allow_local_backends: bool, task_lock_minutes: int, serve: bool,
) -> None:
    """Start a local Label Studio with a ready-to-annotate demo project.

    Starts Label Studio on SQLite (loopback only by default, signup closed but for the invite
    link), creates the login on first run, creates the project with the generated labeling
    config, imports the sample episodes shipped with the package (or PATHS), and prints the
    address and login. Label Studio stops with this command, however it is stopped.

    Example:

        sotopia-ls up --port 8080

        sotopia-ls up --allow-local-backends     # then: sotopia-ls ml-backend, sotopia-ls connect
    """
    if allow_local_backends and not is_loopback(host):
        raise click.UsageError("--allow-local-backends is only for a server bound to a loopback "
                               "address: elsewhere it lets anyone make Label Studio call your "
                               "private network")
    paths = paths or samples.DEMO
    with failures_as_messages():
        credentials = server.Credentials.load_or_create(data_dir / server.CREDENTIALS_FILE)
        result = load_episodes(paths)
        _echo_load(result)
        result.raise_on_problems()
        fresh = (not (data_dir / migrated.DATABASE_FILE).exists()
                 and not migrated.restore_sqlite(data_dir))
        first = " (its first start migrates a new database: a minute)" if fresh else ""
        click.echo(f"starting Label Studio on http://{host}:{port}{first}…")
        with _stopped_by_signals():
            running = server.start(data_dir, credentials, host=host, port=port,
                                   allow_local_ml_backends=allow_local_backends,
                                   task_lock_minutes=task_lock_minutes)
            with running, server.announced(data_dir, running.url):
                client = connect(running.url, credentials.api_key)
                target, _, report = import_episodes(client, result.episodes, title=title)
                _echo_push(report, address(client))
                command = _sotopia_ls()
                click.echo(
                    f"\nLabel Studio is ready: {running.url}\n"
                    f"  login:    {credentials.username} (the owner, Label Studio's admin)\n"
                    f"  password: {credentials.password}\n"
                    f"  (kept in {data_dir / server.CREDENTIALS_FILE}, with the API key)\n"
                    f"  commands run in this folder use this server and key while it runs:\n"
                    f"    {command} export --project {target.id} -o results/\n"
                    f"  colleagues: {command} annotators --project {target.id}"
                )
                if serve:
                    click.echo("Press Ctrl-C to stop.")
                    try:
                        running.process.wait()
                    except KeyboardInterrupt:
                        click.echo("stopping…")


def _sotopia_ls() -> str:
    """How this shell calls the command: its name when on PATH, else its path (scripts/demo
    installs it into .venv/bin, which a shell has on PATH only once activated)."""
    beside = Path(sys.executable).parent / "sotopia-ls"
    if shutil.which("sotopia-ls") or not beside.exists():
        return "sotopia-ls"
    return os.path.relpath(beside) if beside.is_relative_to(Path.cwd()) else str(beside)


@contextmanager
def _stopped_by_signals() -> Iterator[None]:
    """SIGTERM, SIGHUP and SIGINT stop the command as Ctrl-C does, so that what it started is
    stopped on the way out, not left running on its port. SIGINT is set too because a command
    started in the background by a shell inherits it ignored."""
    def interrupt(number: int, _: object) -> None:
        raise KeyboardInterrupt

    previous = {number: signal.signal(number, interrupt)
                for number in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)}
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


@main.command("annotators")
@server_options
@click.option("--project", help="Id or exact title of a project: also print its label-stream "
              "link, which lands a new annotator straight in the queue.")
@click.option("--add", "emails", multiple=True, metavar="EMAIL",
              help="Make an account that logs in with this email and --password (repeatable); "
              "an email that has one already is left as it is.")
@click.option("--password", envvar="SOTOPIA_LS_ANNOTATOR_PASSWORD", show_envvar=True,
              help="The accounts' password (with --add; Label Studio's rules: 8 characters or "
              "more). Never printed: tell it to the annotators yourself.")
def annotators_command(url: str | None, api_key: str | None, project: str | None,
                       emails: tuple[str, ...], password: str | None) -> None:
    """Print the links that let colleagues join as annotators, or make their accounts.

    Label Studio's signup is closed except through the invite link (sotopia-ls up closes it);
    with --project, the link sends a new annotator straight into that project's label stream.
    --add makes the accounts through that same signup, so they log in like any other. What an
    annotator can see and do in Label Studio Community: README, "What Label Studio Community
    cannot guarantee".

    Example:

    \b
        sotopia-ls annotators --project "Pilot study"
        export SOTOPIA_LS_ANNOTATOR_PASSWORD=...   # tell it to the annotators
        sotopia-ls annotators --add rater1@lab.example --add rater2@lab.example
    """
    if emails and not password:
        raise click.UsageError("--add needs --password or SOTOPIA_LS_ANNOTATOR_PASSWORD")
    with failures_as_messages():
        client = connect(url, api_key)
        made = add_annotators(client, emails, password or "") if emails else {}
        links = invite_links(client, project)
    for email, new in made.items():
        click.echo(f"{email}: {'account made' if new else 'has an account already'}")
    if made:
        click.echo(f"log in with the email and the password at {links.login}")
    click.echo(f"invite link (anyone holding it can sign up): {links.invite}")
    if links.stream:
        click.echo(f"label-stream link for project {links.project_id}: {links.stream}")


@main.command("samples")
@click.argument(
    "destination", type=click.Path(file_okay=False, path_type=Path),
    default=Path("sotopia-samples"),
)
def samples_command(destination: Path) -> None:
    """Copy the Sotopia sample data shipped with the package into DESTINATION.

    Real episodes of every input format (oTree JSON, EpisodeLog, dump JSONL) and the oTree
    human-evaluation CSVs, with their provenance and licences, to try the commands on.

    Example:

        sotopia-ls samples my-samples && sotopia-ls import my-samples --dry-run -o tasks.json
    """
    with failures_as_messages(), replaced_folder(destination, lambda name: False) as staging:
        shutil.copytree(samples.SAMPLES, staging, dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns("__init__.py", "__pycache__"))
    click.echo(f"copied the Sotopia samples to {destination}/ (see its README.md)")


@main.command("evaluate")
@server_options
@click.option("--project", required=True, help="Id or exact title of the project.")
@endpoint_options
@click.option("--attempts", type=click.IntRange(1, 5), default=2, show_default=True,
              help="Answers asked per episode while they are malformed or out of range (a "
              "request that got no answer is not asked again).")
@click.option("--max-reasoning-chars", type=click.IntRange(min=1), default=MAX_REASONING_CHARS,
              show_default=True, help="Longest reasoning kept per dimension; a longer one "
              "makes the answer unusable.")
@click.option("--batch-size", type=click.IntRange(min=1), default=WRITE_BATCH,
              show_default=True, help="Evaluations written to Label Studio at a time, as they come.")
def evaluate_command(
    url: str | None, api_key: str | None, project: str, model: str, base_url: str,
    api_key_env: str, workers: int, timeout: float, retries: int, attempts: int,
    max_reasoning_chars: int, batch_size: int,
) -> None:
    """Have an LLM judge evaluate the project's episodes, for comparing humans with it.

    Sotopia's own evaluation prompt, with the rubric's dimensions and ranges, goes to the
    model for each task with no evaluation by it yet; the answer is kept in the task's meta
    (sotopia_judges), out of annotators' sight, where export, report and the backend's
    stored provider read it. Run it again to ask for what is missing, or with another
    --model to add a second judge. Malformed or out-of-range answers are asked again, then
    reported, never stored.

    Example:

        OPENAI_API_KEY=... sotopia-ls evaluate --project "Pilot study" --model gpt-4o-mini

        sotopia-ls evaluate --project 3 --model qwen2.5:7b --base-url http://127.0.0.1:11434/v1
    """
    endpoint = chat_endpoint(model, base_url, api_key_env, timeout, retries)
    with failures_as_messages():
        judge = LLMJudge(endpoint, attempts, max_reasoning_chars)
        run = evaluate_project(connect(url, api_key), project, judge, workers=workers,
                               batch_size=batch_size, progress=True)
    click.echo(f"project {run.project_id}: {run.tasks} task(s), {run.already} already judged "
               f"by {model}; {run.judged} evaluation(s) added to the tasks' meta")
    for task, failure in run.failed.items():
        episode = f"episode {failure.episode} (task {task})" if failure.episode else f"task {task}"
        click.echo(f"  no evaluation for {episode}: {redacted(failure.reason)}", err=True)
    if run.failed:
        raise click.ClickException(
            f"{len(run.failed)} task(s) left without an evaluation by {model} (nothing "
            "stored for them); run the command again to ask for them")


@main.command("adjudicate")
@server_options
@click.option("--project", required=True, help="Id or exact title of the study project.")
@click.option("--threshold", type=click.IntRange(min=0), default=DISAGREEMENT_THRESHOLD,
              show_default=True, help="An episode is disputed when, on any dimension and "
              "agent, its highest and lowest ratings differ by more than this.")
@click.option("--into", help="Id or exact title of the adjudication project. Default: "
              "\"<study title> adjudication\", created with the adjudication screen when there "
              "is none.")
@click.option("--exclude-rejected", is_flag=True,
              help="Leave out the annotations the study review marked reject.")
def adjudicate_command(url: str | None, api_key: str | None, project: str, threshold: int,
                       into: str | None, exclude_rejected: bool) -> None:
    """Send the episodes whose raters disagree to an adjudication project.

    The study project is read as `sotopia-ls export` reads it. Each disputed episode becomes
    one task of the adjudication project: the episode, each rater's scores and rationales
    side by side under the pseudonyms rater A, B, C, and for each disputed dimension and
    agent an adjudicated rating and a note to give. An episode already there is not sent
    again: run it again as ratings come in. `sotopia-ls export --adjudication-project`
    writes the adjudicated scores to adjudicated_scores.csv.

    Example:

        sotopia-ls adjudicate --project "Pilot study"

        sotopia-ls adjudicate --project 3 --threshold 3 --into "Pilot adjudication"
    """
    require_extra("export")
    from .adjudication.project import adjudicate

    with failures_as_messages():
        report = adjudicate(connect(url, api_key), project, threshold=threshold, into=into,
                            exclude_rejected=exclude_rejected)
    target = report.project
    if report.created:
        click.echo(f"created adjudication project {target.id} {target.title!r}")
    click.echo(f"{report.rated} rated episode(s), {report.disputed} disputed (ratings more "
               f"than {threshold} apart); added {len(report.added)} to project {target.id}, "
               f"{len(report.already_there)} already there")
    if report.changed:
        click.echo(f"rated again since sent (their adjudication tasks show the ratings as "
                   f"sent): {', '.join(report.changed)}")

