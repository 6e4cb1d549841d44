"""An LLM judge's evaluation of every episode of a project that has none by that model, kept
in the task's ``meta`` under ``sotopia_judges`` where no annotator sees it.

Answers are written in batches as they come, so an interrupted run keeps what it got; an
unusable answer is reported, never stored. One run per project at a time: a task's meta is
replaced whole.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from typing import Any

from tqdm.auto import tqdm

from .chat import EndpointRefused
from .errors import JudgeRefused
from .judge import JudgeError, LLMJudge
from .labelstudio.client import Client, TaskRecord, find_project, task_records, update_task_meta
from .labelstudio.tasks import EPISODE_ID, JUDGES, stored_judges
from .scores import Evaluation

WRITE_BATCH = 10


@dataclass(frozen=True)
class Failure:
    """Why a task got no evaluation; ``episode``: the id of the episode it holds."""

    episode: str
    reason: str


@dataclass
class EvaluationRun:
    """What a run did: tasks seen, already judged by the model, judged now, and each task
    left without an evaluation (by task id: one episode may be in several tasks)."""

    project_id: int
    model: str
    tasks: int = 0
    already: int = 0
    judged: int = 0
    failed: dict[int, Failure] = field(default_factory=dict)


def judged_meta(meta: dict[str, Any], evaluation: Evaluation) -> dict[str, Any]:
    """``meta`` with ``evaluation`` added under its evaluator's name; other judges kept."""
    judges = meta.get(JUDGES)
    kept = dict(judges) if isinstance(judges, dict) else {}
    return {**meta, JUDGES: {**kept, evaluation.evaluator: evaluation.model_dump(mode="json")}}


def evaluate_project(
    client: Client, project: str | int, judge: LLMJudge, *, workers: int = 1,
    batch_size: int = WRITE_BATCH, progress: bool = False,
) -> EvaluationRun:
    """Have ``judge`` evaluate every episode of ``project`` (id or exact title) it has not
    evaluated yet, ``workers`` requests at a time; each evaluation goes into its task's
    ``meta``. ``JudgeRefused`` when the endpoint refuses the requests themselves (every
    answer got before is kept)."""
    target = find_project(client, project)
    records = task_records(client, target.id)
    run = EvaluationRun(target.id, judge.model, tasks=len(records))
    todo = [record for record in records if judge.model not in stored_judges(record.meta)]
    run.already = len(records) - len(todo)
    pending: dict[int, dict[str, Any]] = {}

    def flush() -> None:
        while pending:
            task_id, meta = pending.popitem()
            update_task_meta(client, target.id, task_id, meta)
            run.judged += 1

    stop = threading.Event()
    pool = ThreadPoolExecutor(workers)
    asked: dict[Future[Evaluation], TaskRecord] = {}
    read: set[Future[Evaluation]] = set()
    try:
        for record in todo:
            asked[pool.submit(judge.judge, record.data, stop)] = record
        with tqdm(total=len(todo), desc=f"evaluate ({judge.model})", unit="episode",
                  disable=not progress) as bar:
            for done in as_completed(asked):
                read.add(done)
                record = asked[done]
                bar.update()
                try:
                    pending[record.id] = judged_meta(record.meta, done.result())
                except JudgeError as exc:
                    episode = str(record.data.get(EPISODE_ID) or "")
                    run.failed[record.id] = Failure(episode, str(exc))
                except EndpointRefused as exc:
                    raise JudgeRefused(f"{exc}; nothing more was asked") from exc
                if len(pending) >= batch_size:
                    flush()
    finally:
        # Interrupted or refused: send nothing more, end the waits before retries, and keep
        # every answer that came, read by the loop above or not.
        stop.set()
        pool.shutdown(wait=True, cancel_futures=True)
        for future, record in asked.items():
            if future not in read and _answered(future):
                pending[record.id] = judged_meta(record.meta, future.result())
        if pending:
            flush()
    return run


def _answered(future: Future[Evaluation]) -> bool:
    """True when ``future`` finished with an evaluation (not cancelled, not failed)."""
    return future.done() and not future.cancelled() and future.exception() is None
