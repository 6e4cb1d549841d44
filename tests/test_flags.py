"""A researcher looks at which annotations and participants raise quality flags."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pydantic
import pytest

import sotopia_ls
from sotopia_ls.dimensions import (
    AGENTS,
    DIMENSIONS,
    RUBRIC,
    RUBRIC_ENV,
    RationaleCases,
    load_rubric,
    rating_name,
    reasoning_name,
)
from sotopia_ls.errors import InvalidRubric
from sotopia_ls.samples import HUMAN_EVAL
from sotopia_ls.study.screening.flags import (
    FLAGS,
    Annotation,
    Earlier,
    Flag,
    FlagThresholds,
    Typing,
    contradiction,
    flag_annotation,
    measured_typing,
    participant_shares,
)

FIELDS = [(agent, d) for agent in AGENTS for d in DIMENSIONS]


VOICES = {
    "mine": "Agent {agent} on {label}: turn {i} shows what the rating rests on",
    "theirs": "My reading of {label} for person {agent} comes from message {i} and its reply",
    "judge's": "The model finds that in {label} agent {agent} earns this, see turn {i} there",
}


def careful(voice: str = "mine") -> dict[str, object]:
    """A careful participant's flat form: a distinct rationale and a varied score per field."""
    fields: dict[str, object] = {}
    for i, (agent, d) in enumerate(FIELDS):
        fields[rating_name(d.key, agent)] = d.values[i % len(d.values)]
        fields[reasoning_name(d.key, agent)] = VOICES[voice].format(agent=agent, label=d.label, i=i)
    return fields


def fired(annotation: Annotation, name: str, **thresholds: object) -> bool | None:
    results = {r.name: r for r in flag_annotation(annotation, FlagThresholds(**thresholds))}
    return results[name].fired if name in results else None


def annotation(**extra: object) -> Annotation:
    return Annotation(participant="p1", episode="e1", fields=extra.pop("fields", careful()),
                      **extra)


def rationales(fields: dict[str, object]) -> dict[str, str]:
    return {name: str(text) for name, text in fields.items() if "_reasoning_" in name}


def typed_throughout(fields: dict[str, object], **counts: Typing) -> dict[str, Typing]:
    """The page's counts for ``fields`` typed key by key, but the ``counts`` given."""
    return {reasoning_name(d.key, agent): Typing(
        pasted=0, typed=len(str(fields[reasoning_name(d.key, agent)]))) for agent, d in FIELDS
    } | counts


def test_a_careful_annotation_raises_no_flag() -> None:
    judged = flag_annotation(annotation(
        episode_words=500, seconds=600,
        typing=typed_throughout(careful()),
        earlier=(Earlier(participant="p2", fields=careful("theirs")),), reference=careful(),
        judged={"gpt-4": rationales(careful("judge's"))},
    ))
    assert {r.name for r in judged} == {flag.name for flag in FLAGS}
    assert not any(r.fired for r in judged), judged


def test_a_rationale_of_two_words_is_short() -> None:
    fields = careful()
    name = reasoning_name(DIMENSIONS[-1].key, 2)
    fields[name] = "Seems fine."
    result = {r.name: r for r in flag_annotation(annotation(fields=fields))}["short_rationale"]
    assert result.fired and f"{name} (2 words)" in result.detail
    assert not fired(annotation(fields=fields), "short_rationale", min_rationale_words=2)


def test_one_rationale_pasted_into_two_fields_is_repeated() -> None:
    fields = careful()
    first, second = reasoning_name(DIMENSIONS[0].key, 1), reasoning_name(DIMENSIONS[0].key, 2)
    fields[first] = "Both agents were polite and reached their goals."
    fields[second] = "both agents were polite, and reached their goals"
    assert fired(annotation(fields=fields), "repeated_rationale")
    assert not fired(annotation(fields=fields), "repeated_rationale", repeat_count=3)
    assert not fired(annotation(), "repeated_rationale")


