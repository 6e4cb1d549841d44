"""Quality flags: per annotation, from plain data, and their share per participant.

Each flag is one ``Flag`` in ``FLAGS``, its thresholds in ``FlagThresholds``; ``flag_annotation``
runs them all and knows none by name. A check answers None without the data it needs, so
shares divide by the annotations judged. Every field is taken from the rubric.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from difflib import SequenceMatcher
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, StrictInt, model_validator

from ...dimensions import (
    AGENTS,
    DIMENSIONS,
    Dimension,
    RationaleCases,
    rating_name,
    reasoning_name,
)
from ...scores import RATING_FIELDS, Evaluation

if TYPE_CHECKING:  # pandas only for ``participant_shares``: the study file imports this module
    import pandas as pd

FlatForm = dict[str, Any]
RATIONALE_FIELDS: tuple[str, ...] = tuple(
    reasoning_name(d.key, agent) for agent in AGENTS for d in DIMENSIONS
)
# Each rating field's (lowest, highest) score.
_BOUNDS: dict[str, tuple[int, int]] = {
    rating_name(d.key, agent): (d.range_low, d.range_high) for agent in AGENTS for d in DIMENSIONS
}
# Characters a person types in a second, at the most: twice the fastest typists' (about 240
# words a minute), since a phone's keyboard counts a word again each time it corrects it.
MOST_TYPED_PER_SECOND = 40


class FlagThresholds(BaseModel):
    """Every flag's threshold, with its default."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    min_rationale_words: int = Field(5, ge=1, description="a rationale under this many words is short")
    repeat_count: int = Field(2, ge=2, description="one rationale this many times is repeated")
    copy_min_chars: int = Field(
        30, ge=1, description="rationales shorter than this (normalized) are not compared "
        "across participants: short answers agree by chance"
    )
    copy_similarity: float = Field(0.9, gt=0, le=1, description="SequenceMatcher ratio of a copy")
    words_per_minute: float = Field(250, gt=0, description="reading speed of the time estimate")
    reading_factor: float = Field(1.0, gt=0, description="share of the reading time required")
    pasted_share: float = Field(0.8, gt=0, le=1, description="pasted share of a pasted rationale")
    gold_distance: int = Field(2, ge=0, description="largest |score - reference| allowed")
    # The rubric's own worked example gives knowledge 2 beside "doesn't appear to gain new
    # information": a score this near zero agrees with a rationale stating the zero case.
    zero_case_distance: int = Field(2, ge=0, description="largest |score| beside a rationale "
                                    "stating its dimension's zero case")


class Typing(BaseModel):
    """How a rationale's characters came in: pasted or typed."""

    model_config = ConfigDict(frozen=True)

    pasted: StrictInt = Field(ge=0)
    typed: StrictInt = Field(ge=0)

    @property
    def characters(self) -> int:
        return self.pasted + self.typed


class Earlier(BaseModel):
    """Another participant's ratings of the same episode, submitted before the annotation's."""

    model_config = ConfigDict(frozen=True)

    participant: str
    fields: FlatForm


class Annotation(BaseModel):
    """One participant's ratings of one episode, and what is known about how they were given."""

    model_config = ConfigDict(frozen=True)

    participant: str
    episode: str
    fields: FlatForm
    episode_words: int | None = Field(None, ge=0)
    seconds: float | None = Field(None, ge=0)
    typing: dict[str, Typing] = {}  # by rationale field name (``reasoning_name``)
    earlier: tuple[Earlier, ...] = ()  # others' ratings of the episode, first submitted first
    reference: FlatForm | None = None
    # The episode's stored model evaluations: judge name → rationale field → text.
    judged: dict[str, dict[str, str]] = {}

    @model_validator(mode="after")
    def _valid(self) -> Annotation:
        # The score model's own checks: a score outside its dimension's range is refused here.
        for flat in (self.fields, *(other.fields for other in self.earlier),
                     *([self.reference] if self.reference else [])):
            Evaluation.from_flat(flat)
        for name in sorted(self.typing.keys() - set(RATIONALE_FIELDS)):
            raise ValueError(f"typing: {name!r} is no rationale field of the rubric")
        return self


# Whether a flag fires and why; None when the data it needs is not given.
Fired = tuple[bool, str] | None
Check = Callable[[Annotation, FlagThresholds], Fired]


@dataclass(frozen=True)
class Flag:
    """One quality flag: ``check`` says whether it fires and why, or None when not judged."""

    name: str
    description: str
    check: Check


@dataclass(frozen=True)
class FlagResult:
    name: str
    fired: bool
    detail: str


