"""``sotopia-ls study``: set up, run and follow a blind crowd study.

Each command is a thin layer over one public function. The web stack (Starlette, uvicorn,
SQLAlchemy) comes with the ``study`` extra and is imported only when a command needs it, so
``sotopia-ls`` works without it.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, get_args

import click
from click.core import ParameterSource

from ..errors import keep_secret, redacted
from ..extras import require_extra
from ..options import chat_endpoint, endpoint_options, failures_as_messages, server_options
from .serving.editor import EDITOR_DIR_ENV, PINNED, fetch_editor
from .payment.prolific import API_URL, HOOK_PATH, HOOK_SECRET_ENV, RETRIES, TOKEN_VARIABLE
from .states import AssignmentState
from .settings import (
    DATABASE_ENV,
    DISAGREEMENT_THRESHOLD,
    MOST_GOLD,
    PASSWORD_PLACES,
    QUALIFYING_DISTANCE,
    SECRET_ENV,
    STUDY_FILE,
    Currency,
    Practice,
    Qualification,
    StudyFile,
    read_study,
)


def _web_stack() -> Any:
    """The modules that need the study extra's web stack, or one line naming the install
    command. The statistics the extra includes are not asked for: the gateway serves without
    them, and the running agreement names what it lacks (``live.figures_unavailable``)."""
    require_extra("study", included=False)
    from . import serve, status, store

    return serve, status, store


def _study_option(command: Any) -> Any:
    return click.option(
        "--study", "study_path", type=click.Path(dir_okay=False, path_type=Path),
        default=STUDY_FILE, show_default=True, help="The study file written by `study init`.",
    )(command)


def _database_option(command: Any) -> Any:
    return click.option(
        "--database", envvar=DATABASE_ENV, show_envvar=True,
        help="The gateway's database URL, instead of the study file's (e.g. "
        "postgresql://user@host/db; a password belongs here, or in PGPASSWORD or ~/.pgpass, "
        "never in the file).",
    )(command)


def _prolific_options(command: Any) -> Any:
    """``--prolific-token`` (from the environment) and ``--prolific-url``."""
    command = click.option(
        "--prolific-url", "api_url", default=API_URL, show_default=True,
        help="Prolific's API address (https; http only on this machine).")(command)
    return click.option(
        "--prolific-token", "token", envvar=TOKEN_VARIABLE, show_envvar=True,
        help="Prolific API token, for --send. Never printed. Safer in the environment "
        "variable: a command line shows in the process list and the shell's history.")(command)


@click.group("study")
def study_command() -> None:
    """Run a blind crowd study: a participant gateway between Prolific and Label Studio.

    Participants arrive from a Prolific study link, read the instructions, rate episodes in
    Label Studio's own editor (never seeing Label Studio, its key or anyone else's work) and
    return to Prolific with the completion code. Each episode gets exactly k raters.

    Example:

        sotopia-ls study fetch-editor

        sotopia-ls study init --name pilot --project "Pilot study" --completion-code C1A2B3

        export SOTOPIA_LS_STUDY_SECRET=$(python3 -c 'import secrets; print(secrets.token_urlsafe(32))')

        sotopia-ls study serve

        sotopia-ls study status
    """


@study_command.command("init")
@click.option("--name", required=True,
              help="The study's name in its participant link (/s/NAME): lowercase letters, "
              "digits and dashes.")
@click.option("--project", required=True, help="Id or exact title of the Label Studio project.")
@click.option("--completion-code", required=True, help="The Prolific study's completion code.")
@click.option("--completion-url", "completion_link",
              help="Where participants go when done [default: Prolific's completion link "
              "with the code].")
@click.option("--raters-per-episode", type=click.IntRange(1, 20), default=2, show_default=True,
              help="k: distinct participants who rate each episode.")
@click.option("--episodes-per-participant", type=click.IntRange(1, 100), default=2,
              show_default=True, help="m: episodes one participant rates in a session.")
@click.option("--lease-minutes", type=click.FloatRange(min=1, max=24 * 60), default=30,
              show_default=True, help="How long an episode is held for a participant.")
@click.option("--no-slots-code",
              help="Code for participants who arrive when nothing is left to rate.")
@click.option("--no-slots-url", "no_slots_link",
              help="Where those participants go [default: Prolific's link with that code].")
@click.option("--title", default="Rate social interactions", show_default=True,
              help="Title of the participant pages.")
@click.option("--database", help="The gateway's database URL [default: SQLite in "
              "var/study/NAME.sqlite3 of the folder `study serve` runs in]; a password in it "
              "is left out of the file.")
@click.option("--secret-env", default=SECRET_ENV, show_default=True,
              help="Environment variable that will hold the session key.")
@click.option("--qualification", "is_qualification", is_flag=True,
              help="This study is a qualification round: it serves gold episodes only and "
              "scores whoever completes it; passers get the completion code and join its "
              "allow-list, the others the screen-out code (never their score).")
@click.option("--screen-out-code",
              help="Code for participants who complete the qualification round without "
              "passing (required with --qualification).")
@click.option("--screen-out-url", "screen_out_link",
              help="Where those participants go [default: Prolific's link with that code].")
@click.option("--screen-out-reward", metavar="AMOUNT",
              type=click.FloatRange(min=0, min_open=True),
              help="What Prolific pays each participant given the screen-out code, e.g. 0.40 "
              "(its fixed screen-out payment, in --currency; with --qualification): `study "
              "publish` sends it. Without it, they are reviewed by hand.")
@click.option("--max-distance", type=click.IntRange(0, 20),
              help="A participant passes the qualification round when every rating is within "
              f"this many points of the reference [default: {QUALIFYING_DISTANCE}, "
              "Sotopia-pi's rule].")
@click.option("--requires-qualification", metavar="NAME",
              help="Admit only the participants who passed the qualification round NAME (a "
              "study on the same database); anyone else is asked to return the study.")
@click.option("--gold-share", type=click.FloatRange(0, MOST_GOLD), default=0, show_default=True,
              help="Share of each participant's episodes that are gold episodes, hidden among "
              "the others (each participant's distance to the references is kept).")
@click.option("--gold-references", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="CSV in the oTree layout holding the gold episodes' reference ratings (pk: "
              "the episode id) [default: the project's ground-truth annotations].")
@click.option("--third-rater-share", type=click.FloatRange(0, 1), default=0, show_default=True,
              help="Share of the episodes rated by three participants rather than "
              "--raters-per-episode (below 3): the episodes on which the report tests whether "
              "a judge can replace a person (the alternative annotator test).")
@click.option("--adaptive", "is_adaptive", is_flag=True,
              help="Adaptive extra raters: an episode whose ratings differ by more than the "
              "disagreement threshold on any dimension gets one more slot, for the next "
              "participant, up to --max-raters.")
@click.option("--disagreement-threshold", type=click.IntRange(0, 20),
              help="Ratings of an episode disagree when two differ by more than this "
              f"[default: {DISAGREEMENT_THRESHOLD}] (with --adaptive).")
@click.option("--max-raters", type=click.IntRange(2, 21),
              help="Most raters an episode may get, added slots included [default: "
              "--raters-per-episode + 1] (with --adaptive).")
@click.option("--target-width", type=click.FloatRange(min=0, min_open=True),
              help="Stop adding slots once every dimension's alpha interval on the dashboard's "
              "latest figures is narrower than this (with --adaptive).")
@click.option("--practice", "practice_references",
              type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="A practice step before the first episode, on the episodes of this CSV in the "
              "oTree layout (pk, each rating and its rationale: the reference and its reason); "
              "the participant sees their scores beside it, with the rubric's example of "
              "their mistake. Practice ratings are never data.")
@click.option("--practice-attempts", type=click.IntRange(1, 10),
              help="Practice attempts a participant is given [default: 2] (with --practice).")
@click.option("--practice-distance", type=click.IntRange(0, 20),
              help="A practice attempt passes when every rating is within this many points of "
              f"the reference [default: {QUALIFYING_DISTANCE}] (with --practice).")
@click.option("--practice-screen-out-code",
              help="Code for participants who fail every practice attempt (required with "
              "--practice).")
@click.option("--practice-screen-out-reward", metavar="AMOUNT",
              type=click.FloatRange(min=0, min_open=True),
              help="What Prolific pays each participant given the practice's screen-out code "
              "(as --screen-out-reward; with --practice).")
@click.option("--reward", metavar="AMOUNT", type=click.FloatRange(min=0, min_open=True),
              help="Prolific's reward per submission (a visit), e.g. 2.50: `study status` and "
              "`study review` then give the pay per hour it comes to, warning under "
              "Prolific's minimum (with --currency).")
@click.option("--currency", type=click.Choice(get_args(Currency)),
              help="The currency of --reward, your Prolific account's.")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path),
              default=STUDY_FILE, show_default=True, help="Where to write the study file.")
@click.option("--force", is_flag=True, help="Replace an existing study file.")
@server_options
def init_command(project: str, output: Path, force: bool, url: str | None, api_key: str | None,
                 **options: Any) -> None:
    """Write a study file for a Label Studio project (checked on the server).

    Example:

        sotopia-ls study init --name pilot --project 3 --completion-code C1A2B3 --no-slots-code NOSLOT1

        sotopia-ls study init --name screening --project 4 --completion-code Q1PASS --qualification --screen-out-code Q1OUT --gold-references gold.csv

        sotopia-ls study init --name main --project 3 --completion-code C1A2B3 --requires-qualification screening --gold-share 0.2

        sotopia-ls study init --name main --project 3 --completion-code C1A2B3 --adaptive --max-raters 3 --target-width 0.3

        sotopia-ls study init --name pilot --project 3 --completion-code C1A2B3 --reward 2.50 --currency GBP

        sotopia-ls study init --name pilot --project 3 --completion-code C1A2B3 --practice practice.csv --practice-screen-out-code P1OUT

        sotopia-ls study init --name pilot --project 3 --completion-code C1A2B3 --third-rater-share 0.5
    """
    serve, _, _ = _web_stack()
    from ..labelstudio.client import connect

    with failures_as_messages():
        client = connect(url, api_key)
        study = serve.init_study(client, output, project=project, overwrite=force, **options)
        click.echo(f"wrote {output}: study {study.name} on project {study.project}, "
                   f"{study.raters_per_episode} raters per episode, "
                   f"{study.episodes_per_participant} episodes per participant")
        click.echo(serve.editor_notice(client))
    if study.qualification is not None:
        click.echo(f"A qualification round: whoever has every rating within "
                   f"{study.qualification.max_distance} of the reference gets "
                   f"{study.completion_code} and joins its allow-list; the others get "
                   f"{study.qualification.screen_out_code}{_paid(study, study.qualification)}.")
    if study.third_rater_share:
        click.echo(f"{study.third_rater_share:.0%} of the episodes get a third rater.")
    if study.adaptive is not None:
        click.echo(f"Adaptive extra raters: an episode whose ratings differ by more than "
                   f"{study.adaptive.threshold} gets one more slot, up to "
                   f"{study.adaptive.max_raters} raters.")
    if study.practice is not None:
        click.echo(f"A practice step first: {study.practice.attempts} attempt(s) to have every "
                   f"rating within {study.practice.max_distance} of the reference; who fails "
                   f"them all gets {study.practice.screen_out_code}"
                   f"{_paid(study, study.practice)}.")
    if study.requires_qualification:
        click.echo(f"Admits only the allow-list of the qualification round "
                   f"{study.requires_qualification} (on the same database).")
    click.echo("On Prolific, set the study URL to\n  "
               + serve.participant_link(study, "https://YOUR-GATEWAY-ADDRESS"))
    click.echo(f"Before `sotopia-ls study serve`, set {study.secret_env} to a random key.")
    if options["database"] is not None and study.database != options["database"]:
        click.echo(f"The database password was left out of {output}: give it to the gateway "
                   f"in {PASSWORD_PLACES}.")


def _paid(study: StudyFile, part: Qualification | Practice) -> str:
    """What Prolific pays for ``part``'s screen-out code, as ``study init`` says it."""
    if not part.screen_out_reward or study.reward is None:
        return ""
    from .payment.hourly import money

    return f", paid {money(part.screen_out_reward, study.reward.currency)} by Prolific"


