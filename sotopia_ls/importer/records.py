"""What every format parser shares: refusing a record with a reason, and building the episode.

A parser raises ``RecordError`` for anything that stops one record from becoming an
``Episode``; the loader turns it into one ``sotopia_ls.errors.Problem`` and moves on.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, TypeVar

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError

from ..episode import Agent, Episode, Evaluation, Source, Turn

ID_FIELDS = ("pk", "episode_id")

# ``parse(record, file, label)``: the file and the record's place in it go into ``Episode.source``.
Parser = Callable[[Mapping[str, Any], str, str], Episode]

Model = TypeVar("Model", bound=BaseModel)


class EpisodeLogHeader(BaseModel):
    """The fields Sotopia's ``EpisodeLog`` opens with, which the oTree episode files keep too;
    the released dumps name them ``episode_id``, ``environment_id``, ``experiment_tag`` and
    ``experiment_model_name_pairs``."""

    model_config = ConfigDict(extra="ignore")

    pk: str = Field(min_length=1, validation_alias=AliasChoices("pk", "episode_id"))
    environment: str = Field("", validation_alias=AliasChoices("environment", "environment_id"))
    tag: str | None = Field("", validation_alias=AliasChoices("tag", "experiment_tag"))
    models: list[str] | None = Field(
        None, validation_alias=AliasChoices("models", "experiment_model_name_pairs")
    )

    def source(self, format: str, file: str, label: str) -> Source:
        models = tuple(self.models or ())
        return Source(
            format=format,
            file=file,
            record=label,
            tag=self.tag or "",
            models=models,
            # Sotopia's ``models`` is ``[evaluator, agent 1, agent 2]``.
            agent_models=models[1:] if len(models) == 3 else (),
            environment=self.environment,
        )


class RecordError(ValueError):
    """One record cannot become an episode; ``field`` names the offending input field."""

    def __init__(self, reason: str, field: str = "") -> None:
        self.reason = reason
        self.field = field
        super().__init__(f"{field}: {reason}" if field else reason)


def unreadable_json(error: RecursionError | ValueError) -> str:
    """Why the standard library refuses JSON that is well formed: nested thousands of levels
    deep, or a number of thousands of digits."""
    if isinstance(error, RecursionError):
        return "nested too deeply to read"
    return str(error).split(":")[0]


def readable(error: ValidationError) -> RecordError:
    """A pydantic error as ``field: message`` text, every failing field in one reason."""
    details = error.errors(include_url=False)
    fields = [".".join(str(part) for part in detail["loc"]) for detail in details]
    messages = [detail["msg"].removeprefix("Value error, ") for detail in details]
    if len(details) == 1:
        return RecordError(messages[0], fields[0])
    reason = "; ".join(
        f"{field}: {message}" if field else message for field, message in zip(fields, messages)
    )
    return RecordError(reason, ", ".join(dict.fromkeys(field for field in fields if field)))


@contextmanager
def in_field(name: str) -> Iterator[None]:
    """Blame ``name`` for any ``RecordError`` raised inside that does not name a field."""
    try:
        yield
    except RecordError as error:
        if error.field:
            raise
        raise RecordError(error.reason, name) from error


def validate(model: type[Model], record: Mapping[str, Any]) -> Model:
    try:
        return model.model_validate(record)
    except ValidationError as error:
        raise readable(error) from error


def record_id(record: object) -> str:
    """The episode id of a raw record when it has a usable one, else ``""``."""
    if isinstance(record, Mapping):
        for key in ID_FIELDS:
            value = record.get(key)
            if isinstance(value, str) and value:
                return value
    return ""


def written(text: str) -> str:
    """``text`` as a person wrote it: Sotopia's oTree files (and the episodes they were made
    from) hold Python's escaped quote (``Here\\'s``) where the text had ``'``; any other
    backslash is the text's own."""
    return text.replace("\\'", "'")


def _as_written(agent: Agent) -> Agent:
    return agent.model_copy(update={name: written(value) for name, value in agent
                                    if isinstance(value, str)})


def build_episode(
    *,
    id: str,
    scenario: str,
    agents: list[Agent],
    turns: list[Turn],
    source: Source,
    evaluation: Evaluation | None = None,
) -> Episode:
    """The validated episode, its texts ``written``, or a ``RecordError`` saying why the
    record is not one."""
    if not turns:
        raise RecordError("empty dialogue: no agent said or did anything")
    try:
        return Episode(
            id=id,
            scenario=written(scenario),
            agents=tuple(map(_as_written, agents)),
            turns=tuple(turn.model_copy(update={"text": written(turn.text)}) for turn in turns),
            source=source,
            evaluation=evaluation,
        )
    except ValidationError as error:
        raise readable(error) from error
