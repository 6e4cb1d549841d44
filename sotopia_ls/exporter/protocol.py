"""The protocol record: what a paper's methods section needs, as ``protocol.json`` and a short
``protocol.md`` in prose to start from; what the export knows, merged with the study side's
records (``sotopia_ls.study.protocol``). Counts and settings only: no annotator, participant,
task or annotation id.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..labelstudio.tasks import REJECT
from ..text import counted
from .collection import Collection

PROTOCOL_FILES: tuple[str, ...] = ("protocol.json", "protocol.md")
# A study record's ``kind`` when the study is a qualification round (else ``main study``).
QUALIFICATION_ROUND = "qualification round"
# How the prose words each decision a study record counts (a qualification round's screen-outs
# among them).
_DECIDED = {"approve": "approved", "look": "to look at", REJECT: "rejected",
            "screened_out": "screened out"}


def median_minutes(seconds: Sequence[float]) -> float | None:
    """The median of ``seconds``, in minutes; None for none."""
    return round(float(np.median(seconds)) / 60, 2) if len(seconds) else None


def _raters(collection: Collection) -> dict[str, Any]:
    """Episodes rated by the crowd (ground truth is the reference, not a rater), the raters
    each had, how many ratings came from slots adaptive extra raters added, and the median
    minutes an annotation took."""
    import pyarrow.compute as pc

    table = collection.table()
    crowd = table.filter(pc.invert(table.column("ground_truth")))
    gold = crowd.filter(crowd.column("gold"))
    ordinary = crowd.filter(pc.invert(crowd.column("gold")))
    per_episode = ordinary.group_by("episode_id").aggregate([([], "count_all")]).column(
        "count_all").to_numpy()
    raters = ({"min": int(per_episode.min()), "median": float(np.median(per_episode)),
               "max": int(per_episode.max())} if len(per_episode) else None)
    times = pc.drop_null(crowd.column("lead_time")).to_numpy()
    return {"episodes": len(per_episode), "raters_per_episode": raters,
            "gold": {"episodes": len(pc.unique(gold.column("episode_id"))),
                     "annotations": gold.num_rows},
            "added_slot_annotations": pc.sum(crowd.column("added_slot")).as_py() or 0,
            "median_minutes_per_episode": median_minutes(times)}


def export_protocol(collection: Collection, exclude_rejected: bool,
                    studies: Sequence[Mapping[str, Any]] = ()) -> dict[str, Any]:
    """The record of an export (with ``studies``, the study side's records)."""
    tally = collection.tally
    return {
        "annotations": {"total": tally.total, "exported": tally.exported,
                        "refused": tally.rejected, "duplicates_refused": tally.duplicates,
                        "cancelled": tally.cancelled, "ground_truth": tally.ground_truth},
        **_raters(collection),
        "review_decisions": collection.review(),
        "exclusions": {"rejected_by_review_excluded": exclude_rejected,
                       "excluded": tally.excluded},
        "studies": [dict(study) for study in studies],
    }


def _minutes(value: float) -> str:
    return f"{value:g} minute" + ("" if value == 1 else "s")


def _percent(share: float | None) -> str:
    return "–" if share is None else f"{share:.0%}"


def _ratings_prose(record: Mapping[str, Any]) -> list[str]:
    counts, raters, gold = record["annotations"], record["raters_per_episode"], record["gold"]
    golden = f" and {counted(gold['episodes'], 'gold episode')}" if gold["episodes"] else ""
    lines = [f"{counted(counts['exported'], 'annotation')} of "
             f"{counted(record['episodes'], 'episode')}{golden} were exported."]
    if raters:
        spread = (f"{raters['min']} annotators" if raters["min"] == raters["max"]
                  else f"{raters['min']} to {raters['max']} annotators (median "
                       f"{raters['median']:g})")
        lines.append(f"Each episode was rated by {spread}.")
    if gold["episodes"]:
        lines.append(f"The {counted(gold['annotations'], 'annotation')} of gold episodes "
                     "(hidden checks with reference ratings, each rated by any number of "
                     "participants) are counted apart: left out of the episodes, the raters "
                     "per episode and agreement.")
    if record["added_slot_annotations"]:
        lines.append(f"{counted(record['added_slot_annotations'], 'annotation')} came from "
                     "slots added while the study ran for episodes whose raters disagreed "
                     "(the added_slot column).")
    if record["median_minutes_per_episode"] is not None:
        lines.append("The median time on an episode was "
                     f"{_minutes(record['median_minutes_per_episode'])} (Label Studio's lead time).")
    if counts["ground_truth"]:
        lines.append(f"{counted(counts['ground_truth'], 'ground-truth annotation')} served as "
                     "reference ratings, not as raters.")
    repeats = (f" ({counts['duplicates_refused']} of them an annotator's repeated rating of "
               "an episode)" if counts["duplicates_refused"] else "")
    lines.append(f"Validation refused {counted(counts['refused'], 'annotation')}{repeats}; "
                 f"{counts['cancelled']} were cancelled or skipped.")
    return lines


def _review_prose(record: Mapping[str, Any]) -> list[str]:
    decisions, exclusions = record["review_decisions"], record["exclusions"]
    if not any(decisions.values()):
        return ["No annotation carries a review decision."]
    lines = [f"The researchers' review approved {counted(decisions['approve'], 'annotation')}, "
             f"marked {decisions['look']} to look at and rejected {decisions[REJECT]}."]
    if exclusions["rejected_by_review_excluded"]:
        lines.append(f"Rejected annotations were excluded from every table and figure "
                     f"({exclusions['excluded']}).")
    else:
        lines.append("Rejected annotations were kept, marked in the review_decision column.")
    return lines


def _adaptive_prose(adaptive: Mapping[str, Any]) -> str:
    until = (f", until every dimension's alpha interval was narrower than "
             f"{adaptive['target_width']:g}" if adaptive["target_width"] else "")
    return (f"An episode whose ratings differed by more than {adaptive['threshold']} points on a "
            f"dimension got one more rater while the study ran, up to "
            f"{adaptive['max_raters']} raters per episode{until}: "
            f"{counted(adaptive['slots_added'], 'slot')} added, "
            f"{adaptive['added_slots_rated']} of them rated.")


def _bonus_prose(bonuses: Mapping[str, Any]) -> str:
    currency = f" {bonuses['currency']}" if bonuses["currency"] else ""
    given = (f"{counted(bonuses['submissions'], 'session')} got a bonus, "
             f"{bonuses['total']:.2f}{currency} in all")
    if bonuses["paid_submissions"] == bonuses["submissions"]:
        return f"{given}, paid through Prolific."
    return (f"{given}; {bonuses['paid_submissions']} of them ({bonuses['paid_total']:.2f}"
            f"{currency}) paid through Prolific, the others recorded or set up there and not "
            "paid yet.")


def _study_prose(study: Mapping[str, Any]) -> list[str]:
    sessions, qualification = study["sessions"], study["qualification"]
    lines = [f"{counted(study['participants'], 'participant')} took part in "
             f"{counted(sessions['total'], 'session')} ({sessions['completed']} completed)."]
    if study["kind"] == QUALIFICATION_ROUND:
        lines.append(f"Each participant rated up to {study['episodes_per_participant']} gold "
                     "episodes, episodes with reference ratings.")
    else:
        lines.append(f"Each episode was to be rated by {study['raters_per_episode']} "
                     f"participants, each participant rating up to "
                     f"{study['episodes_per_participant']} episodes per session.")
    if qualification and "rule" in qualification:
        lines.append(f"A participant passed when {qualification['rule']}: "
                     f"{qualification['passed']} of {qualification['scored']} scored "
                     f"participants passed ({_percent(qualification['pass_rate'])}).")
    elif qualification:
        lines.append(f"Only participants who passed the qualification round "
                     f"{qualification['round']} were admitted ({qualification['passed']} of "
                     f"{qualification['scored']} scored participants passed it, "
                     f"{_percent(qualification['pass_rate'])}).")
    if study.get("training"):  # a record written before practice steps holds none
        training = study["training"]
        lines.append(f"A practice episode with feedback came first, "
                     f"{counted(training['attempts_allowed'], 'attempt')} allowed, passed when "
                     f"every rating was within ±{training['max_distance']} of the reference: "
                     f"{training['passed']} of {training['passed'] + training['failed']} "
                     f"participants passed ({_percent(training['pass_rate'])}), in "
                     f"{counted(training['attempts'], 'attempt')}.")
    if study["gold_share"] and study["kind"] != QUALIFICATION_ROUND:
        lines.append(f"{_percent(study['gold_share'])} of a participant's episodes were gold "
                     f"episodes with reference ratings, served like any other: "
                     f"{study['gold_ratings']} of {study['ratings']} ratings.")
    if study["adaptive"]:
        lines.append(_adaptive_prose(study["adaptive"]))
    if study["median_minutes_per_episode"] is not None:
        lines.append(f"The median time on an episode was "
                     f"{_minutes(study['median_minutes_per_episode'])}.")
    thresholds = ", ".join(f"{name} {value:g}" for name, value in study["flag_thresholds"].items())
    lines.append(f"Quality flags were raised with these thresholds: {thresholds}.")
    decided = study["decisions"]
    if any(decided.values()):
        lines.append("The review decided on sessions: " + ", ".join(
            f"{count} {_DECIDED[kind]}" for kind, count in decided.items()) + ".")
    if (study.get("bonuses") or {}).get("submissions"):  # older records hold none
        lines.append(_bonus_prose(study["bonuses"]))
    return lines


def protocol_markdown(record: Mapping[str, Any]) -> str:
    """``record`` in prose a methods section can start from."""
    parts = ["# Study protocol", "## Ratings", " ".join(_ratings_prose(record)),
             "## Review", " ".join(_review_prose(record))]
    for study in record["studies"]:
        parts += [f"## Study {study['study']} ({study['kind']})", " ".join(_study_prose(study))]
    return "\n\n".join(parts) + "\n"


def write_protocol(folder: Path, record: Mapping[str, Any]) -> None:
    """``protocol.json`` and ``protocol.md`` in ``folder``."""
    (folder / "protocol.json").write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    (folder / "protocol.md").write_text(protocol_markdown(record), encoding="utf-8")
