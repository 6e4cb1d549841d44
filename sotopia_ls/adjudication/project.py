"""``adjudicate``: the study project's disputed episodes into an adjudication project.

The study project is read as the exporter reads it, so what the export refuses is not
adjudicated; each disputed episode (never a gold one) becomes one task, once, so a rerun adds
only what was disputed since (README.md, "sotopia-ls adjudicate").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..config import instructions_html
from ..errors import LabelStudioError, ProjectNotFound
from ..exporter.export import export_project
from ..labelstudio.client import (
    Client,
    Project,
    create_project,
    find_project,
    import_batch,
    project_task_data,
    task_records,
)
from ..labelstudio.push import DEFAULT_BATCH_SIZE
from ..labelstudio.tasks import EPISODE_ID
from ..exporter.tables import gold_rows
from ..scores import DISAGREEMENT_THRESHOLD
from .disputes import DISPUTES_KEY, EpisodeRatings, disputes_of, episode_ratings
from .reading import read_disputes
from .screen import adjudication_config, missing_control, screen_data

_INTRO = ("<h2>Adjudicating disagreements</h2><p>Each task is an episode whose raters "
          "disagreed by more than the threshold on at least one dimension. Their scores and "
          "rationales are shown side by side under pseudonyms (rater A, B, C). For every "
          "disputed dimension, give the rating the episode deserves under the rubric below and "
          "a note on why; agreed dimensions ask for nothing.</p>\n")


def adjudication_instructions() -> str:
    """The adjudication project's instructions: what is asked, then the raters' rubric."""
    return _INTRO + instructions_html()


@dataclass
class AdjudicationReport:
    """What ``adjudicate`` did: the adjudication ``project`` (``created`` by this run), how
    many episodes were ``rated`` and ``disputed``, the episodes ``added`` to the project,
    those ``already_there`` and, of those, the ones whose raters ``changed`` since they were
    sent."""

    project: Project
    created: bool
    rated: int
    disputed: int
    added: list[str] = field(default_factory=list)
    already_there: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)


def default_title(study: Project) -> str:
    return f"{study.title} adjudication"


def adjudicate(
    client: Client, project: str | int, *, threshold: int = DISAGREEMENT_THRESHOLD,
    into: str | int | None = None, exclude_rejected: bool = False,
    batch_size: int = DEFAULT_BATCH_SIZE,
) -> AdjudicationReport:
    """Send every episode of the study ``project`` whose ratings differ by more than
    ``threshold`` on any dimension and agent to the adjudication project ``into`` (id or
    title; default ``"<study title> adjudication"``, created when there is none).
    ``exclude_rejected`` leaves out annotations the study review marked reject; gold
    episodes are left out."""
    if threshold < 0:
        raise ValueError(f"threshold must be 0 or more, got {threshold}")
    study = find_project(client, project)
    long = export_project(client, study, exclude_rejected=exclude_rejected).scores_long
    episodes = episode_ratings(long[~gold_rows(long)])
    disputed = [episode for episode in episodes if episode.disputed(threshold)]
    target, created = _adjudication_project(client, into or default_title(study))
    sent = _sent(client, target.id)
    report = AdjudicationReport(target, created, len(episodes), len(disputed))
    report.already_there = [e.episode_id for e in disputed if (study.id, e.episode_id) in sent]
    report.changed = [e.episode_id for e in disputed
                      if sent.get((study.id, e.episode_id), e.raters) != e.raters]
    todo = [e for e in disputed if (study.id, e.episode_id) not in sent]
    if todo:
        data = project_task_data(client, study.id)
        payloads = [_task(episode, data[episode.task_id], study.id, threshold)
                    for episode in todo]
        for start in range(0, len(payloads), batch_size):
            import_batch(client, target.id, payloads[start : start + batch_size])
            report.added += [e.episode_id for e in todo[start : start + batch_size]]
    return report


def _sent(client: Client, project_id: int) -> dict[tuple[int, str], dict[str, int]]:
    """``(study project, episode) → raters`` (pseudonym → annotation id) of every task the
    adjudication project holds, as it was sent."""
    sent: dict[tuple[int, str], dict[str, int]] = {}
    for task in task_records(client, project_id):
        disputes = read_disputes(task.meta, f"project {project_id}", f"task {task.id}")
        sent[(disputes.study_project, str(task.data.get(EPISODE_ID)))] = disputes.raters
    return sent


def _task(episode: EpisodeRatings, study_data: dict[str, Any], study_project: int,
          threshold: int) -> dict[str, Any]:
    return {
        "data": {**study_data, **screen_data(episode, threshold)},
        "meta": {DISPUTES_KEY: disputes_of(episode, study_project, threshold)
                 .model_dump(mode="json")},
    }


def _adjudication_project(client: Client, ref: str | int) -> tuple[Project, bool]:
    """The adjudication project ``ref``, created (when ``ref`` is a title) if missing; a
    project without the adjudication screen's controls (the study project itself, say) is
    refused."""
    try:
        target = find_project(client, ref)
    except ProjectNotFound:
        if str(ref).isdigit():
            raise
        return create_project(client, str(ref), annotations_per_task=1,
                              screen=(adjudication_config(), adjudication_instructions())), True
    missing = missing_control(target.label_config)
    if missing:
        raise LabelStudioError(
            f"project {target.title!r} is not an adjudication project (its labeling config "
            f"has no {missing}); give --into a new title and it is created",
            project=target.id)
    return target, False