@study_command.command("serve")
@_study_option
@_database_option
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on; any but loopback needs --public.")
@click.option("--port", type=int, default=8000, show_default=True, help="Port to listen on.")
@click.option("--public", is_flag=True,
              help="Listen on a public address, behind an HTTPS reverse proxy: session cookies "
              "are then sent over HTTPS only.")
@click.option("--prolific-hook-secret", "hook_secret", envvar=HOOK_SECRET_ENV,
              show_envvar=True,
              help="Your Prolific workspace's webhook secret: the gateway then takes Prolific's "
              f"signed calls at {HOOK_PATH} (README.md, \"Following submissions\"). Never "
              "printed; safer in the environment variable.")
@server_options
def serve_command(study_path: Path, database: str | None, host: str, port: int, public: bool,
                  hook_secret: str | None, url: str | None, api_key: str | None) -> None:
    """Run the participant gateway (uvicorn; stop with Ctrl-C).

    Needs the session key in the environment variable the study file names
    (SOTOPIA_LS_STUDY_SECRET by default) and Label Studio's address and key. Participants
    rate in Label Studio's own editor, from the installed label-studio package (else from
    `sotopia-ls study fetch-editor`). Several gateways may share one PostgreSQL
    database behind a load balancer. With a token in SOTOPIA_LS_DASHBOARD_TOKEN (or the
    variable the study file names), it also serves the researcher's dashboard at
    /researcher/NAME.

    Example:

        sotopia-ls study serve --study study.json --port 8000

        sotopia-ls study serve --host 0.0.0.0 --public --database postgresql://gateway@db/study
    """
    serve, _, _ = _web_stack()
    from ..labelstudio.client import connect

    with failures_as_messages():
        study = read_study(study_path)
        client = connect(url, api_key)
        click.echo(f"study {study.name}: database {redacted(database or study.database)}")
        click.echo("participants' link: "
                   + serve.participant_link(study, f"http://{host}:{port}"))
        click.echo(serve.dashboard_notice(study, f"http://{host}:{port}"))
        click.echo(serve.editor_notice(client))
        if hook_secret:
            keep_secret(hook_secret)
            click.echo(f"Prolific's webhook: {HOOK_PATH}")
        serve.serve_study(study, client, database=database, host=host, port=port, public=public,
                          hook_secret=hook_secret)


