"""How each rationale of a rating came in: the characters pasted and typed, as the rating page
counted them, kept once per submission for the ``pasted_rationale`` flag. Malformed counts are
refused, never dropped; ``flags.measured_typing`` judges whether they can be true.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated

from pydantic import AfterValidator, Field
from sqlalchemy import Connection, Engine, insert, select

from ..store import typing
from .flags import RATIONALE_FIELDS, Typing

# The page stops counting here. A submission holds far fewer characters, but text deleted
# after it came in counts too, so the bound only has to stop absurd numbers.
MOST_CHARACTERS = 1_000_000


def _checked(counts: dict[str, Typing]) -> dict[str, Typing]:
    """``counts`` when it names rationale fields only and no count exceeds the bound."""
    if not counts.keys() <= set(RATIONALE_FIELDS):
        raise ValueError("only the rubric's rationale fields are counted")
    if any(max(counted.pasted, counted.typed) > MOST_CHARACTERS for counted in counts.values()):
        raise ValueError(f"a count is at most {MOST_CHARACTERS:,} characters")
    return counts


# Rationale field (``reasoning_name``) → its characters pasted and typed, as a page sends them.
TypingCounts = Annotated[dict[str, Typing], Field(max_length=len(RATIONALE_FIELDS)),
                         AfterValidator(_checked)]


def page_counting() -> dict[str, object]:
    """What the rating page needs to count: the fields, and where a count stops."""
    return {"fields": list(RATIONALE_FIELDS), "most": MOST_CHARACTERS}


def add_typing(conn: Connection, assignment_id: int, counts: dict[str, Typing]) -> None:
    """Keep the counts of an assignment the transaction settles."""
    conn.execute(insert(typing).values(
        assignment_id=assignment_id,
        counts={name: counted.model_dump() for name, counted in counts.items()}))


def recorded_typing(engine: Engine, assignment_ids: Iterable[int]) -> dict[int, dict[str, Typing]]:
    """The counts kept for each of ``assignment_ids`` that has any, by assignment id."""
    with engine.connect() as conn:
        rows = conn.execute(select(typing).where(typing.c.assignment_id.in_(list(assignment_ids))))
        return {row.assignment_id: {name: Typing.model_validate(counted)
                                    for name, counted in row.counts.items()} for row in rows}
