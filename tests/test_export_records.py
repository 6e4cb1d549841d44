"""What counts as a valid rating or rationale inside one Label Studio result list."""

from __future__ import annotations

import pytest

from sotopia_ls.dimensions import AGENTS, DIMENSIONS, RUBRIC
from sotopia_ls.exporter import read_scores
from sotopia_ls.results import rating_result, reasoning_result, results_from_scores

GOOD = {a: {d.key: (f"why {d.key}", d.range_low) for d in DIMENSIONS} for a in AGENTS}


def replaced(control: str, value: dict) -> list[dict]:
    return [r | {"value": value} if r["from_name"] == control else r
            for r in results_from_scores(GOOD)]


def test_a_complete_result_gives_all_28_fields_with_their_lowest_scores():
    fields, problems = read_scores(results_from_scores(GOOD))
    assert problems == [] and len(fields) == 28
    assert fields["secret_2"] == RUBRIC["secret"].range_low == -10
    assert fields["believability_reasoning_1"] == "why believability"


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ({"choices": ["-11"]}, "-11 is outside secret's range -10 to 0"),
        ({"choices": ["1"]}, "1 is outside secret's range -10 to 0"),
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
    fields, problems = read_scores(replaced("secret_2", value))
    assert problems == [("secret_2", reason)]
    assert "secret_2" not in fields


def test_numbers_and_padded_strings_that_are_whole_are_accepted():
    for value in ({"number": -4}, {"number": -4.0}, {"choices": [" -4 "]}, {"choices": ["-4"]}):
        fields, problems = read_scores(replaced("secret_2", value))
        assert problems == [] and fields["secret_2"] == -4


def test_rationale_items_are_joined_with_newlines_and_blank_ones_refused():
    fields, _ = read_scores(replaced("goal_reasoning_2", {"text": ["first", "second"]}))
    assert fields["goal_reasoning_2"] == "first\nsecond"
    _, problems = read_scores(replaced("goal_reasoning_2", {"text": [" ", "\n"]}))
    assert problems == [("goal_reasoning_2", "empty rationale")]


def test_missing_and_repeated_controls_are_named_and_other_controls_ignored():
    results = [r for r in results_from_scores(GOOD) if r["from_name"] != "knowledge_1"]
    results += [reasoning_result("goal", 1, "again"), rating_result("comfort", 1, 3)]
    _, problems = read_scores(results)
    assert problems == [("knowledge_1", "missing rating"), ("goal_reasoning_1", "2 rationales")]


def test_an_empty_result_lists_all_28_controls():
    _, problems = read_scores([])
    assert len(problems) == 28 and problems[0] == ("believability_1", "missing rating")
