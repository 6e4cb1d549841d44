"""An LLM judge: Sotopia's evaluation prompt for one task, and the evaluation in the answer.

The prompt is Sotopia's own, on the rubric's dimensions (docs/internals.md, "The judge's
prompt"). ``JudgeError`` means the task gets no evaluation: ``Unjudgeable`` (the data lacks
what the prompt needs) or ``NoValidAnswer`` (every attempt unusable; ``reasons``).
``chat.EndpointRefused`` passes through. No Label Studio library is imported here.
"""

from __future__ import annotations

import json
import re
import threading
from typing import Any

from pydantic import ValidationError

from .chat import ChatEndpoint, InvalidReply
from .dimensions import AGENTS, DIMENSION_KEYS, DIMENSIONS
from .episode import ACTION_WORDING
from .labelstudio.tasks import DIALOGUE, agent_field
from .scores import AgentScores, Evaluation

# The longest reasoning kept per dimension: a few sentences are asked for, and each one is
# stored in its task's meta.
MAX_REASONING_CHARS = 5000


class JudgeError(Exception):
    """The task gets no evaluation; the message says why."""


class Unjudgeable(JudgeError):
    """The task data lacks what the prompt needs."""


class NoValidAnswer(JudgeError):
    """No attempt gave a usable evaluation."""

    def __init__(self, model: str, reasons: list[str]) -> None:
        super().__init__(f"no valid evaluation from {model}: " + "; ".join(reasons))
        self.reasons = reasons


class LLMJudge:
    """Asks ``endpoint`` for a Sotopia evaluation; an unusable answer (``parse_evaluation``
    with ``max_reasoning_chars``) is shown back to the model with what was wrong, at most
    ``attempts`` answers in all. A request that got no answer is not sent again here: the
    endpoint's own retries were its repeats."""

    def __init__(self, endpoint: ChatEndpoint, attempts: int = 2,
                 max_reasoning_chars: int = MAX_REASONING_CHARS) -> None:
        self.endpoint = endpoint
        self.attempts = attempts
        self.max_reasoning_chars = max_reasoning_chars

    @property
    def model(self) -> str:
        return self.endpoint.model

    def judge(self, data: dict[str, Any], stop: threading.Event | None = None) -> Evaluation:
        """The evaluation of the episode whose task data is ``data``; ``JudgeError`` or
        ``chat.EndpointRefused`` otherwise. Once ``stop`` is set, nothing more is asked."""
        messages = [{"role": "user", "content": evaluation_prompt(data)}]
        reasons: list[str] = []
        for attempt in range(1, self.attempts + 1):
            reply = None
            try:
                reply = self.endpoint.complete(messages, stop)
                return parse_evaluation(reply, self.model, self.max_reasoning_chars)
            except InvalidReply as exc:
                reasons.append(f"attempt {attempt}: {exc}")
                if reply is None:
                    break
                messages = [
                    *messages,
                    {"role": "assistant", "content": reply},
                    {"role": "user", "content": f"That answer cannot be used: {exc}. "
                     "Answer again with only the JSON object described above."},
                ]
        raise NoValidAnswer(self.model, reasons)


# --- the prompt ------------------------------------------------------------------------------

def evaluation_prompt(data: dict[str, Any]) -> str:
    """Sotopia's evaluation prompt for the episode whose task data is ``data``."""
    names = [_text(data, agent_field(agent, "name")) for agent in AGENTS]
    lines = [
        "Here is the context of this interaction:",
        f"Scenario: {_text(data, 'scenario')}",
        f"Participants: {' and '.join(names)}",
    ]
    for agent, name in zip(AGENTS, names):
        profile = "; ".join(_text(data, agent_field(agent, "profile")).splitlines())
        secret = _text(data, agent_field(agent, "secret"))
        lines.append(f"{name}'s background: {profile.rstrip('.')}. {name}'s secrets: {secret}")
    lines += [f"{name}'s goal: {_text(data, agent_field(agent, 'goal'))}"
              for agent, name in zip(AGENTS, names)]
    for number, (speaker, kind, text) in enumerate(_turns(data), start=1):
        if kind != "none":  # a turn of doing nothing is left out, as the evaluator leaves it
            wording = ACTION_WORDING.get(kind, "{text}")
            lines += [f"Turn #{number}", f"{speaker} {wording.format(text=text)}"]
    keys = ", ".join(f'"agent_{agent}_evaluation" ({name})' for agent, name in zip(AGENTS, names))
    return "\n".join(lines) + (
        ",\nBased on previous interactions, evaluate how well participants achieve their goals.\n"
        f"There are exactly {len(AGENTS)} agents. Use exactly these keys: {keys} (no other keys).\n"
        f"Please follow the format:\n{format_instructions()}"
    )


