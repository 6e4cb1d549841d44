"""The study's draft on Prolific (``study publish``), made from the study file: its link, every
code with its type and action, the filter on a qualification's participant group, places,
minutes and reward. Recorded in the study file, and found again by its internal name when the
answer was lost, so a rerun creates nothing twice (README.md, "Publishing on Prolific").
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction
from functools import partial
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, select

from ...errors import StudyError
from ..settings import OnProlific, StudyFile, write_study
from ..slots.leases import planned_slots
from ..store import prolific_groups
from .hourly import PROLIFIC_MINIMUM, HourlyPay, money
from .prolific import Prolific

# Prolific's filter admitting only the members of participant groups.
GROUP_FILTER = "participant_group_allowlist"
# How the dry run counts places given with --places.
GIVEN = "as given (--places)"
# The action by which Prolific pays a screen-out code a fixed reward itself, and the least it
# takes (Prolific's custom screening, July 2025: README.md, "Publishing on Prolific").
PAID_SCREEN_OUT = "FIXED_SCREEN_OUT_PAYMENT"
SCREEN_OUT_MINIMUM = {"GBP": 10, "USD": 14}
DESCRIPTION = ("Read short conversations between two characters and rate how each one behaved, "
               "with a sentence saying why, in a page of the study's own.")


def internal_name(study: StudyFile) -> str:
    """The draft's internal name on Prolific: how a rerun finds a study made before."""
    return f"sotopia-ls {study.name}"


@dataclass(frozen=True)
class Publication:
    """What ``publish_study`` sent (or would send), and the Prolific study it stands for."""

    study: str
    body: dict[str, Any]
    study_id: str | None  # None: a dry run
    made: bool  # False: found, recorded or in the project, so nothing was created
    warnings: list[str] = field(default_factory=list)
    counted: str = GIVEN  # how the places were counted

    def lines(self) -> list[str]:
        body = self.body
        out = [f"study {self.study}: a draft on Prolific named {body['internal_name']!r} in "
               f"project {body['project']}",
               f"  link:    {body['external_study_url']}",
               f"  places:  {body['total_available_places']}, "
               f"{body['estimated_completion_time']} min each, reward "
               f"{body['reward']} (hundredths of your account's currency)",
               f"           places {self.counted}"]
        out += [f"  code:    {code['code']} {code['code_type']} "
                + ", ".join(_action(action) for action in code["actions"])
                for code in body["completion_codes"]]
        out += [f"  filter:  {f['filter_id']} {', '.join(f['selected_values'])}"
                for f in body["filters"]]
        out += [f"⚠ {warning}" for warning in self.warnings]
        if self.study_id is None:
            out.append("dry run: nothing was sent to Prolific (add --send to create the draft)")
        elif self.made:
            out.append(f"created the draft study {self.study_id}; publish it on Prolific once "
                       "checked (recorded in the study file)")
        else:
            out.append(f"already on Prolific as study {self.study_id}: nothing created")
        return out


def _action(action: dict[str, Any]) -> str:
    if action["action"] == PAID_SCREEN_OUT:
        return (f"{PAID_SCREEN_OUT} {action['fixed_screen_out_reward']} to each, up to "
                f"{action['slots']} screen-outs")
    group = action.get("participant_group")
    return action["action"] + (f" {group}" if group else "")


def _group_of(engine: Engine, qualification: str) -> str | None:
    with engine.connect() as conn:
        return conn.execute(select(prolific_groups.c.group_id).where(
            prolific_groups.c.qualification == qualification)).scalar_one_or_none()


def _codes(engine: Engine, study: StudyFile, places: int) -> list[dict[str, Any]]:
    """Every code the study file defines: a qualification round's passers join its
    participant group by their code, once ``study pay`` made the group; a screen-out code
    with its reward is paid by Prolific, up to ``places`` screen-outs."""
    review: list[dict[str, Any]] = [{"action": "MANUALLY_REVIEW"}]
    group = _group_of(engine, study.name) if study.qualification else None
    joins = [{"action": "ADD_TO_PARTICIPANT_GROUP", "participant_group": group}] if group else []
    codes = {study.completion_code: {"code": study.completion_code, "code_type": "COMPLETED",
                                     "actions": review + joins}}
    for part in (study.qualification, study.practice):
        if part is not None and part.screen_out_reward:
            codes[part.screen_out_code] = {
                "code": part.screen_out_code, "code_type": "FIXED_SCREENOUT",
                "actions": [{"action": PAID_SCREEN_OUT, "slots": places,
                             "fixed_screen_out_reward": part.screen_out_reward}],
                "actor": "participant"}
        elif part is not None:
            codes.setdefault(part.screen_out_code, {
                "code": part.screen_out_code, "code_type": "FIXED_SCREENOUT", "actions": review})
    if study.no_slots_code is not None:
        codes[study.no_slots_code] = {"code": study.no_slots_code, "code_type": "OTHER",
                                      "actions": review}
    return list(codes.values())


def _filters(engine: Engine, study: StudyFile) -> list[dict[str, Any]]:
    """A main study's filter on its qualification round's participant group."""
    if study.requires_qualification is None:
        return []
    group = _group_of(engine, study.requires_qualification)
    if group is None:
        raise StudyError(f"study {study.name} admits the passers of "
                         f"{study.requires_qualification} only, and that round has no "
                         "participant group on Prolific yet: make it with `sotopia-ls study "
                         f"pay --send` on the round's study file first")
    return [{"filter_id": GROUP_FILTER, "selected_values": [group]}]


