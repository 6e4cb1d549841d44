"""The accepted formats: each one ``Format`` object in ``FORMATS``, the tuple the loader runs.

A format is its name plus what the loader asks of it (``detects``, ``parse``, ``group``,
``readers``, ``tried_last``), so the loader knows none by name; adding one is a module with its
parser and one ``Format`` (README.md, "Input formats").
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Set
from typing import Any, Protocol

from ..episode import Episode
from ..errors import UnknownFormat
from . import dump, episodelog, otree, otree_csv
from .records import Parser, RecordError
from .sources import READERS, Reader


class Grouping(Protocol):
    """One source's records becoming episodes, fed record by record."""

    def add(self, record: Mapping[str, Any], label: str) -> Iterable[Episode | RecordError]:
        """The episodes this record completes, or why it cannot become one."""
        ...

    def unresolved(self) -> Iterable[tuple[str, str, RecordError]]:
        """``(label, episode id, error)`` of the records still refused once the source is read."""
        ...


class OnePerRecord:
    """Each record is one episode."""

    def __init__(self, parse: Parser, file: str) -> None:
        self.parse = parse
        self.file = file

    def add(self, record: Mapping[str, Any], label: str) -> tuple[Episode | RecordError]:
        try:
            return (self.parse(record, self.file, label),)
        except RecordError as error:
            return (error,)

    def unresolved(self) -> tuple[()]:
        return ()


class Format(str):
    """An input format. A ``str`` subclass, as ``StrEnum`` members are: it equals its name
    wherever a name is expected (``--format`` choices, ``format="dump"``, messages)."""

    detects: Callable[[Set[str]], bool]
    parse: Parser
    group: Callable[[Parser, str], Grouping]
    readers: Mapping[str, Reader]
    tried_last: bool

    def __new__(
        cls,
        name: str,
        *,
        detects: Callable[[Set[str]], bool],
        parse: Parser,
        group: Callable[[Parser, str], Grouping] = OnePerRecord,
        readers: Mapping[str, Reader] | None = None,
        tried_last: bool = False,
    ) -> Format:
        format = super().__new__(cls, name)
        format.detects = detects
        format.parse = parse
        format.group = group
        format.readers = dict(readers or {})
        format.tried_last = tried_last
        return format


FORMATS: tuple[Format, ...] = (
    Format(otree.FORMAT, detects=otree.detects, parse=otree.parse_otree, tried_last=True),
    Format(episodelog.FORMAT, detects=episodelog.detects, parse=episodelog.parse_episodelog),
    Format(dump.FORMAT, detects=dump.detects, parse=dump.parse_dump),
    Format(
        otree_csv.FORMAT,
        detects=otree_csv.detects,
        parse=otree_csv.parse_otree_csv_row,
        group=otree_csv.RowsByEpisode,
    ),
)


def detect_format(record: Mapping[str, Any], formats: tuple[Format, ...] = FORMATS) -> Format:
    """The format a record's keys point to, or a ``RecordError`` listing the accepted ones."""
    keys = set(record)
    # A stable sort: the formats not tried last keep their order.
    for format in sorted(formats, key=lambda format: format.tried_last):
        if format.detects(keys):
            return format
    shown = ", ".join(sorted(map(str, keys))[:12]) or "none"
    raise RecordError(
        f"cannot tell the format from its keys ({shown}); accepted formats: {', '.join(formats)} "
        "(name one to skip detection)"
    )


def format_named(name: str | None, formats: tuple[Format, ...] = FORMATS) -> Format | None:
    """The format of that name (none for none: detect it), or ``UnknownFormat`` listing them."""
    if name is None:
        return None
    for format in formats:
        if format == name:
            return format
    raise UnknownFormat("format", f"unknown format {name!r}", list(formats))


def readers_of(formats: tuple[Format, ...]) -> dict[str, Reader]:
    """``suffix → reader`` of every file type ``formats`` come in."""
    return {
        **READERS,
        **{suffix: reader for format in formats for suffix, reader in format.readers.items()},
    }
