"""The gateway's own database: every table of the study, in SQLAlchemy Core on SQLite or
PostgreSQL, so several gateway processes share one state.

A rule that must hold across processes is a constraint or a conditional update inside a
transaction, never a check in Python first. docs/gateway.md, "The database", says what each
table holds.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    Column,
    Connection,
    DateTime,
    Engine,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    bindparam,
    cast,
    create_engine,
    event,
    select,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, OperationalError

from ..errors import StudyError, redacted
from ..labelstudio.results import read_json_results
from .states import IN_EXPORT, SlotState

metadata = MetaData()


def _time(name: str, **kwargs: Any) -> Column:
    return Column(name, DateTime(timezone=True), **kwargs)


participants = Table(
    "participants", metadata,
    Column("id", Integer, primary_key=True),
    Column("study", String(64), nullable=False),
    Column("external_id", String(64), nullable=False),  # Prolific's PROLIFIC_PID
    Column("ls_user_id", Integer),
    _time("arrived_at", nullable=False),
    UniqueConstraint("study", "external_id"),
)

# One Prolific session of a participant: they rate up to m episodes in it.
visits = Table(
    "visits", metadata,
    Column("id", Integer, primary_key=True),
    Column("participant_id", ForeignKey("participants.id"), nullable=False),
    Column("prolific_study_id", String(64), nullable=False),
    Column("prolific_session_id", String(64), nullable=False),
    _time("arrived_at", nullable=False),
    _time("instructions_read_at"),
    _time("finished_at"),
    Column("outcome", String(16)),  # an ``Outcome`` once finished
    UniqueConstraint("participant_id", "prolific_session_id"),
)

# What a participant answered on a page of the sequence that keeps its own answers (a consent
# page, a questionnaire): one row per visit and page, its answers as the page's form read them.
# A table of its own, so that databases made before it get it too.
page_answers = Table(
    "page_answers", metadata,
    Column("visit_id", ForeignKey("visits.id"), primary_key=True),
    Column("page", String(64), primary_key=True),
    Column("answers", JSON, nullable=False),
    _time("answered_at", nullable=False),
)

# A gold episode's reference: rating field (``rating_name``) → score. Never sent to a browser.
gold = Table(
    "gold", metadata,
    Column("study", String(64), primary_key=True),
    Column("task_id", Integer, primary_key=True),
    Column("reference", JSON, nullable=False),
)

# A practice episode's reference: each rating (``rating_name``) and its rationale
# (``reasoning_name``). Never sent to a browser but as a participant's feedback after their
# attempt. A practice episode has no slots: practice is no data.
practice_episodes = Table(
    "practice_episodes", metadata,
    Column("study", String(64), primary_key=True),
    Column("task_id", Integer, primary_key=True),
    Column("reference", JSON, nullable=False),
)

# One practice attempt of a participant (numbered from 1 whatever their session, so a new
# session brings no new attempts), its validated scores and how far they were; ``seen_at``
# once the participant went on from its feedback.
practice_attempts = Table(
    "practice_attempts", metadata,
    Column("participant_id", ForeignKey("participants.id"), primary_key=True),
    Column("number", Integer, primary_key=True),
    Column("visit_id", ForeignKey("visits.id"), nullable=False),
    Column("task_id", Integer, nullable=False),
    Column("scores", JSON, nullable=False),
    Column("largest_distance", Integer, nullable=False),
    Column("passed", Boolean, nullable=False),
    _time("submitted_at", nullable=False),
    _time("seen_at"),
)

# What a participant's browser may receive of each task (``shown``), copied from Label Studio
# when the gateway starts: rate pages never wait on Label Studio.
episodes = Table(
    "episodes", metadata,
    Column("study", String(64), primary_key=True),
    Column("task_id", Integer, primary_key=True),
    Column("shown", JSON, nullable=False),
)

slots = Table(
    "slots", metadata,
    Column("study", String(64), primary_key=True),
    Column("task_id", Integer, primary_key=True),
    Column("slot", Integer, primary_key=True),
    Column("state", String(8), nullable=False, default=SlotState.FREE),  # a ``SlotState``
    Column("assignment_id", Integer),
    _time("expires_at"),
    Index("slots_by_state", "study", "state", "task_id"),
)

assignments = Table(
    "assignments", metadata,
    Column("id", Integer, primary_key=True),
    Column("key", String(32), nullable=False, unique=True),
    Column("study", String(64), nullable=False),
    Column("task_id", Integer, nullable=False),
    Column("participant_id", ForeignKey("participants.id"), nullable=False),
    Column("visit_id", ForeignKey("visits.id"), nullable=False),
    # An ``AssignmentState``: leased → saving → saved; leased → expired (its slot went to
    # someone else); a submission that found no slot → surplus (kept here, not sent to Label
    # Studio);
    # saving → failed when Label Studio refused the save itself (``save_failures`` says why),
    # failed → saving again when a researcher retries it, or → shelved (kept here, its slot
    # free for another participant) when it can never be saved.
    Column("state", String(8), nullable=False),
    _time("assigned_at", nullable=False),
    _time("first_shown_at"),
    _time("submitted_at"),
    Column("late", Integer, nullable=False, default=0),  # 1: submitted after its lease expired
    # The submission's validated scores, the score model's flat form (``Evaluation.flat``):
    # Label Studio's results are made from them only when saved. (The name is a database's
    # made before, which held the results themselves: ``_scores_of_old_results``.)
    Column("results", JSON),
    Column("lead_time", Float),
    Column("ls_annotation_id", Integer),
    # A gateway process saving the rating holds it until then; another may take it after.
    _time("save_claimed_until"),
    _time("saved_at"),
    UniqueConstraint("study", "task_id", "participant_id"),
    Index("assignments_by_visit", "visit_id", "state"),
    Index("assignments_by_state", "study", "state"),
)

# Why Label Studio refused to save a rating (a 4xx): one row per ``failed`` assignment, kept
# until it is retried. A table of its own, so that databases made before it get it too.
save_failures = Table(
    "save_failures", metadata,
    Column("assignment_id", ForeignKey("assignments.id"), primary_key=True),
    Column("reason", Text, nullable=False),
    _time("failed_at", nullable=False),
)


# A rating that settled on a slot above k, one that adaptive extra raters added to its episode
# (the slot's number kept here: the slot itself may be given again if the rating is shelved).
# A table of its own, so that databases made before it get it too.
added_ratings = Table(
    "added_ratings", metadata,
    Column("assignment_id", ForeignKey("assignments.id"), primary_key=True),
    Column("slot", Integer, nullable=False),
)

# An episode chosen to be rated by three participants (``third_rater_share``): its slots above
# k were planned, not added by adaptive extra raters. A table of its own, so that databases
# made before it get it too.
third_raters = Table(
    "third_raters", metadata,
    Column("study", String(64), primary_key=True),
    Column("task_id", Integer, primary_key=True),
)

# Each task's judges' evaluations as its meta stores them (``stored_judges``), copied when a
# gateway starts or syncs (``screening.judges``): the running alternative annotator test reads
# them in the worker process, the review's judge-echo flag their rationales; no page shows them. A table of its own, so that databases made before it get it too.
judge_evaluations = Table(
    "judge_evaluations", metadata,
    Column("study", String(64), primary_key=True),
    Column("task_id", Integer, primary_key=True),
    Column("judges", JSON, nullable=False),
)

# Each task's agent models (task data ``agent_models``: agent 1's, agent 2's), never shown to a
# participant: the running model table reads them in the worker process. A table of its own,
# so that databases made before it get it too.
agent_models = Table(
    "agent_models", metadata,
    Column("study", String(64), primary_key=True),
    Column("task_id", Integer, primary_key=True),
    Column("models", JSON, nullable=False),
)

# A model's verdict on whether a submitted rating's rationale supports its score
# (``screening.rationale_check``): one per assignment and rating field, so a rerun asks nothing
# again; read by the review only. A table of its own, so that databases made before it get it.
rationale_verdicts = Table(
    "rationale_verdicts", metadata,
    Column("study", String(64), nullable=False),
    Column("assignment_id", ForeignKey("assignments.id"), primary_key=True),
    Column("rating", String(64), primary_key=True),  # ``rating_name``: knowledge_1
    Column("model", Text, nullable=False),
    Column("supported", Boolean, nullable=False),
    Column("reason", Text, nullable=False),
    _time("asked_at", nullable=False),
)

# A gateway process writing a task's meta in Label Studio (``marks.meta_turn``): one at a time
# per task, since Label Studio replaces meta whole. ``holder`` names the turn; a claim lapses at
# ``claimed_until``. A table of its own, so that databases made before it get it too.
meta_claims = Table(
    "meta_claims", metadata,
    Column("study", String(64), primary_key=True),
    Column("task_id", Integer, primary_key=True),
    Column("holder", String(32), nullable=False),
    _time("claimed_until", nullable=False),
)


# Rationale field (``reasoning_name``) → {"pasted": characters, "typed": characters}.
typing = Table(
    "typing", metadata,
    Column("assignment_id", ForeignKey("assignments.id"), primary_key=True),
    Column("counts", JSON, nullable=False),
)

visible_time = Table(
    "visible_time", metadata,
    Column("assignment_id", ForeignKey("assignments.id"), primary_key=True),
    Column("seconds", Float, nullable=False),
)

# A page's visible seconds where they exceeded the time from its page first shown to its
# submission (``visible_time`` keeps that time instead). A table of its own, so that databases
# made before it get it too.
clipped_times = Table(
    "clipped_times", metadata,
    Column("assignment_id", ForeignKey("assignments.id"), primary_key=True),
    Column("claimed", Float, nullable=False),
)

qualification_results = Table(
    "qualification_results", metadata,
    Column("visit_id", ForeignKey("visits.id"), primary_key=True),
    Column("passed", Boolean, nullable=False),
    Column("largest_distance", Integer, nullable=False),
    _time("scored_at", nullable=False),
)

allow_list = Table(
    "allow_list", metadata,
    Column("qualification", String(64), primary_key=True),  # the round's study name
    Column("external_id", String(64), primary_key=True),  # PROLIFIC_PID
    _time("added_at", nullable=False),
)

decisions = Table(
    "decisions", metadata,
    Column("visit_id", ForeignKey("visits.id"), primary_key=True),
    Column("decision", String(8), nullable=False),  # approve | look | reject
    Column("message", Text),  # a rejection's message to the participant
    Column("category", String(32)),  # a rejection's Prolific category
    _time("recorded_at", nullable=False),
)

# A submission's status changes once on Prolific: one row per visit whose decision was sent.
prolific_actions = Table(
    "prolific_actions", metadata,
    Column("visit_id", ForeignKey("visits.id"), primary_key=True),
    Column("action", String(8), nullable=False),  # approve | reject
    _time("sent_at", nullable=False),
)

# Each submission's last status on Prolific (a ``SubmissionStatus``), from its signed webhook
# calls or from polling the study's submissions. A table of its own, so that databases made
# before it get it too.
prolific_statuses = Table(
    "prolific_statuses", metadata,
    Column("visit_id", ForeignKey("visits.id"), primary_key=True),
    Column("status", String(32), nullable=False),
    _time("changed_at", nullable=False),
)

# The signature of every webhook call taken: the same call again is a replay, refused.
prolific_hooks = Table(
    "prolific_hooks", metadata,
    Column("signature", String(64), primary_key=True),
    _time("received_at", nullable=False),
)

# A bulk bonus set up on Prolific (its id Prolific's), in a ``BonusState``. A table of its
# own, so that databases made before it get it too.
bonus_payments = Table(
    "bonus_payments", metadata,
    Column("id", String(64), primary_key=True),
    Column("study", String(64), nullable=False),
    Column("prolific_study_id", String(64), nullable=False),
    Column("state", String(8), nullable=False),
    _time("set_up_at", nullable=False),
    _time("paid_at"),  # when the pay call was sent
)

# A submission's bonus, recorded once (in hundredths of the currency, with why), then set up
# in a bulk bonus (``payment_id``; none: not yet).
bonuses = Table(
    "bonuses", metadata,
    Column("visit_id", ForeignKey("visits.id"), primary_key=True),
    Column("cents", Integer, nullable=False),
    Column("reason", Text, nullable=False),
    Column("payment_id", ForeignKey("bonus_payments.id")),
    _time("recorded_at", nullable=False),
)

# A qualification round's allow-list as a participant group on Prolific, made once.
prolific_groups = Table(
    "prolific_groups", metadata,
    Column("qualification", String(64), primary_key=True),  # the round's study name
    Column("group_id", String(64), nullable=False),
    Column("name", Text, nullable=False),
    _time("created_at", nullable=False),
)

prolific_group_members = Table(
    "prolific_group_members", metadata,
    Column("qualification", ForeignKey("prolific_groups.qualification"), primary_key=True),
    Column("external_id", String(64), primary_key=True),  # PROLIFIC_PID
    _time("added_at", nullable=False),
)


# The running agreement on the ratings saved so far, recomputed off the request path every few
# seconds: per dimension key, {"alpha", "alpha_low", "alpha_high", "ac", "ac_low", "ac_high",
# "pairs"} (a figure the ratings cannot give yet is null). The dashboard shows it; adaptive
# extra raters stop once every interval is narrow enough.
agreement_snapshots = Table(
    "agreement_snapshots", metadata,
    Column("study", String(64), primary_key=True),
    _time("computed_at", nullable=False),
    Column("ratings", Integer, nullable=False),  # ratings the figures were computed on
    Column("figures", JSON, nullable=False),
)

# Each task's episode id (task data ``episode_id``), never shown to a participant: the running
# agreement resamples episodes in the order of their ids, as the report does. A table of its
# own, so that databases made before it get it too.
episode_ids = Table(
    "episode_ids", metadata,
    Column("study", String(64), primary_key=True),
    Column("task_id", Integer, primary_key=True),
    Column("episode_id", Text, nullable=False),
)


def now() -> datetime:
    return datetime.now(timezone.utc)


def aware(moment: datetime | None) -> datetime | None:
    """``moment`` with its time zone: SQLite hands back naive datetimes (stored as UTC)."""
    if moment is None or moment.tzinfo is not None:
        return moment
    return moment.replace(tzinfo=timezone.utc)


def database_url(url: str) -> str:
    """``url`` with PostgreSQL pointed at psycopg 3 (SQLAlchemy's default is psycopg2)."""
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url.removeprefix(prefix)
    return url


def _sqlite_transactions(engine: Engine) -> None:
    """WAL, a busy timeout and ``BEGIN IMMEDIATE``: SQLAlchemy's documented pysqlite recipe."""

    @event.listens_for(engine, "connect")
    def _connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None  # SQLAlchemy emits BEGIN itself, below
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA busy_timeout=30000")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _begin(connection: Any) -> None:
        connection.exec_driver_sql("BEGIN IMMEDIATE")


def open_store(url: str) -> Engine:
    """An engine on the study database, its tables created when missing."""
    try:
        parsed = make_url(database_url(url))
    except ArgumentError:
        raise StudyError(f"not a database URL: {redacted(url)}") from None
    if parsed.get_backend_name() == "sqlite":
        if parsed.database and parsed.database != ":memory:":
            Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(parsed)
        _sqlite_transactions(engine)
    elif parsed.get_backend_name() == "postgresql":
        engine = create_engine(parsed, pool_size=10, max_overflow=20, pool_pre_ping=True)
    else:
        raise StudyError(f"the study database must be SQLite or PostgreSQL, not {redacted(url)}")
    try:
        metadata.create_all(engine)
    except OperationalError as error:  # unreachable, or a password missing or refused
        reason = str(error.orig).strip().splitlines()[-1]
        raise StudyError(f"cannot open the study database {redacted(url)}: {reason}") from None
    _scores_of_old_results(engine)
    return engine


def _scores_of_old_results(engine: Engine) -> None:
    """Ratings a database made by an earlier release holds as Label Studio results (a JSON
    list) are stored as their scores instead, read once the way they were checked."""
    old = assignments.c.results
    with engine.connect() as conn:
        rows = conn.execute(select(assignments.c.id, old)
                            .where(cast(old, Text).like("[%"))).all()
    if rows:
        with engine.begin() as conn:
            conn.execute(update(assignments).where(assignments.c.id == bindparam("old"))
                         .values(results=bindparam("scores")),
                         [{"old": row.id, "scores": read_json_results(row.results)[0]}
                          for row in rows])


def insert_once(engine: Engine, table: Table, values: dict[str, Any]) -> None:
    """Insert a row unless one with the same unique key exists (another process's, say)."""
    with engine.begin() as conn:
        add_once(conn, table, values)


def add_once(conn: Connection, table: Table, values: dict[str, Any]) -> None:
    """``insert_once`` inside a transaction already begun."""
    conn.execute(insert_of(conn, table).values(**values).on_conflict_do_nothing())


def replace_references(conn: Connection, table: Table, study: str,
                       references: dict[int, dict[str, Any]]) -> None:
    """Record each task's reference in ``table`` (``gold``, ``practice_episodes``), replacing
    the one recorded before, inside a transaction already begun."""
    upsert = insert_of(conn, table)
    conn.execute(upsert.on_conflict_do_update(
        index_elements=[table.c.study, table.c.task_id],
        set_={"reference": upsert.excluded.reference},
    ), [{"study": study, "task_id": task, "reference": reference}
        for task, reference in sorted(references.items())])


def insert_of(conn: Connection, table: Table) -> Any:
    """An INSERT into ``table`` in the connection's dialect, which takes ``on_conflict_do_…``
    (SQLite and PostgreSQL spell it alike): a row another process inserted meanwhile is then
    skipped or updated, never an ``IntegrityError``."""
    dialect = postgresql if conn.dialect.name == "postgresql" else sqlite
    return dialect.insert(table)


@dataclass(frozen=True)
class Snapshot:
    """The figures per dimension key, when they were computed and on how many ratings."""

    computed_at: datetime
    ratings: int
    figures: dict[str, dict[str, float | int | None]]


def snapshot_in(conn: Connection, study: str) -> Snapshot | None:
    """The study's last agreement snapshot, if any (``snapshots.latest_snapshot``), inside a
    transaction already begun."""
    row = conn.execute(select(agreement_snapshots)
                       .where(agreement_snapshots.c.study == study)).one_or_none()
    return None if row is None else Snapshot(aware(row.computed_at), row.ratings, row.figures)


def rated(study: str) -> Any:
    """The condition on ``assignments``: the study's ratings on ordinary episodes (not gold)."""
    golden = select(gold.c.task_id).where(gold.c.study == study)
    return ((assignments.c.study == study) & assignments.c.state.in_(IN_EXPORT)
            & assignments.c.task_id.not_in(golden))
