"""``SotopiaJudge``: predictions holding a rating and a rationale for every dimension of the
rubric and both agents, from the evaluations stored in the task's meta (``stored``) or an LLM
judge (``llm``), chosen with ``SOTOPIA_LS_PROVIDER``. A prediction carries no ``score``
(Label Studio shows it as a confidence). It runs in the backend's own environment, so it
imports only the core that needs no label-studio-sdk.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

from label_studio_ml.model import LabelStudioMLBase
from pydantic import ValidationError

from sotopia_ls.chat import ChatEndpoint, EndpointRefused
from sotopia_ls.config import check_labeling_config, controls
from sotopia_ls.judge import JudgeError, LLMJudge, describe_error
from sotopia_ls.labelstudio.results import evaluation_results
from sotopia_ls.labelstudio.tasks import stored_judges
from sotopia_ls.scores import Evaluation

from . import PROVIDERS

logger = logging.getLogger(__name__)


class SettingsError(Exception):
    """An environment setting of the backend is missing or wrong."""


class NoPrediction(Exception):
    """The task gets no prediction; the message says why, ``level`` how loudly to log it."""

    def __init__(self, reason: str, level: int = logging.WARNING) -> None:
        super().__init__(reason)
        self.level = level


_CONFIGS_CACHED = 16
_to_names_by_digest: dict[bytes, dict[str, str]] = {}
_cache_lock = threading.Lock()


def to_names(label_config: str) -> dict[str, str]:
    """``control → the object it labels`` of a config that keeps the rating contract;
    ``InvalidLabelingConfig`` otherwise.

    Cached, as Label Studio sends the same config with every request, by the config's digest:
    a cache keyed by the text itself would keep the last configs sent alive, however large
    the requests that carried them. Callers must not mutate the answer.
    """
    digest = hashlib.sha256(label_config.encode()).digest()
    with _cache_lock:
        cached = _to_names_by_digest.get(digest)
    if cached is not None:
        return cached
    check_labeling_config(label_config)
    names = {name: control.to_name for name, control in controls(label_config).items()}
    with _cache_lock:
        if len(_to_names_by_digest) >= _CONFIGS_CACHED:
            del _to_names_by_digest[next(iter(_to_names_by_digest))]  # the oldest
        _to_names_by_digest[digest] = names
    return names


def prediction(evaluation: Evaluation, names: dict[str, str]) -> dict[str, Any]:
    """One Label Studio prediction: every result, and the judge's name as its version."""
    return {"result": evaluation_results(evaluation, names), "model_version": evaluation.evaluator}


class Provider(Protocol):
    workers: int

    def judgements(self, task: dict[str, Any], present: set[str]) -> list[Evaluation]:
        """The evaluations of this task by judges without a prediction among ``present``
        (model versions), each named by its ``evaluator``; or ``NoPrediction``."""


class StoredEvaluation:
    """The model evaluations stored in the task's meta, one per judge."""

    workers = 1

    def judgements(self, task: dict[str, Any], present: set[str]) -> list[Evaluation]:
        judges = stored_judges(task.get("meta"))
        if not judges:
            raise NoPrediction("the task carries no stored evaluation", level=logging.INFO)
        found, refused = [], []
        for name, raw in judges.items():
            if name not in present:
                try:
                    found.append(_valid(name, raw))
                except NoPrediction as exc:
                    refused.append(exc)
        if refused and not found:
            raise NoPrediction("; ".join(map(str, refused)), max(e.level for e in refused))
        for exc in refused:  # the other judges still predict
            logger.log(exc.level, "task %s: no prediction: %s", task.get("id"), exc)
        return found


def _valid(name: str, raw: Any) -> Evaluation:
    try:
        evaluation = Evaluation.model_validate(raw).model_copy(update={"evaluator": name})
    except ValidationError as exc:
        raise NoPrediction(f"the stored evaluation of {name} is invalid: "
                           f"{describe_error(exc)}") from exc
    if evaluation.gaps():
        raise NoPrediction(f"the stored evaluation of {name} lacks {', '.join(evaluation.gaps())}",
                           level=logging.INFO)
    return evaluation


