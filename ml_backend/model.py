"""``SotopiaJudge``: one prediction per task, holding a rating and a rationale for every
dimension of the rubric and both agents.

Providers, chosen with ``SOTOPIA_LS_PROVIDER``:

- ``stored`` (default): the Sotopia evaluation the importer kept in the task's meta
  (``sotopia_evaluation``); ``model_version`` is its evaluator. A task without one gets none.
- ``llm``: an OpenAI-compatible chat-completions endpoint judges the episode from a
  Sotopia-style prompt built from the task and the rubric; ``model_version`` is the model.

A prediction's ``score`` is the mean of both agents' Sotopia overall scores, so the Data
Manager can sort tasks by the judge's verdict. A task that already holds a prediction of the
same model version gets no second one, so asking again adds nothing. A task that cannot be
judged gets no prediction and a logged reason; it never fails the batch.

Control names and their ``to_name`` are read from the labeling config Label Studio sends; a
config that breaks the rating contract (``sotopia_ls.config.check_labeling_config``) is
refused. This module runs in the backend's own environment (label-studio-ml 1.0.9), so from
``sotopia_ls`` it imports only the core that needs no label-studio-sdk.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol

import requests
from label_studio_ml.model import LabelStudioMLBase
from pydantic import ValidationError

from sotopia_ls.config import check_labeling_config, controls
from sotopia_ls.dimensions import AGENTS, DIMENSION_KEYS, DIMENSIONS
from sotopia_ls.labelstudio.results import evaluation_results
from sotopia_ls.labelstudio.tasks import DIALOGUE, EVALUATION, agent_field
from sotopia_ls.scores import AgentScores, Evaluation, overall

from . import PROVIDERS

logger = logging.getLogger(__name__)


class SettingsError(Exception):
    """An environment setting of the backend is missing or wrong."""


class NoPrediction(Exception):
    """The task gets no prediction; the message says why, ``level`` how loudly to log it."""

    def __init__(self, reason: str, level: int = logging.WARNING) -> None:
        super().__init__(reason)
        self.level = level


class InvalidReply(Exception):
    """One LLM attempt gave nothing usable; the message says what was wrong."""


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


def prediction(evaluation: Evaluation, model_version: str, names: dict[str, str]) -> dict[str, Any]:
    """One Label Studio prediction: every result, the judge's name and its overall verdict
    (the mean of both agents' overall scores, which the Data Manager sorts by)."""
    per_agent = [
        overall([evaluation.pair(agent, key)[1] for key in DIMENSION_KEYS]) for agent in AGENTS
    ]
    return {
        "result": evaluation_results(evaluation, names),
        "score": sum(per_agent) / len(per_agent),
        "model_version": model_version,
    }


class Provider(Protocol):
    workers: int

    def version(self, task: dict[str, Any]) -> str:
        """The ``model_version`` this task's prediction would carry."""

    def judge(self, task: dict[str, Any]) -> Evaluation:
        """The judgement of this task, or ``NoPrediction``."""


def _stored(task: dict[str, Any]) -> Any:
    meta = task.get("meta")
    return meta.get(EVALUATION) if isinstance(meta, dict) else None


class StoredEvaluation:
    """The Sotopia evaluation the importer stored in the task's meta."""

    workers = 1
    # Some sources do not name their evaluator; their predictions still need a version.
    UNNAMED = "sotopia-evaluation"

    def version(self, task: dict[str, Any]) -> str:
        # Read without validating: ``judge`` validates, and validating twice doubles the cost.
        raw = _stored(task)
        evaluator = raw.get("evaluator") if isinstance(raw, dict) else None
        return evaluator if isinstance(evaluator, str) and evaluator else self.UNNAMED

    def judge(self, task: dict[str, Any]) -> Evaluation:
        raw = _stored(task)
        if raw is None:
            raise NoPrediction("the task carries no stored evaluation", level=logging.INFO)
        try:
            evaluation = Evaluation.model_validate(raw)
        except ValidationError as exc:
            raise NoPrediction(f"the stored evaluation is invalid: {describe_error(exc)}") from exc
        if evaluation.gaps():
            raise NoPrediction(f"the stored evaluation lacks {', '.join(evaluation.gaps())}",
                               level=logging.INFO)
        return evaluation


@dataclass(frozen=True)
class ChatEndpoint:
    """An OpenAI-compatible ``/chat/completions`` endpoint."""

    base_url: str
    model: str
    api_key: str = field(repr=False)
    timeout: float

    def complete(self, messages: list[dict[str, str]]) -> str:
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        try:
            response = requests.post(
                f"{self.base_url.rstrip('/')}/chat/completions",
                json={"model": self.model, "messages": messages, "temperature": 0},
                headers=headers,
                timeout=self.timeout,
            )
            response.raise_for_status()
            content = response.json()["choices"][0]["message"]["content"]
        except requests.Timeout as exc:
            raise InvalidReply(f"no answer within {self.timeout:g} s") from exc
        except requests.RequestException as exc:
            raise InvalidReply(f"the request failed: {exc}") from exc
        except (ValueError, LookupError, TypeError) as exc:
            raise InvalidReply("the endpoint did not answer with a chat completion") from exc
        if not isinstance(content, str):
            raise InvalidReply("the chat completion holds no text")
        return content


SYSTEM_PROMPT = (
    "You evaluate social interactions between two agents in the SOTOPIA framework. You read "
    "the scenario, each agent's background, secret and social goal, and the conversation, "
    f"then rate each agent on {len(DIMENSIONS)} dimensions. You answer with JSON only."
)


class LLMJudge:
    """Asks a chat model for a Sotopia evaluation; one retry when the answer is unusable."""

    ATTEMPTS = 2

    def __init__(self, endpoint: ChatEndpoint, workers: int) -> None:
        self.endpoint = endpoint
        self.workers = workers

    def version(self, task: dict[str, Any]) -> str:
        return self.endpoint.model

    def judge(self, task: dict[str, Any]) -> Evaluation:
        messages = [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": evaluation_prompt(task.get("data") or {})},
        ]
        reasons: list[str] = []
        for attempt in range(1, self.ATTEMPTS + 1):
            reply = None
            try:
                reply = self.endpoint.complete(messages)
                return parse_evaluation(reply, self.endpoint.model)
            except InvalidReply as exc:
                reasons.append(f"attempt {attempt}: {exc}")
                if reply is not None:
                    # Show the model its answer and what was wrong with it.
                    messages = [
                        *messages,
                        {"role": "assistant", "content": reply},
                        {"role": "user", "content": f"That answer cannot be used: {exc}. "
                         "Answer again with only the JSON object described above."},
                    ]
        raise NoPrediction(f"no valid evaluation from {self.endpoint.model}: " + "; ".join(reasons))


def evaluation_prompt(data: dict[str, Any]) -> str:
    """The evaluator's prompt: the episode as the annotator sees it, then the rubric."""
    lines = [f"Scenario: {_text(data, 'scenario')}", ""]
    for agent in AGENTS:
        lines += [
            f"agent_{agent} is {_text(data, agent_field(agent, 'name'))}.",
            f"Background:\n{_text(data, agent_field(agent, 'profile'))}",
            f"Secret: {_text(data, agent_field(agent, 'secret'))}",
            f"Social goal: {_text(data, agent_field(agent, 'goal'))}",
            "",
        ]
    lines.append("Conversation:")
    lines += [f"{speaker}: {text}" for speaker, text in _turns(data)]
    lines += [
        "",
        "Rate agent_1 and agent_2 on each dimension below with an integer inside its range, "
        "and give your reasoning first. Judge each agent from its own goal and secret.",
        "",
    ]
    lines += [
        f"- {d.key} ({d.label}, an integer from {d.range_low} to {d.range_high}): {d.guidance}"
        for d in DIMENSIONS
    ]
    shape = {
        f"agent_{agent}": {key: {"reasoning": "…", "score": 0} for key in DIMENSION_KEYS}
        for agent in AGENTS
    }
    lines += [
        "",
        "Answer with one JSON object and nothing else, shaped like this:",
        json.dumps(shape, indent=2, ensure_ascii=False),
    ]
    return "\n".join(lines)


def _text(data: dict[str, Any], key: str) -> str:
    value = data.get(key)
    if not isinstance(value, str):
        raise NoPrediction(f"the task data has no text field {key!r}")
    return value


def _turns(data: dict[str, Any]) -> list[tuple[str, str]]:
    turns = data.get(DIALOGUE)
    if not isinstance(turns, list) or not turns:
        raise NoPrediction(f"the task data has no {DIALOGUE!r} turns")
    try:
        return [(str(turn["speaker"]), str(turn["text"])) for turn in turns]
    except (TypeError, KeyError) as exc:
        raise NoPrediction(f"a {DIALOGUE!r} turn lacks a speaker or text") from exc


_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL | re.IGNORECASE)
_TRAILING_COMMA = re.compile(r",\s*([}\]])")
_INTEGER_TEXT = re.compile(r"\s*[+-]?\d+\s*")