def test_a_rationale_copied_from_an_earlier_participant_is_flagged_naming_them() -> None:
    other = careful("theirs")
    mine = careful()
    name = reasoning_name(DIMENSIONS[1].key, 2)
    mine[name] = str(other[reasoning_name(DIMENSIONS[0].key, 1)]) + " indeed"
    # Two gave that rationale before: the first of them is named.
    earlier = (Earlier(participant="p0", fields=other), Earlier(participant="p2", fields=other))
    result = {r.name: r for r in flag_annotation(annotation(fields=mine, earlier=earlier))}
    assert result["copied_rationale"].fired
    assert result["copied_rationale"].detail == (
        f"matches a rationale submitted earlier: {name} (participant p0)")
    assert not fired(annotation(fields=mine, earlier=earlier[1:]), "copied_rationale",
                     copy_similarity=1.0)
    # Short answers agree by chance: "Very polite." twice is no copy.
    mine[name] = other[reasoning_name(DIMENSIONS[0].key, 1)] = "Very polite."
    assert not fired(annotation(fields=mine, earlier=earlier[1:]), "copied_rationale")
    # Nobody rated the episode before: nothing to copy from, so not judged.
    assert fired(annotation(fields=mine), "copied_rationale") is None


def test_rating_faster_than_reading_the_episode_is_too_fast() -> None:
    # 1,000 words at 250 words a minute take 240 s to read.
    assert fired(annotation(episode_words=1000, seconds=200), "too_fast")
    assert not fired(annotation(episode_words=1000, seconds=250), "too_fast")
    assert not fired(annotation(episode_words=1000, seconds=200), "too_fast", reading_factor=0.5)
    assert fired(annotation(episode_words=1000), "too_fast") is None


def test_a_rationale_mostly_pasted_is_flagged_only_when_measured() -> None:
    name = reasoning_name(DIMENSIONS[0].key, 1)
    fields = careful()
    assert fired(annotation(typing=typed_throughout(fields, **{name: Typing(pasted=90, typed=10)})),
                 "pasted_rationale")
    assert not fired(annotation(typing=typed_throughout(
        fields, **{name: Typing(pasted=70, typed=30)})), "pasted_rationale")
    # Every other rationale without counts: one mostly pasted is still found.
    assert fired(annotation(typing={name: Typing(pasted=90, typed=10)}), "pasted_rationale")


@pytest.mark.parametrize(("typing", "seconds", "why"), [
    ({}, 600, "no typing counts came with the rating"),
    # Counts that cannot have brought the text in: 1 character of about 70.
    (typed_throughout(careful(), **{reasoning_name(DIMENSIONS[0].key, 1): Typing(
        pasted=0, typed=1)}), 600, f"counts short of the text of "
     f"{reasoning_name(DIMENSIONS[0].key, 1)}"),
    # 400 characters typed in every rationale, submitted within a second of the page shown.
    ({reasoning_name(d.key, agent): Typing(pasted=0, typed=400) for agent, d in FIELDS}, 0.02,
     f"the page claims {400 * len(FIELDS)} characters typed in 0 s on task"),
])
def test_counts_the_text_or_the_time_belie_are_not_measured_never_passed(
        typing: dict[str, Typing], seconds: float, why: str) -> None:
    claimed = annotation(typing=typing, seconds=seconds)

    assert fired(claimed, "pasted_rationale") is None
    assert measured_typing(claimed)[1] == why
    assert measured_typing(annotation(typing=typed_throughout(careful()), seconds=600)) == (
        typed_throughout(careful()), "")


@pytest.mark.parametrize("score", ["same", "max", "min"])
def test_straight_lining_is_one_score_or_every_extreme(score: str) -> None:
    shared = set.intersection(*(set(d.values) for d in DIMENSIONS))
    if score == "same" and not shared:
        pytest.skip("this rubric has no score every dimension allows")
    fields = careful()
    for agent, d in FIELDS:
        fields[rating_name(d.key, agent)] = {
            "same": min(shared, default=0), "max": d.range_high, "min": d.range_low,
        }[score]
    assert fired(annotation(fields=fields), "straight_lining")
    assert not fired(annotation(), "straight_lining")