def _rationales(fields: Mapping[str, Any]) -> dict[str, str]:
    """Every rationale of a flat form, by field name, in rubric order."""
    return {name: str(fields[name]) for name in RATIONALE_FIELDS if name in fields}


def _ratings(fields: Mapping[str, Any]) -> dict[str, int]:
    return {name: fields[name] for name in RATING_FIELDS if name in fields}


def _words(text: str) -> list[str]:
    return re.findall(r"\w+", text.casefold())


def _normalized(text: str) -> str:
    """A rationale's words, lower case, without punctuation: texts equal but for case,
    spacing and punctuation are one text."""
    return " ".join(_words(text))


def _short(annotation: Annotation, limits: FlagThresholds) -> Fired:
    rationales = _rationales(annotation.fields)
    if not rationales:
        return None
    short = {name: len(_words(text)) for name, text in rationales.items()}
    short = {name: n for name, n in short.items() if n < limits.min_rationale_words}
    counted = f"{len(short)} of {len(rationales)} under {limits.min_rationale_words} words"
    listed = ", ".join(f"{name} ({n} words)" for name, n in short.items())
    return bool(short), f"{counted}: {listed}" if listed else counted


def _repeated(annotation: Annotation, limits: FlagThresholds) -> Fired:
    rationales = _rationales(annotation.fields)
    if not rationales:
        return None
    groups: dict[str, list[str]] = defaultdict(list)
    for name, text in rationales.items():
        if key := _normalized(text):
            groups[key].append(name)
    repeated = [names for names in groups.values() if len(names) >= limits.repeat_count]
    if not repeated:
        return False, "every rationale differs"
    return True, "; ".join("one text in " + ", ".join(names) for names in repeated)


class _Other:
    """Another participant's rationale (normalized) and who gave it, with what comparing it
    needs computed once: its letters counted, and a matcher indexing it, made when first
    needed."""

    def __init__(self, text: str, participant: str) -> None:
        self.text, self.participant = text, participant
        self.letters = Counter(text)
        self._matcher: SequenceMatcher[str] | None = None

    def similar(self, mine: str, letters: Counter[str], limits: FlagThresholds) -> bool:
        """Whether ``mine`` (its ``letters`` counted) nearly equals this text."""
        if mine == self.text:
            return True
        total = len(mine) + len(self.text)
        # SequenceMatcher's own upper bounds of its ratio first (real_quick_ratio from the
        # lengths, quick_ratio from the letters), cheap here: most pairs are far apart.
        if (2.0 * min(len(mine), len(self.text)) / total < limits.copy_similarity
                or 2.0 * sum((letters & self.letters).values()) / total < limits.copy_similarity):
            return False
        if self._matcher is None:
            self._matcher = SequenceMatcher(None, b=self.text, autojunk=False)
        self._matcher.set_seq1(mine)
        return self._matcher.ratio() >= limits.copy_similarity


def _source(mine: str, theirs: Sequence[_Other], limits: FlagThresholds) -> str | None:
    """The participant of the first of ``theirs`` that ``mine`` matches; None when none does."""
    letters = Counter(mine)
    return next((other.participant for other in theirs
                 if other.similar(mine, letters, limits)), None)


def _matching(fields: Mapping[str, Any], texts: Iterable[tuple[str, str]],
              limits: FlagThresholds) -> dict[str, str]:
    """Each rationale of ``fields`` that nearly equals one of ``texts`` (text, whose), to
    whose it matches; texts shorter than ``copy_min_chars`` are not compared."""
    theirs = [_Other(text, who) for text, who in
              ((_normalized(raw), who) for raw, who in texts)
              if len(text) >= limits.copy_min_chars]
    return {name: source for name, text in _rationales(fields).items()
            if len(mine := _normalized(text)) >= limits.copy_min_chars
            and (source := _source(mine, theirs, limits)) is not None}


def _copied(annotation: Annotation, limits: FlagThresholds) -> Fired:
    if not annotation.earlier:
        return None
    copied = _matching(annotation.fields, ((text, other.participant)
                                           for other in annotation.earlier
                                           for text in _rationales(other.fields).values()),
                       limits)
    if not copied:
        return False, (f"no rationale matches an earlier participant's "
                       f"({len(annotation.earlier)} compared)")
    return True, "matches a rationale submitted earlier: " + ", ".join(
        f"{name} (participant {source})" for name, source in copied.items())


