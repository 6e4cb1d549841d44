"""What every request of the gateway needs, made once at start (``prepare_gateway``): the study,
its database, the project's labeling config, the instructions, the writer behind the
participants, and the shown part of each task."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, select

from ...config import check_labeling_config, instructions_html
from ...errors import LabelStudioError, StudyError
from ...labelstudio.client import (
    Client,
    find_project,
    merge_task_meta,
    task_records,
)
from ...labelstudio.tasks import GOLD
from ..live.snapshots import keep_episode_ids
from ..outbox.saving import LabelStudioWriter, required_fields, to_names
from ..screening.gold import csv_references, episode_task_ids, gold_references
from ..screening.judges import keep_judges
from ..screening.practice import record_practice_episodes
from ..settings import StudyFile
from ..slots import leases
from ..store import allow_list, gold, slots
from .load import Load
from .shown import ShownFields

TASK_CACHE = 4096


@dataclass
class Gateway:
    """Everything a request needs: the study, its database, the project's config, the
    instructions' HTML, the writer, and the shown part of a task by its id."""

    study: StudyFile
    engine: Engine
    config: str
    required: list[dict[str, Any]]  # the required controls, for the rating page's own check
    instructions: str
    writer: LabelStudioWriter
    load: Load  # participant requests in progress in this process (the writer yields to them)
    shown: Callable[[int], dict[str, Any]]


def project_config(study: StudyFile, client: Client) -> str:
    """The study project's labeling config, checked against the rating contract."""
    return check_labeling_config(find_project(client, study.project).label_config)


def add_new_episodes(study: StudyFile, client: Client, engine: Engine,
                     config: str) -> leases.Added:
    """Copy the shown part of every task the gateway's database does not hold yet, each with
    its k slots (three for the share ``third_rater_share`` asks), its episode id, its judges'
    evaluations (for the running figures and the review), and, in a study that uses gold, the gold episodes' references (read again each
    time: ``gold.gold_references``); a qualification round gives no task slots, as it serves
    gold only. Running gateways offer them at once: assignment reads the slots and the gold
    from the database. Each gold episode is marked in its task's meta (``tasks.GOLD``), so
    that an export counts it apart (``mark_gold``)."""
    fields = ShownFields.of(config)
    records = task_records(client, study.project)
    data = {record.id: record.data for record in records}
    if not data:
        raise LabelStudioError("the project has no tasks: import episodes first",
                               project=study.project)
    references = gold_references(study, client, data) if study.uses_gold else None
    practice = practice_references(study, engine, data)
    keep_episode_ids(engine, study.name, data)
    metas = {record.id: record.meta for record in records}
    keep_judges(engine, study.name, metas)
    added = leases.add_episodes(engine, study.name,
                                {task: fields.shown(d) for task, d in data.items()},
                                study.raters_per_episode, references,
                                gold_only=study.qualification is not None, unslotted=practice,
                                third_rater_share=study.third_rater_share)
    if study.uses_gold:
        mark_gold(study, client, engine, metas)
    return added


def practice_references(study: StudyFile, engine: Engine,
                        data: dict[int, dict[str, Any]]) -> Collection[int]:
    """Record the references of the study's practice episodes (its CSV, read again each time)
    and name their tasks; a practice episode already served as an ordinary one (it has slots)
    would be data, and is refused by name."""
    if study.practice is None:
        return ()
    found = csv_references(Path(study.practice.references), episode_task_ids(data),
                           study.project, rationales=True)
    with engine.connect() as conn:
        slotted = sorted(set(conn.execute(select(slots.c.task_id).where(
            slots.c.study == study.name, slots.c.task_id.in_(sorted(found)))).scalars()))
    if slotted:
        raise StudyError(f"{study.practice.references}: task(s) {', '.join(map(str, slotted))} "
                         f"of study {study.name} were served as ordinary episodes, so they "
                         "cannot be practice episodes: import them again as new tasks")
    if not found:
        raise StudyError(f"{study.practice.references} holds no row: give at least one "
                         "practice episode")
    record_practice_episodes(engine, study.name, found)
    return found.keys()


def mark_gold(study: StudyFile, client: Client, engine: Engine,
              metas: Mapping[int, dict[str, Any]]) -> None:
    """Mark the study's gold episodes among the project's tasks (``metas``: each one's meta as
    just listed) in their tasks' meta: ``{"<study name>": true}`` under ``tasks.GOLD``. Those
    listed as marked are left as they are, so a restart or a sync sends Label Studio nothing
    for them and updates only the new ones."""
    with engine.connect() as conn:
        golden = conn.execute(select(gold.c.task_id).where(gold.c.study == study.name)).scalars()
        marks = {task: {study.name: True} for task in golden
                 if task in metas and not _marked(metas[task], study.name)}
    if marks:
        merge_task_meta(client, study.project, GOLD, marks)


def _marked(meta: dict[str, Any], study: str) -> bool:
    marks = meta.get(GOLD)
    return isinstance(marks, dict) and marks.get(study) is True


def check_required_round(study: StudyFile, engine: Engine) -> None:
    """A study that requires a qualification round admits only the round's allow-list, so
    one naming a round this database never held (no gold episode of it, nobody on its
    allow-list: a misspelt name, another database) would admit nobody: a ``StudyError``."""
    required = study.requires_qualification
    if required is None:
        return
    with engine.connect() as conn:
        held = [conn.execute(query.limit(1)).first() for query in (
            select(gold.c.task_id).where(gold.c.study == required),
            select(allow_list.c.external_id).where(allow_list.c.qualification == required))]
    if held == [None, None]:
        raise StudyError(
            f"study {study.name}: the study file's requires_qualification names {required!r}, "
            "but the study database holds no qualification round of that name (no gold "
            "episode, no allow-list): start that round's gateway on this database first "
            "(sotopia-ls study serve --study <its study file>), or correct the name")


def prepare_gateway(study: StudyFile, client: Client, engine: Engine) -> Gateway:
    """Check the qualification round the study requires, read the project's labeling config
    and copy every new task into the gateway's database."""
    check_required_round(study, engine)
    config = project_config(study, client)
    add_new_episodes(study, client, engine, config)

    @lru_cache(maxsize=TASK_CACHE)
    def shown(task_id: int) -> dict[str, Any]:
        return leases.shown_episode(engine, study.name, task_id)

    load = Load()
    return Gateway(study, engine, config, required_fields(config), instructions_html(),
                   LabelStudioWriter(engine, client, study.name, load, to_names(config)),
                   load, shown)