def test_a_score_three_points_from_the_reference_is_flagged_with_its_distance() -> None:
    reference = careful()
    mine = dict(reference)
    d = next(d for d in DIMENSIONS if d.range_high - d.range_low >= 3)
    name = rating_name(d.key, 2)
    reference[name], mine[name] = d.range_low, d.range_low + 3
    result = {r.name: r for r in flag_annotation(annotation(fields=mine, reference=reference))}
    assert result["gold_distance"].fired
    assert "largest distance 3" in result["gold_distance"].detail
    mine[name] = d.range_low + 2
    assert not fired(annotation(fields=mine, reference=reference), "gold_distance")
    assert fired(annotation(fields=mine), "gold_distance") is None


def test_a_score_outside_its_range_is_refused() -> None:
    fields = careful()
    fields[rating_name(DIMENSIONS[0].key, 1)] = DIMENSIONS[0].range_high + 1
    with pytest.raises(pydantic.ValidationError, match=DIMENSIONS[0].key):
        annotation(fields=fields)


def test_a_new_flag_is_one_object_added_to_the_list() -> None:
    mine = Flag("no_episode_words", "the episode's length is unknown",
                lambda a, _: (a.episode_words is None, "no word count"))
    results = flag_annotation(annotation(), flags=FLAGS + (mine,))
    assert results[-1].name == "no_episode_words" and results[-1].fired


def test_each_participant_gets_the_share_of_their_judged_annotations_that_fired() -> None:
    fast = annotation(episode_words=1000, seconds=10)
    slow = annotation(episode_words=1000, seconds=900)
    unknown = annotation()
    shares = participant_shares([
        ("p1", flag_annotation(fast)), ("p1", flag_annotation(slow)),
        ("p1", flag_annotation(unknown)), ("p2", flag_annotation(slow)),
    ]).set_index(["participant", "flag"])
    assert shares.loc[("p1", "too_fast")].to_dict() == {"judged": 2, "fired": 1, "share": 0.5}
    assert shares.loc[("p2", "too_fast"), "share"] == 0.0
    assert shares.loc[("p1", "short_rationale"), "judged"] == 3


def test_typing_counts_for_a_field_that_is_no_rationale_are_refused() -> None:
    with pytest.raises(pydantic.ValidationError, match="'notes' is no rationale field"):
        annotation(typing={"notes": Typing(pasted=1, typed=1)})


def rated(key: str, score: int, rationale: str, agent: int = 1) -> Annotation:
    """A careful annotation but for one rating and its rationale."""
    return annotation(fields=careful() | {rating_name(key, agent): score,
                                          reasoning_name(key, agent): rationale})


def test_a_rationale_stating_no_secret_was_revealed_contradicts_a_score_far_from_zero() -> None:
    """The seed's rule: "In the case when no secret is revealed, rate 0"."""
    assert fired(rated("secret", -6, "Eli does not reveal his secret"),
                 "rationale_contradicts_score")
    assert not fired(rated("secret", 0, "Eli does not reveal his secret"),
                     "rationale_contradicts_score")
    said = {result.name: result.detail for result in flag_annotation(
        rated("knowledge", 10, "Oliver didn't gain any knowledge", agent=2))}
    assert said["rationale_contradicts_score"] == \
        "knowledge_2 10: the rationale states its zero case"
    # Near zero agrees: the rubric's worked example gives 2 beside "doesn't appear to gain".
    assert not fired(rated("knowledge", 2, "He did not learn anything"),
                     "rationale_contradicts_score")
    assert fired(rated("knowledge", 2, "He did not learn anything"),
                 "rationale_contradicts_score", zero_case_distance=1)


