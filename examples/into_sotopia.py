"""Hand a sotopia-ls export to Sotopia: its own models, its own aggregation.

Run it where sotopia is installed (tested with sotopia 0.1.5). Sotopia keeps its records in
Redis unless told otherwise; ``SOTOPIA_STORAGE_BACKEND=local`` keeps them in JSON files under
your home folder instead, so no Redis is needed:

    SOTOPIA_STORAGE_BACKEND=local python examples/into_sotopia.py results/ episodes.jsonl

``results/`` is what ``sotopia-ls export -o results/`` wrote; ``episodes.jsonl`` holds the
rated episodes as Sotopia ``EpisodeLog`` records (JSON lines, or one JSON object), the episodes
the annotations are about. Prints, per episode, the human rewards Sotopia aggregates from the
annotations (its ``map_human_annotations_to_episode_logs(aggregate=True)``) as JSON lines.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from sotopia.database import AnnotationForEpisode, EpisodeLog
from sotopia.database.aggregate_annotations import map_human_annotations_to_episode_logs


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
    main(Path(sys.argv[1]), Path(sys.argv[2]))
