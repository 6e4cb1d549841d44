"""Load episodes from files, folders, records or DataFrames, collecting every problem.

Nothing stops at the first bad record: each record becomes an episode or one ``Problem``.
The format is detected from the first recognisable record of each file (or DataFrame) unless
one is named. Episodes are deduplicated by id, the first one seen wins. The formats are the
``Format`` objects given (``FORMATS`` unless told otherwise); nothing here knows one by name.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..episode import Episode
from ..errors import InvalidInput, Problem, SotopiaLSError
from .formats import FORMATS, Format, Grouping, detect_format, format_named, readers_of
from .records import RecordError, record_id
from .sources import Raw, files_in, label_records, read_file

if TYPE_CHECKING:
    import pandas as pd


@dataclass
class LoadResult:
    """What a load produced.

    ``counts`` maps ``"<format>:<source>"`` to the episodes parsed from it (duplicates
    included), where the source is the file, or the folder for one-episode JSON files.
    """

    episodes: list[Episode] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    duplicates: int = 0
    # episode id → (what an annotator would be shown, where it was first read)
    _seen: dict[str, tuple[tuple[object, ...], str]] = field(
        default_factory=dict, init=False, repr=False, compare=False)

    def evaluation_gaps(self) -> dict[str, int]:
        """``"agent 1 knowledge" → episodes`` whose stored evaluation holds no such score (a
        rubric with a dimension Sotopia's evaluator did not rate): kept, the score left empty."""
        gaps: dict[str, int] = {}
        for episode in self.episodes:
            for gap in episode.evaluation.gaps() if episode.evaluation else ():
                gaps[gap] = gaps.get(gap, 0) + 1
        return gaps

    def raise_on_problems(self) -> None:
        """Raise ``InvalidInput`` with every problem, if there is any."""
        if self.problems:
            raise InvalidInput(self.problems)

    def _add(self, episode: Episode, source: str) -> None:
        """Keep the first episode of each id. The same id again is a duplicate, unless the
        same format gives it other content: that is a conflict (which one is meant?). Two
        formats may render one episode differently (the oTree app's CSV lost parts of some),
        so across formats the first one read stays."""
        self.counts[source] = self.counts.get(source, 0) + 1
        shown = (episode.source.format, episode.scenario, episode.agents, episode.turns)
        where = f"{episode.source.file} [{episode.source.record}]".replace(" []", "")
        if episode.id not in self._seen:
            self._seen[episode.id] = (shown, where)
            self.episodes.append(episode)
            return
        first, first_where = self._seen[episode.id]
        if shown == first or shown[0] != first[0]:
            self.duplicates += 1
            return
        self.problems.append(Problem(
            file=episode.source.file, record=episode.source.record or episode.id,
            reason=f"conflict: episode {episode.id} was read before from {first_where} with "
            "other content (scenario, agents or dialogue); give each episode its own id",
        ))


def parse_agent_models(pairs: Iterable[str]) -> dict[str, tuple[str, ...]]:
    """``TAG=MODEL1,MODEL2`` and ``PLACEHOLDER=MODEL`` (``--models``) as ``tag → (agent 1's
    model, agent 2's)`` and ``placeholder → (its model,)``."""
    models = {}
    for pair in pairs:
        key, sep, named = pair.partition("=")
        names = tuple(name.strip() for name in named.split(","))
        if not sep or not key or len(names) > 2 or not all(names):
            raise SotopiaLSError(f"--models: {pair!r} is neither TAG=MODEL1,MODEL2 (the models "
                                 "of agent 1 and agent 2 of the episodes with that source tag) "
                                 "nor PLACEHOLDER=MODEL (a model name the files give)")
        models[key] = names
    return models


def with_agent_models(episodes: list[Episode], models: Mapping[str, tuple[str, ...]]
                      ) -> list[Episode]:
    """``episodes``, those whose source tag ``models`` names given that pair of agent models
    (over what their file said), then each placeholder it names replaced, whichever agent it
    is; a tag or placeholder no episode has is refused, naming the tags there are."""
    pairs = {key: names for key, names in models.items() if len(names) == 2}
    renamed = {key: names[0] for key, names in models.items() if len(names) == 1}
    tags = {episode.source.tag for episode in episodes}
    named = {name for episode in episodes for name in episode.source.agent_models}
    unknown = sorted((set(pairs) - tags) | (set(renamed) - named))
    if unknown:
        raise SotopiaLSError(f"--models: no episode has the source tag or model "
                             f"{', '.join(unknown)} (their tags: "
                             f"{', '.join(sorted(tags)) or 'none'})")

    def given(episode: Episode) -> tuple[str, ...]:
        return tuple(renamed.get(name, name)
                     for name in pairs.get(episode.source.tag, episode.source.agent_models))

    return [episode.model_copy(update={"source": episode.source.model_copy(
        update={"agent_models": given(episode)})}) for episode in episodes]


def load_episodes(
    paths: Iterable[str | Path], format: str | None = None, formats: tuple[Format, ...] = FORMATS
) -> LoadResult:
    """Every episode in ``paths`` (files, or folders searched for .json, .jsonl and .csv, and
    the file types of ``formats``' own readers).

    ``format`` (the name of one of ``formats``) skips detection. Unreadable files and invalid
    records end up in ``problems``; an unknown ``format`` raises ``UnknownFormat``.
    """
    named = format_named(format, formats)
    readers = readers_of(formats)
    if isinstance(paths, (str, Path)):
        paths = [paths]
    result = LoadResult()
    for path in map(Path, paths):
        if not path.exists() or not (path.is_file() or path.is_dir()):
            reason = "no such file or folder" if not path.exists() else \
                "not a regular file or folder (a pipe or a device?)"
            result.problems.append(Problem(file=str(path), record="", reason=reason))
            continue
        files, dead = files_in(path, readers)
        for link in dead:
            result.problems.append(Problem(file=str(link), record="",
                                           reason="a symbolic link that leads nowhere or in a loop"))
        if not files and path.is_dir():
            accepted = ", ".join(readers)
            result.problems.append(Problem(file=str(path), record="",
                                           reason=f"holds no {accepted} file"))
        for file in files:
            records = _counted(read_file(file, readers))
            _collect(records, named, formats, str(file), str(file.parent), result)
            if not records.count:
                result.problems.append(Problem(file=str(file), record="",
                                               reason="empty: holds no record"))
    return result


class _counted:
    """An iterator of records that counts what it hands out."""

    def __init__(self, records: Iterator[Raw]) -> None:
        self.records = records
        self.count = 0

    def __iter__(self) -> Iterator[Raw]:
        for record in self.records:
            self.count += 1
            yield record


def episodes_from_records(
    records: Iterable[Mapping[str, Any]],
    format: str | None = None,
    source: str = "records",
    formats: tuple[Format, ...] = FORMATS,
) -> LoadResult:
    """Episodes from records already in Python (e.g. ``EpisodeLog.model_dump()`` dicts)."""
    named = format_named(format, formats)
    result = LoadResult()
    _collect(label_records(records), named, formats, source, source, result)
    return result


def episodes_from_dataframe(
    df: pd.DataFrame, format: str | None = None, formats: tuple[Format, ...] = FORMATS
) -> LoadResult:
    """Episodes from a DataFrame whose rows are records of one format, e.g.
    ``pd.read_json(dump, lines=True)`` or ``pd.read_csv(human_eval_csv)``."""
    named = format_named(format, formats)
    result = LoadResult()
    _collect(_dataframe_rows(df), named, formats, "dataframe", "dataframe", result)
    return result


def _dataframe_rows(df: pd.DataFrame) -> Iterator[Raw]:
    for index, row in zip(df.index, df.to_dict("records")):
        yield (
            f"row {index}",
            {str(key): _plain(value) for key, value in row.items() if not _missing(value)},
        )


def _missing(value: Any) -> bool:
    import pandas as pd  # loaded already: the caller handed over a DataFrame

    return pd.api.types.is_scalar(value) and bool(pd.isna(value))


def _plain(value: Any) -> Any:
    """Cells as JSON would give them (pandas may hand over numpy arrays)."""
    return value.tolist() if hasattr(value, "tolist") else value


def _collect(
    records: Iterable[Raw],
    format: Format | None,
    formats: tuple[Format, ...],
    file: str,
    folder: str,
    result: LoadResult,
) -> None:
    """Parse one source's records into ``result``; the first recognised record fixes the format,
    whose grouping then turns the records into episodes.

    A record of unknown shape is reported once per set of keys, so a CSV of some other kind is
    one problem, not one per row.
    """
    grouping: Grouping | None = None
    unrecognised: set[frozenset[str]] = set()

    def problem(label: str, episode: str, error: RecordError) -> None:
        result.problems.append(Problem(
            file=file, record=_where(label, episode), reason=error.reason, field=error.field
        ))

    for label, record in records:
        if isinstance(record, RecordError):
            problem(label, "", record)
            continue
        try:
            format = format or detect_format(record, formats)
        except RecordError as error:
            keys = frozenset(map(str, record))
            if keys not in unrecognised:
                unrecognised.add(keys)
                problem(label, record_id(record), error)
            continue
        if grouping is None:
            grouping = format.group(format.parse, file)
        source = f"{format}:{file if label else folder}"
        result.counts.setdefault(source, 0)
        for outcome in grouping.add(record, label):
            if isinstance(outcome, RecordError):
                problem(label, record_id(record), outcome)
            else:
                result._add(outcome, source)
    for label, episode, error in grouping.unresolved() if grouping is not None else ():
        problem(label, episode, error)


def _where(label: str, episode: str) -> str:
    """``line 3, id 01H…`` — the position, and the episode id when the record has one."""
    return ", ".join(
        part for part in (label, f"id {episode}" if episode and label else episode) if part
    )