def _echoed(annotation: Annotation, limits: FlagThresholds) -> Fired:
    """A rationale near-identical to a stored judge's on the episode: the participant saw or
    generated the model's output. Near-identical is a copy's ``copy_similarity`` (0.9 of
    SequenceMatcher's ratio, normalized texts): two Sotopia-pi raters writing on one rating of
    one episode reach 0.82 at most (403 pairs of its released ratings, both quoting the
    agent's secret), while a copy with a few words changed stays above 0.9."""
    if not annotation.judged:
        return None
    echoed = _matching(annotation.fields, ((text, judge)
                                           for judge, texts in annotation.judged.items()
                                           for text in texts.values()), limits)
    if not echoed:
        return False, f"no rationale matches a judge's ({len(annotation.judged)} compared)"
    return True, "matches a judge's reasoning on the episode: " + ", ".join(
        f"{name} ({judge})" for name, judge in echoed.items())


def _fast(annotation: Annotation, limits: FlagThresholds) -> Fired:
    if annotation.seconds is None or annotation.episode_words is None:
        return None
    needed = annotation.episode_words / limits.words_per_minute * 60 * limits.reading_factor
    return annotation.seconds < needed, (
        f"{annotation.seconds:.0f} s on task; reading {annotation.episode_words} words "
        f"takes {needed:.0f} s"
    )


def measured_typing(annotation: Annotation) -> tuple[dict[str, Typing], str]:
    """The typing counts of the annotation's rationales that can be true, and why the others
    are not measured ("" when every rationale is).

    A rationale's counts must cover its text (every character of it came in somehow), and the
    characters typed in all must fit the time on task at ``MOST_TYPED_PER_SECOND``; which
    characters were pasted is the browser's word alone."""
    rationales = _rationales(annotation.fields)
    typed = sum(counted.typed for counted in annotation.typing.values())
    if annotation.seconds is not None and typed > annotation.seconds * MOST_TYPED_PER_SECOND:
        return {}, (f"the page claims {typed} characters typed in {annotation.seconds:.0f} s "
                    "on task")
    counts = {name: annotation.typing.get(name) for name in rationales}
    measured = {name: counted for name, counted in counts.items()
                if counted is not None and counted.characters >= len(rationales[name])}
    short = [name for name in rationales if name not in measured]
    if short and not annotation.typing:
        return measured, "no typing counts came with the rating"
    return measured, ("counts short of the text of " + ", ".join(short)) if short else ""


def _pasted(annotation: Annotation, limits: FlagThresholds) -> Fired:
    measured, unmeasured = measured_typing(annotation)
    shares = {name: typing.pasted / typing.characters for name, typing in measured.items()}
    pasted = {name: share for name, share in shares.items() if share >= limits.pasted_share}
    if pasted:
        return True, "mostly pasted: " + ", ".join(f"{n} ({s:.0%})" for n, s in pasted.items())
    if unmeasured or not shares:
        return None  # not measured: the review says so, never that it passed
    return False, f"no rationale mostly pasted ({len(shares)} measured)"


def _straight(annotation: Annotation, limits: FlagThresholds) -> Fired:
    ratings = _ratings(annotation.fields)
    if len(ratings) < 2:
        return None
    if len(set(ratings.values())) == 1:
        return True, f"every score is {next(iter(ratings.values()))}"
    for end, side in ((1, "maximum"), (0, "minimum")):
        if all(score == _BOUNDS[name][end] for name, score in ratings.items()):
            return True, f"every score at its dimension's {side}"
    return False, f"{len(set(ratings.values()))} distinct scores"


def largest_distance(fields: Mapping[str, Any],
                     reference: Mapping[str, Any]) -> tuple[str, int, int] | None:
    """The rating farthest from its reference: its field, score and reference score; None when
    no rating of ``fields`` has a reference."""
    gold = _ratings(reference)
    pairs = [(name, score, gold[name]) for name, score in _ratings(fields).items() if name in gold]
    return max(pairs, key=lambda pair: abs(pair[1] - pair[2]), default=None)


def _gold(annotation: Annotation, limits: FlagThresholds) -> Fired:
    if annotation.reference is None:
        return None
    farthest = largest_distance(annotation.fields, annotation.reference)
    if farthest is None:
        return None
    name, score, gold = farthest
    distance = abs(score - gold)
    return distance > limits.gold_distance, (
        f"largest distance {distance} ({name}: {score}, reference {gold})"
    )


# "didn't", "doesnt", "can't": the rubric's patterns read them as "did not", "can not".
_NOT = re.compile(r"\b(ca|wo|did|does|do|was|were|has|had|have|is|are|could|would|should)"
                  r"n['’]?t\b")
_AUXILIARY = {"ca": "can", "wo": "will"}
# A gain or a loss stated under one of these (three words before it) is not stated.
_NEGATED = re.compile(r"\b(?:no|not|never|nor|without)\b(?:\W+\w+){0,2}\W+$")


