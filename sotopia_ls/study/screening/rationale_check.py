"""The model check of a rationale against its score: a chat endpoint (``evaluate``'s, under
``remote``'s rules) asked, per submitted rating, whether the rationale supports the score under
the rubric's guidance and examples for its dimension. Run by a researcher (`study
check-rationales`), never while serving; each verdict is stored once per rating, read by the
review for the researcher alone, and changes no suggestion (docs/consistency.md)."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from sqlalchemy import Engine, select

from ...chat import ChatEndpoint, EndpointRefused, InvalidReply
from ...config import agent_field
from ...dimensions import AGENTS, DIMENSIONS, Dimension, rating_name, reasoning_name
from ...errors import StudyError
from ...scores import RATING_FIELDS
from ..settings import StudyFile
from ..states import SUBMITTED
from ..store import add_once, assignments, episodes, now, rationale_verdicts

# The review's columns and details name the check so (``rationale_check.unsupported``).
CHECK = "rationale_check"
# Each rating field's place in the rubric: the review lists verdicts in it.
_ORDER = {name: place for place, name in enumerate(RATING_FIELDS)}
# A verdict's reason is one sentence: a longer answer is no answer of the kind asked.
MAX_REASON_CHARS = 1000


class SupportVerdict(BaseModel):
    """The answer asked for, and nothing else."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    supported: bool
    reason: str = Field(min_length=1, max_length=MAX_REASON_CHARS)


@dataclass(frozen=True)
class Rating:
    """One rating to check: its field (``knowledge_1``), dimension, the rated agent's name,
    score and rationale; in a study, its assignment's id."""

    name: str
    dimension: Dimension
    agent: str
    score: int
    rationale: str
    assignment: int = 0


@dataclass
class RationaleRun:
    """What a run did: ratings checked before, verdicts got now (supported or not), and why
    each rating asked now got none (by rating, ``assignment N rating``)."""

    already: int = 0
    supported: int = 0
    unsupported: int = 0
    failed: dict[str, str] = field(default_factory=dict)


def support_prompt(rating: Rating) -> str:
    """The question for ``rating``, from the rubric's guidance and examples alone."""
    d = rating.dimension
    examples = [f'- score {e.rating}, "{e.rationale}": {e.assessment}' for e in d.examples]
    return "\n".join([
        f"A person rated {rating.agent} in a conversation on the dimension {d.label} "
        f"(scores {d.range_text}). The rubric says: {d.guidance}",
        *(["The rubric's examples of ratings and what it says of them:", *examples]
          if examples else []),
        f"The person's score: {rating.score}",
        f'The person\'s rationale: "{rating.rationale}"',
        "Does this rationale support this score under the rubric? Answer with only a JSON "
        'object: {"supported": true or false, "reason": "one sentence"}.',
    ])


def parse_verdict(reply: str) -> SupportVerdict:
    """The verdict ``reply`` holds, exactly as asked; ``InvalidReply`` naming what is wrong."""
    try:
        return SupportVerdict.model_validate_json(reply.strip())
    except ValidationError as error:
        first = error.errors(include_url=False)[0]
        where = ".".join(map(str, first["loc"]))
        raise InvalidReply(f"not the verdict asked for: {where + ': ' if where else ''}"
                           f"{first['msg']}") from None


def ask_support(endpoint: ChatEndpoint, rating: Rating,
                stop: threading.Event | None = None) -> SupportVerdict:
    """``endpoint``'s verdict on ``rating``; ``chat.InvalidReply`` (this rating got none) or
    ``chat.EndpointRefused`` (no rating can get one)."""
    messages = [{"role": "user", "content": support_prompt(rating)}]
    return parse_verdict(endpoint.complete(messages, stop))


def _ratings(engine: Engine, study: str) -> list[Rating]:
    """Every submitted rating of ``study`` with a rationale, first submitted first."""
    with engine.connect() as conn:
        rows = conn.execute(
            select(assignments.c.id, assignments.c.task_id, assignments.c.results)
            .where(assignments.c.study == study, assignments.c.state.in_(SUBMITTED))
            .order_by(assignments.c.submitted_at, assignments.c.id)).all()
        shown = dict(conn.execute(select(episodes.c.task_id, episodes.c.shown)
                                  .where(episodes.c.study == study)).all())
    found = []
    for row in rows:
        names = shown.get(row.task_id) or {}
        for dimension in DIMENSIONS:
            for agent in AGENTS:
                name = rating_name(dimension.key, agent)
                rationale = str(row.results.get(reasoning_name(dimension.key, agent)) or "")
                if rationale.strip() and name in row.results:
                    who = names.get(agent_field(agent, "name")) or f"agent {agent}"
                    found.append(Rating(name, dimension, str(who), row.results[name],
                                        rationale, row.id))
    return found


def stored_verdicts(engine: Engine, study: str) -> dict[int, dict[str, Any]]:
    """Assignment id → rating field → its stored verdict row (``supported``, ``reason``,
    ``model``)."""
    with engine.connect() as conn:
        rows = conn.execute(select(rationale_verdicts)
                            .where(rationale_verdicts.c.study == study)).all()
    found: dict[int, dict[str, Any]] = {}
    for row in sorted(rows, key=lambda row: _ORDER.get(row.rating, len(_ORDER))):
        found.setdefault(row.assignment_id, {})[row.rating] = row
    return found


def check_rationales(engine: Engine, study: StudyFile, endpoint: ChatEndpoint,
                     workers: int = 1) -> RationaleRun:
    """Ask ``endpoint`` about every submitted rating of ``study`` not checked before,
    ``workers`` at a time, storing each verdict as it comes. A rating whose answer is unusable
    (malformed, too long, late) gets none and the others go on; ``StudyError`` when the
    endpoint refuses the requests themselves (every verdict got before is kept)."""
    ratings = _ratings(engine, study.name)
    stored = stored_verdicts(engine, study.name)
    todo = [r for r in ratings if r.name not in stored.get(r.assignment, {})]
    run = RationaleRun(already=len(ratings) - len(todo))
    stop = threading.Event()

    with ThreadPoolExecutor(workers) as pool:
        asked = {pool.submit(ask_support, endpoint, rating, stop): rating for rating in todo}
        try:
            for done in as_completed(asked):
                rating = asked[done]
                try:
                    verdict = done.result()
                except InvalidReply as error:
                    run.failed[f"assignment {rating.assignment} {rating.name}"] = str(error)
                    continue
                except EndpointRefused as error:
                    raise StudyError(f"{error}; nothing more was asked") from None
                _record(engine, study.name, rating, verdict, endpoint.model)
                if verdict.supported:
                    run.supported += 1
                else:
                    run.unsupported += 1
        finally:
            stop.set()
            for future in asked:
                future.cancel()
    return run


def _record(engine: Engine, study: str, rating: Rating, verdict: SupportVerdict,
            model: str) -> None:
    with engine.begin() as conn:
        add_once(conn, rationale_verdicts, {
            "study": study, "assignment_id": rating.assignment, "rating": rating.name,
            "model": model, "supported": verdict.supported, "reason": verdict.reason,
            "asked_at": now()})