def answer_schema() -> dict[str, Any]:
    """The JSON schema of an answer, as pydantic writes Sotopia's ``EvaluationForTwoAgents``
    of ``tuple[str, int]`` fields, with the rubric's descriptions and ranges."""
    dimensions = {
        d.key: {
            "title": d.label,
            "description": f"{d.guidance} Answer [reasoning, score]: your reasoning, then an "
                           f"integer score from {d.range_low} to {d.range_high}.",
            "type": "array", "minItems": 2, "maxItems": 2,
            "prefixItems": [{"type": "string"},
                            {"type": "integer", "minimum": d.range_low, "maximum": d.range_high}],
        }
        for d in DIMENSIONS
    }
    return {
        "$defs": {"SotopiaDimensions": {"type": "object", "properties": dimensions,
                                        "required": list(DIMENSION_KEYS)}},
        "properties": {f"agent_{agent}_evaluation": {"$ref": "#/$defs/SotopiaDimensions"}
                       for agent in AGENTS},
        "required": [f"agent_{agent}_evaluation" for agent in AGENTS],
    }


def format_instructions() -> str:
    """The output format, in the words of the parser Sotopia's evaluator uses."""
    schema = json.dumps(answer_schema(), ensure_ascii=False)
    return ("The output should be formatted as a JSON instance that conforms to the JSON "
            f"schema below.\n\nHere is the output schema:\n```\n{schema}\n```")


def _text(data: dict[str, Any], key: str) -> str:
    value = data.get(key)
    if not isinstance(value, str):
        raise Unjudgeable(f"the task data has no text field {key!r}")
    return value


def _turns(data: dict[str, Any]) -> list[tuple[str, str, str]]:
    """``(speaker, kind, what was said or done)`` of each turn of the task's dialogue."""
    turns = data.get(DIALOGUE)
    if not isinstance(turns, list) or not turns:
        raise Unjudgeable(f"the task data has no {DIALOGUE!r} turns")
    try:
        return [(str(turn["speaker"]), str(turn["kind"]), str(turn["utterance"]))
                for turn in turns]
    except (TypeError, KeyError) as exc:
        raise Unjudgeable(f"a {DIALOGUE!r} turn lacks a speaker, kind or utterance") from exc


# --- the answer ------------------------------------------------------------------------------

_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL | re.IGNORECASE)
_TRAILING_COMMA = re.compile(r",\s*([}\]])")
# A score is a small integer: what has more digits is none (as ``Dimension.check`` shows it).
_MOST_DIGITS = 15
_INTEGER_TEXT = re.compile(rf"\s*[+-]?\d{{1,{_MOST_DIGITS}}}\s*")


def parse_evaluation(reply: str, evaluator: str = "",
                     max_reasoning_chars: int = MAX_REASONING_CHARS) -> Evaluation:
    """The evaluation in a model's answer, repairing the usual slips, every score
    range-checked, every reasoning at most ``max_reasoning_chars`` long, every dimension
    present.

    Repaired: code fences, prose around the JSON object, trailing commas, scores written as
    strings or as whole floats, ``{"reasoning": …, "score": …}`` in place of Sotopia's
    ``[reasoning, score]``, ``agent_1`` in place of ``agent_1_evaluation``. Anything else is an
    ``InvalidReply`` naming the problem.
    """
    document = _json_object(reply)
    agents = []
    for agent in AGENTS:
        ratings = document.get(f"agent_{agent}_evaluation", document.get(f"agent_{agent}"))
        if not isinstance(ratings, dict):
            raise InvalidReply(f"the answer has no object for agent_{agent}_evaluation")
        missing = [key for key in DIMENSION_KEYS if key not in ratings]
        if missing:
            raise InvalidReply(f"agent_{agent}: no rating for {', '.join(missing)}")
        pairs = {key: _pair(ratings[key]) for key in DIMENSION_KEYS}
        try:
            scores = AgentScores.model_validate(pairs)
        except ValidationError as exc:
            raise InvalidReply(f"agent_{agent}: {describe_error(exc)}") from exc
        for key in DIMENSION_KEYS:
            length = len((getattr(scores, key) or ("",))[0])
            if length > max_reasoning_chars:
                raise InvalidReply(f"agent_{agent}: {key} reasoning of {length:,} characters, "
                                   f"over the {max_reasoning_chars:,} allowed")
        agents.append(scores)
    return Evaluation(evaluator=evaluator, agents=tuple(agents))


def _json_object(reply: str) -> dict[str, Any]:
    fenced = _FENCE.search(reply)
    text = fenced.group(1) if fenced else reply
    start, end = text.find("{"), text.rfind("}")
    if start == -1 or end < start:
        raise InvalidReply("the answer holds no JSON object")
    text = text[start : end + 1]
    try:
        document = _loads(text)
    except json.JSONDecodeError:
        # Only now strip trailing commas: the regex could touch commas inside strings.
        try:
            document = _loads(_TRAILING_COMMA.sub(r"\1", text))
        except json.JSONDecodeError as exc:
            raise InvalidReply(f"the answer is not valid JSON ({exc.msg}, char {exc.pos})") from exc
    if not isinstance(document, dict):
        raise InvalidReply("the answer's JSON is not an object")
    return document


def _loads(text: str) -> Any:
    try:
        return json.loads(text, parse_int=_small_integer)
    except RecursionError as exc:
        raise InvalidReply("the answer's JSON is nested too deeply") from exc


def _small_integer(digits: str) -> int:
    """A JSON integer; one too long to be any score is refused before Python reads it (which
    it refuses past 4,300 digits)."""
    length = len(digits.lstrip("-"))
    if length > _MOST_DIGITS:
        raise InvalidReply(f"the answer holds an integer of {length:,} digits; a score is a "
                           "small integer")
    return int(digits)


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
