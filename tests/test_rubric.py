"""The rubric is the single source: ranges, guidance and the score model all come from it."""

from __future__ import annotations

import subprocess
import sys

import pydantic
import pytest

from sotopia_ls.dimensions import DIMENSION_KEYS, RUBRIC
from sotopia_ls.scores import AgentScores, Evaluation, overall

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
    assert overall([9, 3, 2, 0, 0, -1, 9]) == pytest.approx(22 / 7)


def test_score_model_accepts_the_worked_example():
    for agent in RUBRIC.worked_example.agents:
        AgentScores(**{r.dimension: (r.reasoning, r.score) for r in agent.ratings})


@pytest.mark.parametrize(
    ("key", "score"),
    [("secret", 1), ("relationship", -6), ("goal", 11), ("knowledge", 2.5), ("goal", "7"),
     ("goal", True)],
)
def test_score_model_rejects_a_bad_score_naming_the_dimension(key, score):
    values = {k: ("why", 0) for k in DIMENSION_KEYS}
    values[key] = ("why", score)
    with pytest.raises(pydantic.ValidationError) as error:
        AgentScores(**values)
    assert key in str(error.value)


def test_a_missing_dimension_is_a_gap_and_an_unknown_one_is_ignored():
    full = {key: ("why", 0) for key in DIMENSION_KEYS}
    lacking = {key: pair for key, pair in full.items() if key != "knowledge"}
    evaluation = Evaluation(agents=(lacking, {**full, "charm": ("why", 1)}))
    assert evaluation.gaps() == ["agent 1 knowledge"]
    assert "charm" not in evaluation.agents[1].model_dump()


def test_a_bad_rubric_file_is_one_line_naming_it(tmp_path):
    bad = tmp_path / "rubric.json"
    bad.write_text('{"dimensions": [], "worked_example": {"agents": []}, "x": 1', encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "sotopia_ls", "--help"], capture_output=True,
                          text=True, env={"SOTOPIA_LS_RUBRIC": str(bad), "PATH": ""})
    assert done.returncode == 1
    assert done.stderr.startswith(f"Error: rubric {bad}: ") and "Traceback" not in done.stderr


def test_a_rubric_with_an_example_outside_its_range_is_refused():
    data = RUBRIC.model_dump()
    data["dimensions"][3]["examples"][0]["rating"] = 5
    with pytest.raises(pydantic.ValidationError, match="secret"):
        type(RUBRIC).model_validate(data)


def test_every_bad_example_of_the_seed_says_which_way_and_how_far_its_rating_was_off():
    for dimension in RUBRIC.dimensions:
        for example in dimension.examples:
            assert (example.error is None) == (example.verdict == "good"), example.rationale


def test_a_believability_of_one_against_nine_is_the_single_repetition_example():
    believability = RUBRIC["believability"]

    assert believability.example_for(1, 9).rationale == "Liam repeats what Ethan said once."
    assert believability.example_for(6, 9).rationale.startswith("It doesn't sound believable")
    # No bad example of the seed rated believability too high; a score on the reference is no error.
    assert believability.example_for(10, 7) is None and believability.example_for(9, 9) is None
    assert RUBRIC["financial_and_material_benefits"].example_for(5, 1).rationale.startswith(
        "Ethan gain a material benefit")


def test_a_rubric_whose_good_example_shows_an_error_is_refused():
    data = RUBRIC.model_dump()
    data["dimensions"][0]["examples"][0]["error"] = {"direction": "too_low", "points": 2}
    with pytest.raises(pydantic.ValidationError, match="a good example shows no error"):
        type(RUBRIC).model_validate(data)
