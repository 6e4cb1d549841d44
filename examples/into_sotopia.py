"""Hand a sotopia-ls export to Sotopia: its own models, its own aggregation.

Run it where sotopia is installed (tested with sotopia 0.1.5; ``scripts/sotopia-env`` makes
that environment, ``.venv-sotopia``). Sotopia keeps its records in Redis unless told otherwise;
``SOTOPIA_STORAGE_BACKEND=local`` keeps them in JSON files under your home folder instead:

    SOTOPIA_STORAGE_BACKEND=local .venv-sotopia/bin/python examples/into_sotopia.py results/

``results/`` is what ``sotopia-ls export -o results/`` wrote: its ``episode_logs.jsonl`` holds
the rated episodes as Sotopia ``EpisodeLog`` records, whatever format they were imported from.
A second argument names other ``EpisodeLog`` records of the same episodes (JSON lines, or one
JSON object), e.g. the originals from your Sotopia database. Prints, per episode, the human
rewards Sotopia aggregates from the annotations (its
``map_human_annotations_to_episode_logs(aggregate=True)``) as JSON lines.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

try:
    from sotopia.database import AnnotationForEpisode, EpisodeLog
    from sotopia.database.aggregate_annotations import map_human_annotations_to_episode_logs
except ModuleNotFoundError as missing:
    sys.exit(f"{missing.name} is not installed in {sys.executable}: run scripts/sotopia-env and "
             "then this with .venv-sotopia/bin/python (README.md, \"Into Sotopia\")")


def records(path: Path) -> list[dict]:
    text = path.read_text(encoding="utf-8").strip()
    if text.startswith("{") and "\n{" not in text:
        return [json.loads(text)]
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def main(export: Path, episodes: Path) -> None:
    for record in records(episodes):
        EpisodeLog(**record).save()
    annotations = [AnnotationForEpisode(**record) for record in records(export / "annotations.jsonl")]
    for annotation in annotations:
        annotation.save()
    aggregated = map_human_annotations_to_episode_logs(annotations, aggregate=True)
    for pk, episode in aggregated.items():
        print(json.dumps({"episode": pk, "rewards": episode.rewards}))


if __name__ == "__main__":
    export = Path(sys.argv[1])
    main(export, Path(sys.argv[2]) if len(sys.argv) > 2 else export / "episode_logs.jsonl")