@study_command.command("sync")
@_study_option
@_database_option
@server_options
def sync_command(study_path: Path, database: str | None, url: str | None,
                 api_key: str | None) -> None:
    """Offer episodes imported into the project after the gateway started.

    Copies what participants may see of each new task into the gateway's database, with its
    k slots (a gold episode has none), and reads the gold references again; gateways already
    running assign them from the next request on. Episodes the study already has are left as
    they are. Prints the new ordinary episodes and the new gold episodes apart.

    Example:

        sotopia-ls import more-episodes/ --project "Pilot study"

        sotopia-ls study sync --study study.json
    """
    serve, _, _ = _web_stack()
    from ..labelstudio.client import connect

    with failures_as_messages():
        study = read_study(study_path)
        added = serve.sync_episodes(study, connect(url, api_key), database=database)
    unserved = (f", {added.unserved} new task(s) without a reference not served (a "
                "qualification round serves gold episodes only)" if added.unserved else "")
    click.echo(f"study {study.name}: {added.ordinary} new episode(s) with "
               f"{added.slots} rating slot(s), {added.gold} new "
               f"gold episode(s){unserved}")


@study_command.command("status")
@_study_option
@_database_option
def status_command(study_path: Path, database: str | None) -> None:
    """Print a study's progress: episodes done, in progress and open, leases, participants,
    minutes per episode, the pay per hour the study's reward comes to (warning under
    Prolific's minimum), and per dimension the running agreement (α and Gwet's AC2 with 95%
    intervals).

    Reads the gateway's database only; Label Studio is not asked. The agreement is the last
    one a running gateway computed, else computed once now. Ratings Label Studio
    refused are listed each with its reason and the `study retry` command that sends it again.

    Example:

        sotopia-ls study status --study study.json
    """
    _, status, store = _web_stack()
    with failures_as_messages():
        study = read_study(study_path)
        engine = store.open_store(database or study.database)
        figures = status.study_status(engine, study, agreement=True)
    # A database from the environment reaches the suggested commands the same way.
    given = click.get_current_context().get_parameter_source("database")
    options = status.study_options(
        study_path, database if given is ParameterSource.COMMANDLINE else None)
    for line in figures.lines(study, options):
        click.echo(line)


