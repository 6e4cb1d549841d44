"""Synthetic load made from the real Sotopia sample data shipped with the package.

Episodes are copies of the sample episodes (parsed by the importer) with fresh ids and a
different run of turns each, so task sizes spread around the real ones. Annotations reuse the
ratings and rationales of real rows of the sample oTree human-evaluation CSVs, so an export
file holds the text lengths and score spread of a real study.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pandas as pd

from sotopia_ls.episode import Episode
from sotopia_ls.importer import load_episodes
from sotopia_ls.labelstudio.results import evaluation_results
from sotopia_ls.labelstudio.tasks import episode_meta, episode_to_task
from sotopia_ls.samples import DUMP, EPISODELOG, HUMAN_EVAL, OTREE_EPISODES
from sotopia_ls.scores import Evaluation

SEED_FILES = (OTREE_EPISODES, EPISODELOG, DUMP)

def seed_episodes() -> list[Episode]:
    """Every episode of the sample episode files; any parse problem is an error here."""
    result = load_episodes(SEED_FILES)
    result.raise_on_problems()
    return result.episodes


def vary(episode: Episode, index: int, rng: random.Random) -> Episode:
    """A copy with a fresh id whose turns are a run of between half and twice the original's."""
    turns = episode.turns
    count = rng.randint(max(1, len(turns) // 2), 2 * len(turns))
    start = rng.randrange(len(turns))
    varied = tuple(turns[(start + step) % len(turns)] for step in range(count))
    # Speakers and agents are unchanged, so the copy keeps the original's validity.
    return episode.model_copy(update={"id": f"bench-{index:06d}-{episode.id}", "turns": varied})


def episodes(seeds: list[Episode], count: int, *, seed: int = 0) -> list[Episode]:
    """``count`` varied copies of ``seeds``, taken in turn; the same ``seed`` gives the same load."""
    rng = random.Random(seed)
    return [vary(seeds[index % len(seeds)], index, rng) for index in range(count)]


def real_ratings() -> list[list[dict[str, Any]]]:
    """The answers of each row of the sample human-evaluation CSVs, as Label Studio results:
    an oTree CSV row is the flat form of the score model."""
    frames = [pd.read_csv(path) for path in sorted(HUMAN_EVAL.glob("*.csv"))]
    rows = pd.concat(frames, ignore_index=True).to_dict("records")
    return [evaluation_results(Evaluation.from_flat(row)) for row in rows]


def _export_task(
    task_id: int,
    episode: Episode,
    annotators: int,
    ratings: list[list[dict[str, Any]]],
    rng: random.Random,
    first_annotation_id: int,
) -> dict[str, Any]:
    """One task as Label Studio 1.23's JSON export writes it, with ``annotators`` annotations."""
    created = datetime(2025, 1, 1, tzinfo=timezone.utc) + timedelta(minutes=task_id)
    stamp = created.isoformat().replace("+00:00", "Z")
    annotations = []
    for offset in range(annotators):
        annotation_id = first_annotation_id + offset
        annotations.append(
            {
                "id": annotation_id,
                "completed_by": 2 + offset,
                "result": rng.choice(ratings),
                "was_cancelled": False,
                "ground_truth": False,
                "created_at": stamp,
                "updated_at": stamp,
                "draft_created_at": None,
                "lead_time": round(rng.uniform(120, 1200), 3),
                "prediction": {},
                "result_count": 28,
                "unique_id": f"00000000-0000-4000-8000-{annotation_id:012d}",
                "import_id": None,
                "last_action": None,
                "bulk_created": False,
                "task": task_id,
                "project": 1,
                "updated_by": 2 + offset,
                "parent_prediction": None,
                "parent_annotation": None,
                "last_created_by": None,
            }
        )
    return {
        "id": task_id,
        "annotations": annotations,
        "drafts": [],
        "predictions": [],
        "data": episode_to_task(episode),
        "meta": episode_meta(episode),
        "created_at": stamp,
        "updated_at": stamp,
        "allow_skip": True,
        "inner_id": task_id,
        "total_annotations": annotators,
        "cancelled_annotations": 0,
        "total_predictions": 0,
        "comment_count": 0,
        "unresolved_comment_count": 0,
        "last_comment_updated_at": None,
        "project": 1,
        "updated_by": 2,
        "comment_authors": [],
    }


def _export_tasks(
    seeds: list[Episode], ratings: list[list[dict[str, Any]]], total: int, annotators: int,
    seed: int,
) -> Iterator[dict[str, Any]]:
    rng = random.Random(seed)
    done = 0
    task_id = 1
    while done < total:
        count = min(annotators, total - done)
        episode = vary(seeds[(task_id - 1) % len(seeds)], task_id, rng)
        yield _export_task(task_id, episode, count, ratings, rng, done + 1)
        done += count
        task_id += 1


def write_export_file(
    path: Path, *, annotations: int, annotators: int = 2, seed: int = 0
) -> Path:
    """A Label Studio JSON export with ``annotations`` annotations, ``annotators`` per task.

    Written task by task, so a file larger than memory can be made; reused when it exists.
    """
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    tasks = _export_tasks(seed_episodes(), real_ratings(), annotations, annotators, seed)
    with partial.open("w", encoding="utf-8") as out:
        out.write("[")
        for index, task in enumerate(tasks):
            out.write(",\n" if index else "\n")
            out.write(json.dumps(task, ensure_ascii=False))
        out.write("\n]\n")
    partial.rename(path)
    return path
