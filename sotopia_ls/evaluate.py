"""An LLM judge's evaluation of every episode of a project that has none by that model.

``evaluate_project`` asks the judge (``sotopia_ls.judge``: Sotopia's evaluation prompt, the
rubric's ranges) about each task whose ``meta`` holds no evaluation by the judge's model, and
keeps each answer in the task's ``meta`` under ``sotopia_judges`` (``{model: evaluation}``,
beside the importer's ``sotopia_evaluation``), where the export and the pre-annotation
backend read model evaluations and no annotator sees them. Running it again with another
model adds a second judge; running it again with the same model asks only for what is
missing.

Requests run on ``judge.workers`` threads; evaluations are written to Label Studio in batches
as they come, so an interrupted run keeps what it got. An episode whose answers were all
unusable (malformed, out of range, no answer) is reported with the reasons, never stored.
One run per project at a time: a task's meta is replaced whole.
"""

from __future__ import annotations

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


@dataclass
class EvaluationRun:
    """What a run did: tasks seen, already judged by the model, judged now, and each episode
    left without an evaluation with the reason."""

    project_id: int
    model: str
    tasks: int = 0
    already: int = 0
    judged: int = 0
    failed: dict[str, str] = field(default_factory=dict)

    @property
    def asked(self) -> int:
        return self.tasks - self.already


def judged_meta(meta: dict[str, Any], evaluation: Evaluation) -> dict[str, Any]:
    """``meta`` with ``evaluation`` added under its evaluator's name; other judges kept."""
    judges = meta.get(JUDGES)
    kept = dict(judges) if isinstance(judges, dict) else {}
    return {**meta, JUDGES: {**kept, evaluation.evaluator: evaluation.model_dump(mode="json")}}


def evaluate_project(
    client: Client, project: str | int, judge: LLMJudge, *,
    batch_size: int = WRITE_BATCH, progress: bool = False,
) -> EvaluationRun:
    """Have ``judge`` evaluate every episode of ``project`` (id or exact title) it has not
    evaluated yet; each evaluation goes into its task's ``meta``. ``JudgeRefused`` when the
    endpoint refuses the requests themselves (what was judged before is kept)."""
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

    pool = ThreadPoolExecutor(judge.workers)
    try:
        asked: dict[Future[Evaluation], TaskRecord] = {
            pool.submit(judge.judge, record.data): record for record in todo
        }
        with tqdm(total=len(todo), desc=f"evaluate ({judge.model})", unit="episode",
                  disable=not progress) as bar:
            for done in as_completed(asked):
                record = asked[done]
                bar.update()
                try:
                    pending[record.id] = judged_meta(record.meta, done.result())
                except JudgeError as exc:
                    run.failed[str(record.data.get(EPISODE_ID) or f"task {record.id}")] = str(exc)
                except EndpointRefused as exc:
                    raise JudgeRefused(f"{exc}; nothing more was asked") from exc
                if len(pending) >= batch_size:
                    flush()
    finally:
        # Interrupted or refused: stop asking, and keep what was answered.
        pool.shutdown(wait=True, cancel_futures=True)
        if pending:
            flush()
    return run