def test_a_rationale_stating_a_gain_contradicts_a_negative_score_unless_it_denies_it() -> None:
    flagged = "rationale_contradicts_score"
    assert fired(rated("relationship", -5, "Their friendship may have been strengthened a "
                       "little by their agreement."), flagged)
    assert not fired(rated("relationship", 3, "Their friendship was strengthened."), flagged)
    assert not fired(rated("relationship", -2, "The talk did not improve their friendship."),
                     flagged)
    assert fired(rated("financial_and_material_benefits", 4, "While the ambulance bill will "
                       "be a loss, William will get medical attention."), flagged)
    assert not fired(rated("financial_and_material_benefits", -1, "Technically no financial "
                           "benefit, though the chance to negotiate was taken away."), flagged)


def test_the_rubrics_good_examples_and_worked_example_support_their_scores() -> None:
    """What the participants are taught as right never raises the flag."""
    limits = FlagThresholds()
    taught = [(d, e.rationale, e.rating) for d in DIMENSIONS for e in d.examples
              if e.verdict == "good"]
    taught += [(RUBRIC[r.dimension], r.reasoning, r.score)
               for agent in RUBRIC.worked_example.agents for r in agent.ratings]
    assert [(d.key, score) for d, text, score in taught
            if contradiction(d, text, score, limits)] == []


def test_the_phrases_are_the_rubrics_data_and_a_broken_one_is_refused(tmp_path, monkeypatch):
    data = json.loads((Path(sotopia_ls.__file__).parent / "rubric.json").read_text())
    data["dimensions"][3]["rationale_cases"]["zero"].append("(unclosed")
    (tmp_path / "rubric.json").write_text(json.dumps(data))
    monkeypatch.setenv(RUBRIC_ENV, str(tmp_path / "rubric.json"))
    with pytest.raises(InvalidRubric, match=r"dimensions\.3\.rationale_cases\.zero\.\d+: "
                       "Input should be a valid regular expression$"):
        load_rubric()


def released_contradictions() -> tuple[int, list[str]]:
    """The flag's check over Sotopia-pi's released ratings in the samples: the ratings judged,
    and each one it fires on as a row of docs/consistency.md's table."""
    ratings = pd.concat([pd.read_csv(path) for path in sorted(HUMAN_EVAL.glob("*.csv"))])
    judged, rows, limits = 0, [], FlagThresholds()
    for row in ratings.to_dict("records"):
        for d in DIMENSIONS:
            if d.rationale_cases == RationaleCases():
                continue
            for agent in AGENTS:
                judged += 1
                score, text = int(row[rating_name(d.key, agent)]), \
                    str(row[reasoning_name(d.key, agent)])
                if why := contradiction(d, text, score, limits):
                    rows.append(f"| {row['prolific_id']} | {row['pk']} | "
                                f"{rating_name(d.key, agent)} | {score} | {why} | {text} |")
    return judged, rows


def test_the_figures_in_the_docs_are_the_flags_on_the_released_ratings() -> None:
    judged, rows = released_contradictions()
    written = (Path(__file__).parents[1] / "docs" / "consistency.md").read_text()
    assert f"fires on {len(rows)} of the {judged} ratings" in written
    assert [line for line in written.splitlines() if line.startswith("| annotator-")] == rows


def test_a_rationale_near_identical_to_the_judges_is_flagged_naming_the_judge() -> None:
    """A participant who pasted the model's reasoning, a few words changed, is found; one who
    wrote their own on the same episode is not."""
    judge = ("Eli reveals to Sophia that he has secretly been saving money for a new car, "
             "which is the private plan he wanted to keep")
    pasted = judge.replace("Eli reveals", "eli revealed").replace("new car", "new car!")
    key = reasoning_name("secret", 2)
    judged = {"gpt-4": {reasoning_name("secret", 1): judge}}
    said = {r.name: r for r in flag_annotation(annotation(
        fields=careful() | {key: pasted}, judged=judged))}["rationale_echoes_judge"]
    assert said.fired and said.detail == \
        f"matches a judge's reasoning on the episode: {key} (gpt-4)"
    assert not fired(annotation(fields=careful() | {key: "Eli let slip that he is saving up "
                                "for a car, the plan he meant to keep to himself"},
                                judged=judged), "rationale_echoes_judge")
    assert fired(annotation(), "rationale_echoes_judge") is None  # no judge stored
