"""The score model ↔ Label Studio results: what counts as a valid rating or rationale inside
one result list, and an evaluation written as results reads back as itself."""

from __future__ import annotations

import pytest

from sotopia_ls.dimensions import AGENTS, DIMENSIONS, RUBRIC
from sotopia_ls.labelstudio.results import (
    evaluation_of,
    evaluation_results,
    rating_result,
    read_json_results,
    reasoning_result,
)
from sotopia_ls.scores import SCORE_FIELDS, Evaluation

LOWEST = Evaluation(agents=tuple(
    {d.key: (f"why {d.key}", d.range_low) for d in DIMENSIONS} for _ in AGENTS
))
CONTROLS = len(SCORE_FIELDS)


def replaced(control: str, value: dict) -> list[dict]:
    return [r | {"value": value} if r["from_name"] == control else r
            for r in evaluation_results(LOWEST)]


def test_a_complete_result_gives_every_field_with_its_lowest_score():
    fields, problems = read_json_results(evaluation_results(LOWEST))
    assert problems == [] and len(fields) == CONTROLS == 4 * len(DIMENSIONS)
    assert fields["secret_2"] == RUBRIC["secret"].range_low == -10
    assert fields["believability_reasoning_1"] == "why believability"


def test_an_evaluation_written_as_results_reads_back_as_itself():
    assert evaluation_of(evaluation_results(LOWEST), "gpt-4") == LOWEST.model_copy(
        update={"evaluator": "gpt-4"})


def test_an_evaluation_with_a_gap_writes_no_result_for_it():
    gap = Evaluation.from_flat({k: v for k, v in LOWEST.flat().items() if "knowledge" not in k})
    assert gap.gaps() == ["agent 1 knowledge", "agent 2 knowledge"]
    names = {r["from_name"] for r in evaluation_results(gap)}
    assert "knowledge_1" not in names and len(names) == CONTROLS - 4


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ({"choices": ["-11"]}, "secret score -11 is outside -10 to 0"),
        ({"choices": ["1"]}, "secret score 1 is outside -10 to 0"),
        ({"number": 5 * 10**5000}, "secret score of more than 15 digits is outside -10 to 0"),
        ({"choices": ["9" * 5001]}, "not an integer: '" + "9" * 56 + "..."),
        ({"number": float("inf")}, "not an integer: inf"),
        ({"choices": ["-2.5"]}, "not an integer: '-2.5'"),
        ({"choices": ["minus two"]}, "not an integer: 'minus two'"),
        ({"choices": ["-2", "-3"]}, "expected exactly one choice, got ['-2', '-3']"),
        ({"choices": []}, "expected exactly one choice, got []"),
        ({"choices": "8"}, "expected exactly one choice, got '8'"),
        ({"number": True}, "not an integer: True"),
        ({"labels": ["x"]}, "no rating value (expected choices, number or rating)"),
        ("8", "no rating value (expected choices, number or rating)"),
    ],
)
def test_a_bad_rating_is_refused_with_its_field_and_reason(value, reason):
    fields, problems = read_json_results(replaced("secret_2", value))
    assert problems == [("secret_2", reason)]
    assert "secret_2" not in fields


def test_numbers_and_padded_strings_that_are_whole_are_accepted():
    for value in ({"number": -4}, {"number": -4.0}, {"choices": [" -4 "]}, {"choices": ["-4"]}):
        fields, problems = read_json_results(replaced("secret_2", value))
        assert problems == [] and fields["secret_2"] == -4


def test_rationale_items_are_joined_with_newlines_and_blank_ones_refused():
    fields, _ = read_json_results(replaced("goal_reasoning_2", {"text": ["first", "second"]}))
    assert fields["goal_reasoning_2"] == "first\nsecond"
    _, problems = read_json_results(replaced("goal_reasoning_2", {"text": [" ", "\n"]}))
    assert problems == [("goal_reasoning_2", "empty rationale")]


def test_missing_and_repeated_controls_are_named_and_other_controls_ignored():
    results = [r for r in evaluation_results(LOWEST) if r["from_name"] != "knowledge_1"]
    results += [reasoning_result("goal", 1, "again"), rating_result("comfort", 1, 3)]
    _, problems = read_json_results(results)
    assert problems == [("knowledge_1", "missing rating"), ("goal_reasoning_1", "2 rationales")]


def test_an_empty_result_lists_every_control():
    _, problems = read_json_results([])
    assert len(problems) == CONTROLS and problems[0] == ("believability_1", "missing rating")
