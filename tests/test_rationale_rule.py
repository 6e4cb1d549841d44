"""One rule for what a rationale may hold: the study gateway, the exporter and the importer's
stored evaluations agree on which texts are blank and on which characters are removed, so a
participant told "saved" gave a text Label Studio's database stores and the export keeps."""

from __future__ import annotations

import json

import orjson
import pytest

from sotopia_ls.dimensions import AGENTS, DIMENSIONS
from sotopia_ls.evaluate import judged_meta
from sotopia_ls.importer.evaluation import stored_evaluation
from sotopia_ls.judge import parse_evaluation
from sotopia_ls.labelstudio.tasks import JUDGES
from sotopia_ls.labelstudio.results import (
    evaluation_results,
    read_json_results,
    read_results,
    results_of,
)
from sotopia_ls.scores import Evaluation
from sotopia_ls.text import cleaned, is_blank, usable

BLANK = {
    "nothing": "",
    "spaces, tabs and newlines": " \t\n\r ",
    "NUL": "\x00",
    "NULs and spaces": "\x00 \x00\n",
    "zero-width space U+200B": "\u200b",
    "byte order mark U+FEFF": "\ufeff",
    "word joiner U+2060": "\u2060\u2060",
    "right-to-left and left-to-right marks": "\u200f\u200e",
    "no-break and ideographic spaces": "\u00a0\u3000",
    "line and paragraph separators": "\u2028\u2029",
    "a combining accent with no letter": "\u0301\u0301",
    "soft hyphen": "\u00ad",
    "Hangul filler": "\u3164",
    "other C0 and C1 controls": "\x07\x1b\x85",
    "a lone surrogate": "\ud800",
}

KEPT = {
    "a plain sentence": ("Agent 1 stayed in character.", "Agent 1 stayed in character."),
    "an emoji": ("👍", "👍"),
    "a family emoji joined by zero-width joiners": ("👨\u200d👩\u200d👧", "👨\u200d👩\u200d👧"),
    "a letter with a combining accent": ("e\u0301", "e\u0301"),
    "Arabic with a right-to-left mark": ("\u200fجيد", "\u200fجيد"),
    "a leading zero-width space": ("\u200bfine", "\u200bfine"),
    "NUL inside a word, removed": ("goo\x00d", "good"),
    "an escape sequence, removed": ("\x1b[31mred", "[31mred"),
    "a lone surrogate, removed": ("ok\udc00", "ok"),
    "tabs, newlines and carriage returns, kept": ("a\tb\r\nc", "a\tb\r\nc"),
    "a 100 kB text": ("x" * 100_000, "x" * 100_000),
}


@pytest.mark.parametrize("text", BLANK.values(), ids=BLANK.keys())
def test_a_text_of_only_whitespace_controls_and_invisible_characters_is_blank(text):
    assert is_blank(cleaned(text))
    assert usable(text) is None


@pytest.mark.parametrize(("text", "kept"), KEPT.values(), ids=KEPT.keys())
def test_a_text_with_anything_visible_is_kept_without_what_a_database_refuses(text, kept):
    assert not is_blank(text)
    assert usable(text) == kept
    assert "\x00" not in usable(text)


def with_rationale(text: str) -> list[dict]:
    """A complete rating whose first rationale is ``text``."""
    evaluation = Evaluation(agents=tuple(
        {d.key: (f"why {d.key}", d.range_low) for d in DIMENSIONS} for _ in AGENTS))
    return [r | {"value": {"text": [text]}} if r["from_name"] == "believability_reasoning_1"
            else r for r in evaluation_results(evaluation)]


@pytest.mark.parametrize("text", BLANK.values(), ids=BLANK.keys())
def test_the_exporter_refuses_a_blank_rationale_by_the_same_rule(text):
    fields, problems = read_json_results(with_rationale(text))

    assert problems == [("believability_reasoning_1", "empty rationale")]
    assert "believability_reasoning_1" not in fields


@pytest.mark.parametrize(("text", "kept"), KEPT.values(), ids=KEPT.keys())
def test_the_exporter_keeps_a_rationale_as_the_rule_keeps_it(text, kept):
    fields, problems = read_json_results(with_rationale(text))

    assert problems == []
    assert fields["believability_reasoning_1"] == kept


def test_the_exporters_fast_path_and_general_path_read_a_rationale_alike():
    # Two results of a control outside the rubric send an annotation down the general path.
    foreign = [{"from_name": "comment", "value": {"text": ["a"]}}] * 2
    for text in [*BLANK.values(), *(text for text, _ in KEPT.values())]:
        usual = read_results(results_of(with_rationale(text)))
        general = read_results(results_of([*with_rationale(text), *foreign]))
        assert usual == general


def reasoning(believability: str) -> str:
    return ("Environment comments: fine\nAgent 1 comments:\n"
            f"believability: {believability}\nrelationship: warm\n"
            "Agent 2 comments:\nbelievability: plausible\n")


REWARDS = [{"believability": 8.0, "relationship": 2.0}, {"believability": 7.0}]


@pytest.mark.parametrize("text", [t for t in BLANK.values() if "\n" not in t and "\u2028" not in t],
                         ids=[k for k, t in BLANK.items() if "\n" not in t and "\u2028" not in t])
def test_a_stored_evaluations_blank_reasoning_is_held_as_no_reasoning(text):
    evaluation = stored_evaluation(REWARDS, reasoning(text), "gpt-4")
    missing = stored_evaluation(REWARDS, reasoning("").replace("believability: \n", ""), "gpt-4")

    assert evaluation.pair(1, "believability") == ("", 8) == missing.pair(1, "believability")
    assert evaluation.pair(1, "relationship") == ("warm", 2)


def test_a_stored_evaluations_reasoning_loses_what_a_database_refuses():
    evaluation = stored_evaluation(REWARDS, reasoning("credi\x00ble\ud800"), "gpt-4")

    assert evaluation.pair(1, "believability") == ("credible", 8)


def test_a_rationale_whose_text_is_an_object_of_one_key_is_no_rationale():
    results = [r | {"value": {"text": {"why": "b"}}} if r["from_name"] == "goal_reasoning_2"
               else r for r in with_rationale("fine")]

    fields, problems = read_json_results(results)

    assert problems == [("goal_reasoning_2", "no rationale text (expected text)")]


def test_a_judges_reasoning_is_stored_without_what_a_database_refuses():
    """A model's answer may carry NUL or a lone surrogate (JSON escapes them); what
    ``sotopia-ls evaluate`` keeps in the task's meta holds neither, so a Label Studio on
    PostgreSQL stores it, and a reasoning with nothing visible is no reasoning."""
    answer = {f"agent_{agent}_evaluation": {d.key: ["fine", d.range_low] for d in DIMENSIONS}
              for agent in AGENTS}
    answer["agent_1_evaluation"]["believability"][0] = "credi\x00ble\ud800"
    answer["agent_2_evaluation"]["goal"][0] = "\x00\u200b"

    meta = judged_meta({}, parse_evaluation(json.dumps(answer), "judge"))

    stored = meta[JUDGES]["judge"]["agents"]
    assert stored[0]["believability"] == ["credible", DIMENSIONS[0].range_low]
    assert stored[1]["goal"][0] == ""
    orjson.dumps(meta)  # refuses a lone surrogate, as PostgreSQL does