def _refused_options(command: Any) -> Any:
    """``--assignment N`` (repeatable) or ``--all``: which refused ratings a command acts on."""
    command = click.option("--all", "every", is_flag=True,
                           help="Every rating Label Studio refused.")(command)
    return click.option(
        "--assignment", "assignments", type=int, multiple=True,
        help="A refused rating's assignment id, as `study status` lists it (repeatable).",
    )(command)


def _chosen(assignments: tuple[int, ...], every: bool) -> list[int] | None:
    """The assignment ids given, or None for --all; exactly one of the two is required."""
    if bool(assignments) == every:
        raise click.UsageError("give --assignment N (one or more) or --all")
    return None if every else list(assignments)


@study_command.command("retry")
@_study_option
@_database_option
@_refused_options
@server_options
def retry_command(study_path: Path, database: str | None, assignments: tuple[int, ...],
                  every: bool, url: str | None, api_key: str | None) -> None:
    """Send ratings Label Studio refused to it again, once their cause is fixed.

    A refused rating stays in the gateway's database and is never sent again by itself;
    `study status` lists each with Label Studio's reason. This puts it back among the
    ratings waiting to be saved and saves them now.

    Example:

        sotopia-ls study status --study study.json

        sotopia-ls study retry --study study.json --assignment 12
    """
    chosen = _chosen(assignments, every)
    _, _, store = _web_stack()
    from ..labelstudio.client import connect
    from .outbox.saving import retry_saves, to_names
    from .serving.gateway import project_config

    with failures_as_messages():
        study = read_study(study_path)
        client = connect(url, api_key)
        states = retry_saves(store.open_store(database or study.database), client, study.name,
                             chosen, to_names(project_config(study, client)))
    for assignment_id, state in states.items():
        click.echo(f"assignment {assignment_id}: {_RETRIED[state]}")
    if not states:
        click.echo("no rating was refused: nothing to retry")