class LiveJudgement:
    """A chat model's judgement of the episode (``sotopia_ls.judge``)."""

    def __init__(self, judge: LLMJudge, workers: int) -> None:
        self.judge = judge
        self.workers = workers

    def judgements(self, task: dict[str, Any], present: set[str]) -> list[Evaluation]:
        if self.judge.model in present:
            return []
        try:
            return [self.judge.judge(task.get("data") or {})]
        except (JudgeError, EndpointRefused) as exc:
            raise NoPrediction(str(exc)) from exc


class SotopiaJudge(LabelStudioMLBase):
    """The label-studio-ml model: one prediction per task from the configured provider."""

    PROVIDER = os.getenv("SOTOPIA_LS_PROVIDER", "stored")
    LLM_BASE_URL = os.getenv("SOTOPIA_LS_LLM_BASE_URL", "https://api.openai.com/v1")
    LLM_MODEL = os.getenv("SOTOPIA_LS_LLM_MODEL", "")
    LLM_API_KEY = os.getenv("SOTOPIA_LS_LLM_API_KEY", "")
    # Read as text here, made numbers in make_provider: a bad value is a SettingsError there,
    # not a traceback when the module is imported.
    LLM_TIMEOUT = os.getenv("SOTOPIA_LS_LLM_TIMEOUT", "60")
    LLM_WORKERS = os.getenv("SOTOPIA_LS_LLM_WORKERS", "4")

    def __init__(self, label_config: str | None = None, train_output: Any = None, **kwargs: Any):
        # First: the base class parses the config too, and fails on a bad one with lxml's error.
        self.to_names = to_names(label_config or "")
        super().__init__(label_config=label_config, train_output=train_output, **kwargs)
        self.provider = self.make_provider()

    @classmethod
    def make_provider(cls) -> Provider:
        """The configured provider; ``SettingsError`` when the settings do not make one."""
        if cls.PROVIDER == "stored":
            return StoredEvaluation()
        if cls.PROVIDER == "llm":
            if not cls.LLM_MODEL:
                raise SettingsError("the llm provider needs SOTOPIA_LS_LLM_MODEL (the model to ask)")
            try:
                workers, timeout = int(cls.LLM_WORKERS), float(cls.LLM_TIMEOUT)
            except ValueError:
                workers, timeout = 0, 0.0
            if workers < 1 or not 0 < timeout < float("inf"):
                raise SettingsError("SOTOPIA_LS_LLM_WORKERS must be a whole number and "
                                    "SOTOPIA_LS_LLM_TIMEOUT a number of seconds, both positive")
            # No retries here: Label Studio waits for the whole batch (ML_TIMEOUT_PREDICT), and
            # asking for predictions again asks only for what is missing.
            endpoint = ChatEndpoint(cls.LLM_BASE_URL, cls.LLM_MODEL, cls.LLM_API_KEY, timeout)
            return LiveJudgement(LLMJudge(endpoint), workers)
        raise SettingsError(
            f"SOTOPIA_LS_PROVIDER={cls.PROVIDER!r} is not a provider; use one of {', '.join(PROVIDERS)}"
        )

    def predict(self, tasks: list[dict[str, Any]], **kwargs: Any) -> list[list[dict[str, Any]]]:
        """One list per task, in task order: its predictions, or nothing."""
        if self.provider.workers == 1:
            return [self._predict_one(task) for task in tasks]
        with ThreadPoolExecutor(self.provider.workers) as pool:
            return list(pool.map(self._predict_one, tasks))

    def _predict_one(self, task: dict[str, Any]) -> list[dict[str, Any]]:
        task_id = task.get("id")
        try:
            present = {p.get("model_version") for p in task.get("predictions") or ()
                       if isinstance(p, dict)}
            return [prediction(evaluation, self.to_names)
                    for evaluation in self.provider.judgements(task, present)]
        except NoPrediction as exc:
            logger.log(exc.level, "task %s: no prediction: %s", task_id, exc)
        except Exception:
            # One task's surprise must not cost the other tasks their predictions.
            logger.exception("task %s: no prediction: unexpected error", task_id)
        return []
