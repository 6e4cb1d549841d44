"""The accepted formats, how a record's keys tell them apart, and each one's parser."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ..episode import Episode
from . import dump, episodelog, otree, otree_csv
from .records import RecordError

FORMATS: tuple[str, ...] = (otree.FORMAT, episodelog.FORMAT, dump.FORMAT, otree_csv.FORMAT)

Parser = Callable[[Mapping[str, Any], str, str], Episode]

PARSERS: dict[str, Parser] = {
    otree.FORMAT: otree.parse_otree,
    episodelog.FORMAT: episodelog.parse_episodelog,
    dump.FORMAT: dump.parse_dump,
    otree_csv.FORMAT: otree_csv.parse_otree_csv_row,
}


def detect_format(record: Mapping[str, Any]) -> str:
    """The format a record's keys point to, or a ``RecordError`` listing the accepted ones."""
    keys = set(record)
    if "messages" in keys or {"agents", "rewards"} <= keys:
        return episodelog.FORMAT
    if keys & {"episode_id", "agents_background", "social_interactions"}:
        return dump.FORMAT
    if {"pk", "data"} <= keys:
        return otree_csv.FORMAT
    if "rewards_prompt" in keys:
        return otree.FORMAT
    shown = ", ".join(sorted(map(str, keys))[:12]) or "none"
    raise RecordError(
        f"cannot tell the format from its keys ({shown}); accepted formats: {', '.join(FORMATS)} "
        "(name one to skip detection)"
    )