_RETRIED = {
    AssignmentState.SAVED: "saved in Label Studio",
    AssignmentState.FAILED: "refused again (see `sotopia-ls study status` for the reason)",
    AssignmentState.SAVING: "waiting to be saved (Label Studio unreachable, or a running gateway is saving it)",
}


@study_command.command("shelve")
@_study_option
@_database_option
@_refused_options
def shelve_command(study_path: Path, database: str | None, assignments: tuple[int, ...],
                   every: bool) -> None:
    """Set aside ratings Label Studio refused and that can never be saved, freeing their slots.

    Each stays in the gateway's database with its results and Label Studio's reason (state
    `shelved`), is never sent to Label Studio, and its slot goes to the next participant, so
    the episode still gets k ratings. Label Studio is not asked.

    Example:

        sotopia-ls study shelve --study study.json --assignment 12
    """
    chosen = _chosen(assignments, every)
    _, _, store = _web_stack()
    from .slots.leases import shelve_failed

    with failures_as_messages():
        study = read_study(study_path)
        shelved = shelve_failed(store.open_store(database or study.database), study.name, chosen)
    for assignment_id in shelved:
        click.echo(f"assignment {assignment_id}: shelved, its slot free for another participant")
    if not shelved:
        click.echo("no rating was refused: nothing to shelve")


def _by_kind(counts: dict[str, int]) -> str:
    return ", ".join(f"{kind} {counts[kind]}" for kind in sorted(counts)) or "none"


# `study review`'s former options and the commands that took them over.
_MOVED = {"--decisions": "decide", **dict.fromkeys(
    ("--apply", "--send", "--prolific-files", "--workspace", "--group-name", "--prolific-token",
     "--prolific-url"), "pay")}