def parse_evaluation(reply: str, evaluator: str = "") -> Evaluation:
    """The evaluation in a model's answer, repairing the usual slips, every score
    range-checked, every dimension present.

    Repaired: code fences, prose around the JSON object, trailing commas, scores written as
    strings or as whole floats, and Sotopia's ``[reasoning, score]`` pairs in place of
    ``{"reasoning": …, "score": …}``. Anything else is an ``InvalidReply`` naming the problem.
    """
    document = _json_object(reply)
    agents = []
    for agent in AGENTS:
        ratings = document.get(f"agent_{agent}")
        if not isinstance(ratings, dict):
            raise InvalidReply(f"the answer has no object for agent_{agent}")
        missing = [key for key in DIMENSION_KEYS if key not in ratings]
        if missing:
            raise InvalidReply(f"agent_{agent}: no rating for {', '.join(missing)}")
        pairs = {key: _pair(ratings[key]) for key in DIMENSION_KEYS}
        try:
            agents.append(AgentScores.model_validate(pairs))
        except ValidationError as exc:
            raise InvalidReply(f"agent_{agent}: {describe_error(exc)}") from exc
    return Evaluation(evaluator=evaluator, agents=tuple(agents))


def _json_object(reply: str) -> dict[str, Any]:
    fenced = _FENCE.search(reply)
    text = fenced.group(1) if fenced else reply
    start, end = text.find("{"), text.rfind("}")
    if start == -1 or end < start:
        raise InvalidReply("the answer holds no JSON object")
    text = text[start : end + 1]
    try:
        document = json.loads(text)
    except json.JSONDecodeError:
        # Only now strip trailing commas: the regex could touch commas inside strings.
        try:
            document = json.loads(_TRAILING_COMMA.sub(r"\1", text))
        except json.JSONDecodeError as exc:
            raise InvalidReply(f"the answer is not valid JSON ({exc.msg}, char {exc.pos})") from exc
    if not isinstance(document, dict):
        raise InvalidReply("the answer's JSON is not an object")
    return document