def _stated(text: str) -> str:
    """A rationale as the rubric's ``rationale_cases`` read it (``RationaleCases``)."""
    text = _NOT.sub(lambda found: f"{_AUXILIARY.get(found[1], found[1])} not", text.casefold())
    return " ".join(re.findall(r"[\w']+|[^\w\s]", text))


def _states(patterns: Sequence[re.Pattern[str]], text: str, denied: bool = True) -> bool:
    """Whether ``text`` (``_stated``) states one of ``patterns``; unless ``denied``, a match
    under a negation ("did not improve") does not count."""
    return any(denied or not _NEGATED.search(text[:found.start()])
               for pattern in patterns for found in pattern.finditer(text))


def contradiction(dimension: Dimension, rationale: str, score: int,
                  limits: FlagThresholds) -> str | None:
    """Why ``rationale`` does not support ``score`` on ``dimension``; None when nothing it
    states says so. Stating the zero case, it contradicts a score farther from zero than
    ``zero_case_distance`` (and names a gain or loss only to deny it: "no gain or loss");
    else stating only a gain or only a loss, a score of the other sign."""
    cases, text = dimension.rationale_cases, _stated(rationale)
    if _states(cases.zero, text):
        return "states its zero case" if abs(score) > limits.zero_case_distance else None
    gain, loss = (_states(cases.positive, text, denied=False),
                  _states(cases.negative, text, denied=False))
    if score > 0 and loss and not gain:
        return "states a loss"
    if score < 0 and gain and not loss:
        return "states a gain"
    return None


def _inconsistent(annotation: Annotation, limits: FlagThresholds) -> Fired:
    judged = [(dimension, agent) for dimension in DIMENSIONS for agent in AGENTS
              if dimension.rationale_cases != RationaleCases()
              and reasoning_name(dimension.key, agent) in annotation.fields
              and rating_name(dimension.key, agent) in annotation.fields]
    if not judged:
        return None
    found = []
    for dimension, agent in judged:
        score = annotation.fields[rating_name(dimension.key, agent)]
        rationale = str(annotation.fields[reasoning_name(dimension.key, agent)])
        if why := contradiction(dimension, rationale, score, limits):
            found.append(f"{rating_name(dimension.key, agent)} {score}: the rationale {why}")
    return bool(found), "; ".join(found) or f"{len(judged)} rationales support their scores"


FLAGS: tuple[Flag, ...] = (
    Flag("short_rationale", "a rationale is shorter than the minimum word count", _short),
    Flag("repeated_rationale", "one rationale given for several dimensions or agents", _repeated),
    Flag("copied_rationale", "a rationale equals or nearly equals one another participant "
         "submitted earlier", _copied),
    Flag("too_fast", "time on task below the time it takes to read the episode", _fast),
    Flag("pasted_rationale", "a rationale was mostly pasted rather than typed", _pasted),
    Flag("straight_lining", "one score everywhere, or every score at its maximum or minimum",
         _straight),
    # Sotopia-pi's rule: an annotator more than 2 points from the reference on a dimension.
    Flag("gold_distance", "a score far from the reference rating", _gold),
    Flag("rationale_echoes_judge", "a rationale equals or nearly equals a model judge's "
         "stored reasoning on the episode", _echoed),
    Flag("rationale_contradicts_score", "a rationale states its dimension's zero case beside "
         "a score far from zero, or a gain or loss beside a score of the other sign",
         _inconsistent),
)


def flag_annotation(
    annotation: Annotation,
    thresholds: FlagThresholds | None = None,
    flags: Sequence[Flag] = FLAGS,
) -> tuple[FlagResult, ...]:
    """The result of every flag that can judge ``annotation``, in the order of ``flags``."""
    limits = thresholds or FlagThresholds()
    results = []
    for flag in flags:
        fired = flag.check(annotation, limits)
        if fired is not None:
            results.append(FlagResult(flag.name, *fired))
    return tuple(results)


def participant_shares(flagged: Iterable[tuple[str, Sequence[FlagResult]]]) -> pd.DataFrame:
    """Per participant and flag: annotations judged, how many fired, and their share.

    ``flagged`` holds each annotation's participant and ``flag_annotation`` result."""
    import pandas as pd

    rows = [
        {"participant": participant, "flag": result.name, "fired": result.fired}
        for participant, results in flagged
        for result in results
    ]
    table = pd.DataFrame(rows, columns=["participant", "flag", "fired"])
    shares = (
        table.groupby(["participant", "flag"], sort=True)["fired"]
        .agg(judged="size", fired="sum")
        .reset_index()
    )
    shares["fired"] = shares["fired"].astype(int)
    shares["share"] = shares["fired"] / shares["judged"]
    return shares