class _ReviewCommand(click.Command):
    """``study review``: an option that moved to ``study decide`` or ``study pay`` is one line
    naming that command."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)
        except click.NoSuchOption as error:
            if error.option_name not in _MOVED:
                raise
            raise click.ClickException(f"{error.option_name} left `study review`: use "
                                       f"`sotopia-ls study {_MOVED[error.option_name]}`") from None


@study_command.command("review", cls=_ReviewCommand)
@_study_option
@_database_option
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path),
              default=Path("review.csv"), show_default=True,
              help="Where to write the review file.")
@click.option("--force", is_flag=True,
              help="Replace a review file there even when it holds decisions not recorded yet "
              "(edits not read back with `study decide`).")
def review_command(study_path: Path, database: str | None, output: Path, force: bool) -> None:
    """Write the review file: one row per Prolific submission, with a suggested decision.

    Each row holds the submission's episodes, minutes on task, quality flags, distance to
    the gold references and a suggested decision (approve, look or reject) with a message
    written for the participant and Prolific's rejection category; in a qualification round
    the verdict decides (a passer approve, a failed one screened_out: nothing to send). Edit
    the columns decision, message and category (and bonus, an approved submission's, paid
    by `study pay --send`), then record them with `study decide`; -o
    refuses to replace a file holding decisions not read back (--force replaces it). Reads
    the gateway's database only, and also prints the pay per hour the study's reward comes to.

    Example:

        sotopia-ls study review --study study.json -o review.csv
    """
    _, _, store = _web_stack()
    from .payment.hourly import hourly_pay, pay_lines
    from .screening.review import write_review

    with failures_as_messages():
        study = read_study(study_path)
        engine = store.open_store(database or study.database)
        rows = write_review(engine, study, output, force=force)
        pay = hourly_pay(engine, study)
    suggested = rows["suggested"].replace("", "no suggestion").value_counts().to_dict()
    click.echo(f"wrote {output}: {len(rows)} submission(s); suggested: {_by_kind(suggested)}")
    for line in pay_lines(study, pay):
        click.echo(line)


@study_command.command("check-rationales")
@_study_option
@_database_option
@endpoint_options
def check_rationales_command(study_path: Path, database: str | None, model: str, base_url: str,
                             api_key_env: str, workers: int, timeout: float,
                             retries: int) -> None:
    """Ask a model whether each submitted rating's rationale supports its score.

    One request per rating not checked before: the rubric's guidance and examples for its
    dimension, the score and the rationale. The verdicts go into the gateway's database, and
    `study review` shows them (rationale_check columns and details) to you alone; they change
    no suggested decision. A rating whose answer is unusable gets none: run it again.

    Example:

        OPENAI_API_KEY=... sotopia-ls study check-rationales --study study.json --model gpt-4o-mini
    """
    endpoint = chat_endpoint(model, base_url, api_key_env, timeout, retries)
    _, _, store = _web_stack()
    from .screening.rationale_check import check_rationales

    with failures_as_messages():
        study = read_study(study_path)
        run = check_rationales(store.open_store(database or study.database), study, endpoint,
                               workers)
    click.echo(f"{run.already} rating(s) checked before; now {run.supported} supported and "
               f"{run.unsupported} not, says {model}")
    for rating, reason in run.failed.items():
        click.echo(f"  no verdict for {rating}: {redacted(reason)}", err=True)
    if run.failed:
        raise click.ClickException(f"{len(run.failed)} rating(s) left without a verdict "
                                   "(nothing stored for them); run the command again to ask")


@study_command.command("decide")
@click.argument("edited", type=click.Path(dir_okay=False, path_type=Path))
@_study_option
@_database_option
@server_options
def decide_command(edited: Path, study_path: Path, database: str | None, url: str | None,
                   api_key: str | None) -> None:
    """Record the decisions of an edited review file and mark the annotations in Label Studio.

    Every row is checked first (nothing is recorded when a row is bad); a decision recorded
    before is left as it is. `study pay` then carries the recorded decisions out on Prolific.

    Example:

        sotopia-ls study decide review.csv --study study.json
    """
    _, _, store = _web_stack()
    from ..labelstudio.client import connect
    from .screening.review import record_review

    with failures_as_messages():
        study = read_study(study_path)
        engine = store.open_store(database or study.database)
        done = record_review(edited, engine, study, connect(url, api_key))
    click.echo(f"{edited}: decisions recorded: {_by_kind(done.recorded)}; "
               f"{done.unchanged} as recorded before")
    click.echo(f"{done.marked.annotations} annotation(s) marked in Label Studio "
               f"({done.marked.tasks} task(s) changed)")
    if done.marked.unsaved:
        click.echo(f"{done.marked.unsaved} rating(s) of these submissions not yet saved in "
                   "Label Studio, so not marked: run the same command again once `study "
                   "status` shows none waiting")


@study_command.command("pay")
@_study_option
@_database_option
@click.option("--send", is_flag=True,
              help="Send it (needs a Prolific API token); each action is recorded, so a rerun "
              "sends nothing twice. A request Prolific throttles or fails is sent again up to "
              f"{RETRIES} times; a redirect is never followed.")
@click.option("--prolific-files", "files_dir", type=click.Path(file_okay=False, path_type=Path),
              help="Write the recorded decisions into this folder (replaced whole) as the files "
              "Prolific's screens take, the same decisions before and after --send: "
              "approve-<study id>.txt and reject-<study id>.csv hold those not sent yet, "
              "sent-<study id>.csv those Prolific accepted (with --send, this run's too), "
              "allow-list.txt every passer. Needs no token.")
@click.option("--workspace", "workspace_id",
              help="The Prolific workspace id a qualification round's participant group is "
              "made in (in the address of its page on Prolific).")
@click.option("--group-name",
              help="The name of that participant group [default: '<study>: passed the "
              "qualification'].")
@click.option("--bonus-per-extra", metavar="AMOUNT", type=click.FloatRange(min=0),
              help="A bonus per rating on a slot the adaptive rule added, e.g. 0.30, for each "
              "approved submission (recorded once, then set up and paid on Prolific).")
@click.option("--bonus-per-gold", metavar="AMOUNT", type=click.FloatRange(min=0),
              help="A bonus per gold rating within the qualification's distance of its "
              "reference, for each approved submission.")
@_prolific_options
def pay_command(study_path: Path, database: str | None, send: bool, files_dir: Path | None,
                workspace_id: str | None, group_name: str | None,
                bonus_per_extra: float | None, bonus_per_gold: float | None, token: str | None,
                api_url: str) -> None:
    """Carry the recorded decisions out on Prolific: a dry run unless --send.

    Approvals go in bulk, each rejection with its message and category, a qualification
    round's passers as a participant group. Without --send it prints what it would send and
    sends nothing; each action sent is recorded, so running it again sends only what is left.
    --prolific-files writes the decisions as files for Prolific's own screens (no token
    needed): those not sent yet to approve or reject by hand, those Prolific accepted listed
    apart. --bonus-per-extra and --bonus-per-gold add bonuses, set up then paid once.

    Example:

        sotopia-ls study pay --study study.json

        PROLIFIC_TOKEN=... sotopia-ls study pay --study study.json --send

        PROLIFIC_TOKEN=... sotopia-ls study pay --study study.json --send --bonus-per-extra 0.30

        sotopia-ls study pay --study study.json --prolific-files paid/
    """
    _, _, store = _web_stack()
    from .payment.apply import apply_decisions
    from .payment.bonus import BonusRule
    from .payment.prolific import Prolific

    with failures_as_messages():
        study = read_study(study_path)
        engine = store.open_store(database or study.database)
        prolific = Prolific(token, base_url=api_url) if token else None
        rule = BonusRule(per_extra=round((bonus_per_extra or 0) * 100),
                         per_gold=round((bonus_per_gold or 0) * 100))
        done = apply_decisions(engine, study, prolific=prolific, send=send, files_dir=files_dir,
                               group_name=group_name, workspace_id=workspace_id,
                               bonus_rule=rule or None)
    for line in done.lines():
        click.echo(line)
    if done.sent is not None and done.sent.failures:
        raise click.ClickException(f"{len(done.sent.failures)} action(s) failed (above); run "
                                   "the same command again once fixed: it sends only what is "
                                   "left")


@study_command.command("publish")
@_study_option
@_database_option
@click.option("--prolific-project", "project_id", required=True,
              help="The Prolific project the study is made in (the id in the address of the "
              "project's page on Prolific).")
@click.option("--gateway", "gateway_url", required=True,
              help="The gateway's public https address, e.g. https://rate.example.org.")
@click.option("--minutes", type=click.IntRange(1, 600),
              help="Prolific's estimated completion time, in minutes [default: the --pilot's "
              "median minutes per visit].")
@click.option("--pilot", "pilot_path", type=click.Path(dir_okay=False, path_type=Path),
              help="A pilot's study file: its measured median minutes per visit estimate the "
              "time.")
@click.option("--places", type=click.IntRange(1),
              help="Places on Prolific [default: episodes × k ÷ m, rounded up].")
@click.option("--send", is_flag=True, help="Create the draft (needs a Prolific API token); its "
              "id is written into the study file, so a rerun creates nothing.")
@_prolific_options
def publish_command(study_path: Path, database: str | None, project_id: str, gateway_url: str,
                    minutes: int | None, pilot_path: Path | None, places: int | None,
                    send: bool, token: str | None, api_url: str) -> None:
    """Create the study on Prolific as a draft, from the study file: a dry run unless --send.

    The draft holds the gateway's link with Prolific's three placeholders, every code of the
    study file with its type and action, a main study's filter on its qualification round's
    participant group, the places, the estimated minutes and the reward (warning under
    Prolific's minimum pay). Publish the draft on Prolific once checked.

    Example:

        sotopia-ls study publish --prolific-project 6530aa0f... --gateway https://rate.example.org --minutes 12

        PROLIFIC_TOKEN=... sotopia-ls study publish --prolific-project 6530aa0f... --gateway https://rate.example.org --pilot pilot.json --send
    """
    serve, _, store = _web_stack()
    from .payment.hourly import hourly_pay
    from .payment.prolific import Prolific
    from .payment.publish import publish_study

    if not gateway_url.startswith("https://"):
        raise click.UsageError("--gateway must be the gateway's public https:// address")
    with failures_as_messages():
        study = read_study(study_path)
        engine = store.open_store(database or study.database)
        pilot = read_study(pilot_path) if pilot_path else None
        measured = hourly_pay(store.open_store(pilot.database), pilot) if pilot else None
        done = publish_study(
            engine, study, study_path, study_url=serve.participant_link(study, gateway_url),
            project_id=project_id, send=send, minutes=minutes, pilot=measured, places=places,
            prolific=Prolific(token, base_url=api_url) if token else None)
    for line in done.lines():
        click.echo(line)


@study_command.command("follow")
@_study_option
@_database_option
@click.option("--every", type=click.FloatRange(min=5), metavar="SECONDS",
              help="Poll again every SECONDS until stopped (Ctrl-C) [default: once].")
@click.option("--subscribe", "gateway_url", metavar="URL",
              help="Instead of polling, subscribe the workspace's submission status changes to "
              f"the gateway's public https address URL (calls go to URL{HOOK_PATH}); a "
              "subscription made before is kept. Needs --workspace.")
@click.option("--workspace", "workspace_id", help="The Prolific workspace, for --subscribe.")
@_prolific_options
def follow_command(study_path: Path, database: str | None, every: float | None,
                   gateway_url: str | None, workspace_id: str | None, token: str | None,
                   api_url: str) -> None:
    """Read each submission's status from Prolific, for a gateway Prolific's webhook cannot reach.

    A submission returned or timed out frees its participant's episodes at once, for the next
    participant; `study status` and the review show each status. A gateway with a public
    address takes Prolific's webhook calls instead (`study serve --prolific-hook-secret`).

    Example:

        PROLIFIC_TOKEN=... sotopia-ls study follow --study study.json --every 30

        PROLIFIC_TOKEN=... sotopia-ls study follow --subscribe https://rate.example.org --workspace 6530aa0f...
    """
    _, _, store = _web_stack()
    from .payment.follow import poll_submissions
    from .payment.prolific import Prolific

    with failures_as_messages():
        study = read_study(study_path)
        engine = store.open_store(database or study.database)
        prolific = Prolific.from_environment(token, base_url=api_url)
        if gateway_url is not None:
            if not gateway_url.startswith("https://") or not workspace_id:
                raise click.UsageError("--subscribe takes the gateway's public https:// "
                                       "address, with --workspace ID")
            made = prolific.subscribe(workspace_id, gateway_url.rstrip("/") + HOOK_PATH)
            click.echo(f"subscription {made.id}: {made.event_type} to {made.target_url}")
            return
        while True:
            counts = poll_submissions(engine, study, prolific)
            click.echo(f"study {study.name}: on Prolific: {_by_kind(counts)}")
            if every is None:
                return
            time.sleep(every)


@study_command.command("fetch-editor")
@click.option("--dir", "folder", type=click.Path(file_okay=False, path_type=Path),
              help=f"Where to put the editor [default: ${EDITOR_DIR_ENV}, else "
              f"var/editor/label-studio-{PINNED} of the current folder].")
def fetch_editor_command(folder: Path | None) -> None:
    """Download Label Studio's editor for a gateway host without Label Studio installed.

    The participant page runs Label Studio's own editor. Where the label-studio package is
    installed (the server extra), the gateway takes it from there and this command is not
    needed. Elsewhere, this downloads the label-studio wheel of the pinned release with pip,
    its sha256 required, and keeps only its web app and fonts (Apache-2.0). Nothing is
    downloaded when the folder already holds them; pip's own index settings apply.

    Example:

        sotopia-ls study fetch-editor

        SOTOPIA_LS_EDITOR_DIR=/srv/editor sotopia-ls study fetch-editor
    """
    with failures_as_messages():
        written = fetch_editor(folder)
    click.echo(f"Label Studio {PINNED}'s editor: in {written.folder.parent}")
