"""A researcher looks at which annotations and participants raise quality flags."""

from __future__ import annotations

import pydantic
import pytest

from sotopia_ls.dimensions import AGENTS, DIMENSIONS, rating_name, reasoning_name
from sotopia_ls.study.screening.flags import (
    FLAGS,
    Annotation,
    Earlier,
    Flag,
    FlagThresholds,
    Typing,
    flag_annotation,
    measured_typing,
    participant_shares,
)

FIELDS = [(agent, d) for agent in AGENTS for d in DIMENSIONS]


VOICES = {
    "mine": "Agent {agent} on {label}: turn {i} shows what the rating rests on",
    "theirs": "My reading of {label} for person {agent} comes from message {i} and its reply",
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
