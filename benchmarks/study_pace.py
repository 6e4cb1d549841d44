"""People's pace for the study gateway's benchmark: how long a simulated participant spends on
the instructions and on each episode (lognormal around what they read, write and pick), and
who leaves in the middle (abandons, reloads, or returns without the cookie).

``Pace.scale`` multiplies every time, so a scaled run keeps the load's shape: it checks the
code, it does not measure people.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from enum import Enum
from typing import Any

# Silent reading of English non-fiction, adults (Brysbaert 2019, "How many words do we read
# per minute?", a meta-analysis of 190 studies: 238 words per minute).
WORDS_READ_PER_MINUTE = 238.0
# Writing short answers at a keyboard while composing them, slower than copying text (about
# 40 words per minute).
WORDS_WRITTEN_PER_MINUTE = 25.0
SECONDS_PER_CHOICE = 4.0
SPREAD = 0.3
INSTRUCTIONS_MINUTES = 2.0
ABANDON_SHARE = RELOAD_SHARE = RETURN_SHARE = 0.03
RETURN_PAUSE_MINUTES = (1.0, 10.0)


class Leaving(Enum):
    """How a participant leaves the middle of an episode."""

    ABANDON = "abandon"  # never comes back
    RELOAD = "reload"  # reloads the rating page in the same browser
    RETURN = "return"  # opens the study link again later, in a browser without the cookie


def words(value: Any) -> int:
    """Words in every text of ``value`` (a string, or lists and dicts of them)."""
    if isinstance(value, str):
        return len(value.split())
    if isinstance(value, list):
        return sum(words(item) for item in value)
    if isinstance(value, dict):
        return sum(words(item) for item in value.values())
    return 0


def estimate_minutes(shown: dict[str, Any], results: list[dict[str, Any]]) -> float:
    """Minutes to read the episode ``shown`` and give the answers ``results`` (Label Studio
    results: a textarea's text is written, a choice picked)."""
    written = sum(words(result["value"].get("text", [])) for result in results)
    choices = sum(result["type"] == "choices" for result in results)
    return (words(shown) / WORDS_READ_PER_MINUTE + written / WORDS_WRITTEN_PER_MINUTE
            + choices * SECONDS_PER_CHOICE / 60)


@dataclass(frozen=True)
class Person:
    """One simulated participant's pace: seconds are already scaled."""

    scale: float
    instructions_minutes: float
    spread: tuple[float, ...]  # per episode, the factor on the estimate (lognormal, median 1)
    leaving: Leaving | None = None
    leaves_at: int = 0  # the episode (0-based) they leave in the middle of
    leaves_after: float = 0.0  # the share of its minutes spent before leaving
    pause_minutes: float = 0.0  # away, before a return

    @classmethod
    def hurried(cls) -> Person:
        """The burst's participant: no time on anything, never leaves."""
        return cls(scale=0.0, instructions_minutes=0.0, spread=())

    def episode_minutes(self, episode: int, shown: dict[str, Any],
                        results: list[dict[str, Any]]) -> float:
        """Unscaled minutes on the ``episode``-th episode (0 for the burst)."""
        if not self.scale:
            return 0.0
        return estimate_minutes(shown, results) * self.spread[episode]

    def seconds(self, minutes: float) -> float:
        return minutes * 60 * self.scale


@dataclass(frozen=True)
class Pace:
    """People's pace, every time multiplied by ``scale``."""

    scale: float = 1.0

    def person(self, rng: random.Random, episodes: int, leaving: Leaving | None = None) -> Person:
        """A participant rating up to ``episodes`` episodes; ``leaving``: how they leave the
        middle of one (drawn uniformly)."""
        return Person(
            scale=self.scale,
            instructions_minutes=INSTRUCTIONS_MINUTES * rng.lognormvariate(0, SPREAD),
            spread=tuple(rng.lognormvariate(0, SPREAD) for _ in range(episodes)),
            leaving=leaving, leaves_at=rng.randrange(episodes), leaves_after=rng.random(),
            pause_minutes=rng.uniform(*RETURN_PAUSE_MINUTES))

    def people(self, count: int, episodes: int, rng: random.Random) -> list[Person]:
        """``count`` participants, ``ABANDON_SHARE``, ``RELOAD_SHARE`` and ``RETURN_SHARE`` of
        them (each at least one, drawn without overlap) leaving in the middle of an episode."""
        shares = {Leaving.ABANDON: ABANDON_SHARE, Leaving.RELOAD: RELOAD_SHARE,
                  Leaving.RETURN: RETURN_SHARE}
        chosen = iter(rng.sample(range(count), min(count, sum(
            max(1, round(share * count)) for share in shares.values()))))
        leaving: dict[int, Leaving] = {}
        for kind, share in shares.items():
            for _ in range(max(1, round(share * count))):
                index = next(chosen, None)
                if index is not None:
                    leaving[index] = kind
        return [self.person(rng, episodes, leaving.get(index)) for index in range(count)]
