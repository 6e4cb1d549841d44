"""The rubric is the single source: ranges, guidance and the score model all come from it."""

from __future__ import annotations

import pydantic
import pytest

from sotopia_ls.dimensions import DIMENSION_KEYS, RUBRIC, agent_evaluation_model, overall

SOTOPIA_RANGES = {
    "believability": (0, 10),
    "relationship": (-5, 5),
    "knowledge": (0, 10),
    "secret": (-10, 0),
    "social_rules": (-10, 0),
    "financial_and_material_benefits": (-5, 5),
    "goal": (0, 10),
}


def test_the_seven_sotopia_dimensions_in_order_with_their_ranges():
    assert DIMENSION_KEYS == tuple(SOTOPIA_RANGES)
    assert {d.key: (d.range_low, d.range_high) for d in RUBRIC.dimensions} == SOTOPIA_RANGES


def test_overall_is_the_plain_mean():
    scores = dict(zip(DIMENSION_KEYS, [9, 3, 2, 0, 0, -1, 9]))
    assert overall(scores) == pytest.approx(22 / 7)


def test_score_model_accepts_the_worked_example():
    model = agent_evaluation_model()
    for agent in RUBRIC.worked_example.agents:
        model(**{r.dimension: (r.reasoning, r.score) for r in agent.ratings})


@pytest.mark.parametrize(
    ("key", "score"), [("secret", 1), ("relationship", -6), ("goal", 11), ("knowledge", 2.5)]
)
def test_score_model_rejects_a_bad_score_naming_the_dimension(key, score):
    values = {k: ("why", 0) for k in DIMENSION_KEYS}
    values[key] = ("why", score)
    with pytest.raises(pydantic.ValidationError) as error:
        agent_evaluation_model()(**values)
    assert key in str(error.value)


def test_a_rubric_with_an_example_outside_its_range_is_refused():
    data = RUBRIC.model_dump()
    data["dimensions"][3]["examples"][0]["rating"] = 5
    with pytest.raises(pydantic.ValidationError, match="secret"):
        type(RUBRIC).model_validate(data)


def test_a_stored_evaluation_with_an_unknown_dimension_is_a_validation_error():
    from sotopia_ls.episode import Evaluation

    full = {key: {"score": 0} for key in DIMENSION_KEYS}
    with pytest.raises(pydantic.ValidationError, match="unknown dimensions charm"):
        Evaluation(agents=({**full, "charm": {"score": 1}}, full))