def _pair(value: Any) -> Any:
    if isinstance(value, dict):
        value = (value.get("reasoning", ""), value.get("score"))
    if isinstance(value, (list, tuple)) and len(value) == 2:
        return (value[0], _integer(value[1]))
    return value  # left as it is, for validation to refuse with the dimension's name


def _integer(score: Any) -> Any:
    if isinstance(score, str) and _INTEGER_TEXT.fullmatch(score):
        return int(score)
    if isinstance(score, float) and score.is_integer():
        return int(score)
    return score


def describe_error(error: ValidationError, limit: int = 5) -> str:
    """``believability score 12 is outside 0 to 10; goal reasoning: Input should be a valid
    string; …``

    The first ``limit`` problems, then how many more: a request of many bad tasks gets a
    short answer.
    """
    problems = error.errors()
    parts = []
    for problem in problems[:limit]:
        if problem["type"] == "value_error":  # the rubric's range check: says it all
            parts.append(str(problem["ctx"]["error"]))
            continue
        loc = problem["loc"]
        if len(loc) == 2 and loc[0] in DIMENSION_KEYS and loc[1] in (0, 1):
            loc = (loc[0], ("reasoning", "score")[loc[1]])  # the two halves of a Sotopia pair
        shown = problem.get("input")
        value = f" {shown!r}" if isinstance(shown, (int, float, str)) and len(repr(shown)) < 40 else ""
        parts.append(f"{' '.join(map(str, loc))}{value}: {problem['msg']}")
    more = f" (and {len(problems) - limit} more)" if len(problems) > limit else ""
    return "; ".join(parts) + more


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
            endpoint = ChatEndpoint(cls.LLM_BASE_URL, cls.LLM_MODEL, cls.LLM_API_KEY, timeout)
            return LLMJudge(endpoint, workers)
        raise SettingsError(
            f"SOTOPIA_LS_PROVIDER={cls.PROVIDER!r} is not a provider; use one of {', '.join(PROVIDERS)}"
        )

    def predict(self, tasks: list[dict[str, Any]], **kwargs: Any) -> list[list[dict[str, Any]]]:
        """One list per task, in task order: its prediction, or nothing."""
        if self.provider.workers == 1:
            return [self._predict_one(task) for task in tasks]
        with ThreadPoolExecutor(self.provider.workers) as pool:
            return list(pool.map(self._predict_one, tasks))

    def _predict_one(self, task: dict[str, Any]) -> list[dict[str, Any]]:
        task_id = task.get("id")
        try:
            version = self.provider.version(task)
            if any(p.get("model_version") == version for p in task.get("predictions") or ()):
                logger.debug("task %s: already holds a prediction of %s", task_id, version)
                return []
            return [prediction(self.provider.judge(task), version, self.to_names)]
        except NoPrediction as exc:
            logger.log(exc.level, "task %s: no prediction: %s", task_id, exc)
        except Exception:
            # One task's surprise must not cost the other tasks their predictions.
            logger.exception("task %s: no prediction: unexpected error", task_id)
        return []
