"""Sotopia episodes in every published format → ``sotopia_ls.episode.Episode``.

Formats (``FORMATS``), detected per file from the keys of its first record:

- ``otree``      — episode JSON of Sotopia's oTree human-evaluation app (``rewards_prompt``)
- ``episodelog`` — Sotopia ``EpisodeLog`` JSON / JSON lines (``messages``, ``rewards``)
- ``dump``       — released episode dumps, JSON lines (``agents_background``, ``social_goals``)
- ``otree-csv``  — oTree human-evaluation CSV, one row per annotator (``pk``, ``data``)

Example::

    from sotopia_ls.importer import load_episodes

    result = load_episodes(["episodes/", "dump.jsonl"])
    print(result.counts, result.duplicates)
    for problem in result.problems:
        print(problem)
"""

from .formats import FORMATS, detect_format
from .load import LoadResult, episodes_from_dataframe, episodes_from_records, load_episodes

__all__ = [
    "FORMATS",
    "LoadResult",
    "detect_format",
    "episodes_from_dataframe",
    "episodes_from_records",
    "load_episodes",
]
