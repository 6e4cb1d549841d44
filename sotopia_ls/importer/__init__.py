"""Sotopia episodes in every published format → ``sotopia_ls.episode.Episode``.

Formats (``FORMATS``, one ``Format`` object each), detected per file from the keys of its first
recognisable record:

- ``otree``      — episode JSON of Sotopia's oTree human-evaluation app (``rewards_prompt``;
  tried last, as an ``EpisodeLog`` keeps one too)
- ``episodelog`` — Sotopia ``EpisodeLog`` JSON / JSON lines (``messages``, or ``agents`` and
  ``rewards``)
- ``dump``       — released episode dumps, JSON lines (``episode_id``, ``agents_background`` or
  ``social_interactions``)
- ``otree-csv``  — oTree human-evaluation CSV, one row per annotator (``pk`` and ``data``),
  grouped into one episode per ``pk``

A ``Format`` says how to detect, parse and group its records (``sotopia_ls.importer.formats``);
the loader knows none by name. Another format is one more object: in ``FORMATS``, or for one
load ``load_episodes(paths, formats=FORMATS + (Format("mine", detects=..., parse=...),))``.

Example::

    from sotopia_ls.importer import load_episodes

    result = load_episodes(["episodes/", "dump.jsonl"])
    print(result.counts, result.duplicates)
    for problem in result.problems:
        print(problem)
"""

from .formats import FORMATS, Format, Grouping, OnePerRecord, detect_format
from .load import LoadResult, episodes_from_dataframe, episodes_from_records, load_episodes

__all__ = [
    "FORMATS",
    "Format",
    "Grouping",
    "LoadResult",
    "OnePerRecord",
    "detect_format",
    "episodes_from_dataframe",
    "episodes_from_records",
    "load_episodes",
]
