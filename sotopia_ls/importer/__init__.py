"""Sotopia episodes in every published format → ``sotopia_ls.episode.Episode``.

The formats are ``FORMATS`` (one ``Format`` object each, ``formats``), detected per file; the
loader knows none by name, so another format is one more object. README.md, "Input formats",
lists them. Example::

    result = load_episodes(["episodes/", "dump.jsonl"])
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
