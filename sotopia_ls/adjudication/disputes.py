"""Which episodes the raters disagree on: the ratings of ``scores_long``, episode by episode,
under pseudonyms made for each episode (``A``, ``B``, ``C`` …) so the adjudicator cannot follow
a rater. The rule is ``scores.scores_disagree``, the one adaptive extra raters follow too.
"""

from __future__ import annotations

from dataclasses import dataclass
from string import ascii_uppercase
from typing import Literal

import pandas as pd
from pydantic import BaseModel, ConfigDict, Field, model_validator

from ..dimensions import AGENTS, DIMENSION_KEYS
from ..scores import scores_disagree

# {(agent, dimension key): {rater: (score, rationale)}}
Ratings = dict[tuple[int, str], dict[str, tuple[int, str]]]


def pseudonym(position: int) -> str:
    """The rater name of the ``position``-th annotation of an episode (from 0): A … Z, then
    A2 … Z2, and so on."""
    letter, lap = ascii_uppercase[position % 26], position // 26
    return letter if lap == 0 else f"{letter}{lap + 1}"


@dataclass(frozen=True)
class EpisodeRatings:
    """One episode's ratings: ``task_id`` the study task its data comes from, ``raters``
    each pseudonym's annotation id, ``ratings`` every rater's score and rationale."""

    episode_id: str
    task_id: int
    raters: dict[str, int]
    ratings: Ratings

    def disputed(self, threshold: int) -> list[tuple[int, str]]:
        """``(agent, dimension key)`` of every disputed rating, agent then rubric order."""
        return [(agent, key) for agent in AGENTS for key in DIMENSION_KEYS
                if scores_disagree([score for score, _ in self.ratings.get((agent, key), {})
                                .values()], threshold)]


def episode_ratings(long: pd.DataFrame) -> list[EpisodeRatings]:
    """Each episode's ratings in ``long`` (``scores_long``); ground-truth (reference)
    ratings are not a rater's and are left out."""
    crowd = long[~long["ground_truth"].astype(bool)]
    episodes = []
    for episode_id, rows in crowd.groupby("episode_id", sort=True):
        # In annotation order, so each table lists its raters A, B, C … left to right.
        rows = rows.sort_values("annotation_id", kind="stable")
        annotations = list(dict.fromkeys(rows["annotation_id"]))
        raters = {pseudonym(n): int(annotation) for n, annotation in enumerate(annotations)}
        letters = {annotation: rater for rater, annotation in raters.items()}
        ratings: Ratings = {}
        for row in rows.itertuples(index=False):
            ratings.setdefault((int(row.agent), str(row.dimension)), {})[
                letters[row.annotation_id]] = (int(row.score), str(row.rationale))
        episodes.append(EpisodeRatings(str(episode_id), int(rows["task_id"].min()), raters,
                                       ratings))
    return episodes


class Dispute(BaseModel):
    """One disputed rating: the agent, the dimension (of the rubric) and each rater's score."""

    model_config = ConfigDict(frozen=True)

    agent: Literal[AGENTS]  # type: ignore[valid-type]
    dimension: Literal[DIMENSION_KEYS]  # type: ignore[valid-type]
    scores: dict[str, int]


class Disputes(BaseModel):
    """What an adjudication task's meta keeps (``DISPUTES_KEY``): the study project and
    threshold it came from, the annotation behind each rater pseudonym, and the disputed
    ratings."""

    model_config = ConfigDict(frozen=True)

    study_project: int
    threshold: int = Field(ge=0)
    raters: dict[str, int]
    disputed: tuple[Dispute, ...]

    @model_validator(mode="after")
    def _raters_known(self) -> Disputes:
        for dispute in self.disputed:
            unknown = sorted(set(dispute.scores) - set(self.raters))
            if unknown:
                raise ValueError(f"rater {unknown[0]} of {dispute.dimension} for agent "
                                 f"{dispute.agent} is not one of the raters")
        return self


DISPUTES_KEY = "sotopia_adjudication"


def disputes_of(episode: EpisodeRatings, study_project: int, threshold: int) -> Disputes:
    """The meta record of an episode sent to adjudication."""
    return Disputes(
        study_project=study_project, threshold=threshold, raters=episode.raters,
        disputed=tuple(
            Dispute(agent=agent, dimension=key,
                    scores={rater: score for rater, (score, _)
                            in episode.ratings[(agent, key)].items()})
            for agent, key in episode.disputed(threshold)),
    )