def places_needed(engine: Engine, study: StudyFile) -> tuple[int, str]:
    """The places the study's episodes need, and how they were counted: each episode's
    planned slots (k, three where a third rater was planned) over the ordinary episodes a
    session rates (m less its gold share), rounded up (README.md, "Publishing on Prolific")."""
    if study.qualification is not None:
        raise StudyError("a qualification round serves the same gold episodes to everyone: "
                         "give the number of places with --places N")
    planned = planned_slots(engine, study.name, study.raters_per_episode)
    if not planned.episodes:
        raise StudyError(f"study {study.name} has no episodes in the gateway's database yet: "
                         "run `sotopia-ls study sync` first, or give --places N")
    m, share = study.episodes_per_participant, Fraction(str(study.gold_share))
    thirds = f" + {planned.thirds} third rater(s)" if planned.thirds else ""
    gold = f" (m {m} less {float(share):.0%} gold)" if share else ""
    per = m * (1 - share)
    return math.ceil(planned.slots / per), (
        f"{planned.slots} slots ({planned.episodes} episodes × k {study.raters_per_episode}"
        f"{thirds}) ÷ {float(per):g} episodes a session{gold}, rounded up")


def estimated_minutes(minutes: int | None, pilot: HourlyPay | None) -> int:
    """``minutes``, else the pilot's median minutes per completed visit, rounded up."""
    if minutes is not None:
        return minutes
    if pilot is None:
        raise StudyError("give the estimated minutes with --minutes N, or a pilot that has "
                         "completed visits with --pilot STUDY_FILE (its reward set)")
    return max(1, math.ceil(pilot.median_minutes))


def draft_body(engine: Engine, study: StudyFile, *, study_url: str, project_id: str,
               minutes: int, places: int,
               description: str = DESCRIPTION) -> dict[str, Any]:
    """The body of Prolific's ``POST studies/`` for ``study``."""
    if study.reward is None:
        raise StudyError(f"study {study.name} has no reward: write it with `sotopia-ls study "
                         "init --reward AMOUNT --currency GBP|USD`")
    return {
        "name": study.title, "internal_name": internal_name(study), "description": description,
        "external_study_url": study_url, "prolific_id_option": "url_parameters",
        "completion_codes": _codes(engine, study, places), "filters": _filters(engine, study),
        "total_available_places": places,
        "estimated_completion_time": minutes, "reward": study.reward.cents,
        "project": project_id, "device_compatibility": ["desktop"],
    }


def _under_minimum(study: StudyFile, minutes: int) -> list[str]:
    reward = study.reward
    if reward is None:
        return []
    least = SCREEN_OUT_MINIMUM[reward.currency]
    warnings = [f"a screen-out reward of {money(part.screen_out_reward, reward.currency)} is "
                f"under Prolific's minimum of {money(least, reward.currency)}"
                for part in (study.qualification, study.practice)
                if part is not None and part.screen_out_reward
                and part.screen_out_reward < least]
    if reward.cents * 60 / minutes >= PROLIFIC_MINIMUM[reward.currency]:
        return warnings
    least = math.ceil(PROLIFIC_MINIMUM[reward.currency] * minutes / 60)
    return [f"{money(reward.cents, reward.currency)} for {minutes} min is under Prolific's "
            f"minimum of {money(PROLIFIC_MINIMUM[reward.currency], reward.currency)} an hour: "
            f"raise the reward to at least {money(least, reward.currency)}", *warnings]


def publish_study(engine: Engine, study: StudyFile, study_path: Path, *, study_url: str,
                  project_id: str, prolific: Prolific | None, send: bool = False,
                  minutes: int | None = None, pilot: HourlyPay | None = None,
                  places: int | None = None) -> Publication:
    """The study's draft on Prolific: what would be sent (a dry run), or, with ``send``, the
    draft made through ``prolific`` and its id written into the study file at ``study_path``
    (minutes: ``minutes``, else a ``pilot``'s measured ones). A study recorded there, or one
    of the same internal name in the project (a run that died after Prolific made it), is
    taken and nothing is created."""
    estimated = estimated_minutes(minutes, pilot)
    counted = GIVEN
    if places is None:
        places, counted = places_needed(engine, study)
    body = draft_body(engine, study, study_url=study_url, project_id=project_id,
                      minutes=estimated, places=places)
    shown = partial(Publication, study.name, body, warnings=_under_minimum(study, estimated),
                    counted=counted)
    if study.prolific is not None:
        return shown(study.prolific.study_id, False)
    if not send:
        return shown(None, False)
    if prolific is None:
        raise StudyError("creating the study on Prolific needs its API token: set "
                         "PROLIFIC_TOKEN")
    found = next((made for made in prolific.project_studies(project_id)
                  if made.internal_name == body["internal_name"]), None)
    draft = found or prolific.create_study(body)
    write_study(study.model_copy(update={"prolific": OnProlific(
        study_id=draft.id, project_id=project_id)}), study_path, overwrite=True)
    return shown(draft.id, found is None)
