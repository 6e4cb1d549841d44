"""The rating page counts, per rationale, the characters pasted and the characters typed; the
gateway keeps the counts with the rating, and the `pasted_rationale` flag reads them.

The gateway runs as `sotopia-ls study serve` in front of the session's real Label Studio. Two
participants use headless Chromium: one pastes a rationale from the clipboard with Control+V
and types the others, one types every rationale. Further participants post over plain HTTP,
as a tampered page (malformed counts) or a page made before the counts (none) would.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, expect
from sqlalchemy import Engine, select

from browser import CHROMIUM, VIEWPORT, rating_column, submit
from conftest import results_of
from study_support import (
    Participant,
    answers,
    gateway_env,
    make_study,
    prolific_id,
    study_project,
)
from test_study import fill, open_rating
from sotopia_ls.dimensions import AGENTS, DIMENSION_KEYS, reasoning_name
from sotopia_ls.labelstudio.client import Client
from sotopia_ls.labelstudio.server import LocalServer
from sotopia_ls.study.process import gateway
from sotopia_ls.study.screening.flags import Annotation, flag_annotation
from sotopia_ls.study.screening.typing_counts import MOST_CHARACTERS, recorded_typing
from sotopia_ls.study.store import assignments, open_store

pytestmark = [
    pytest.mark.browser,
    pytest.mark.server,
    pytest.mark.skipif(not CHROMIUM.exists(), reason=f"Chromium is not installed at {CHROMIUM}"),
]

PASTED = ("believability", 1)  # the rationale the first participant pastes
# The rationale they add to key by key (correcting a slip), then hand to the editor with
# Shift+Enter, then reopen with its pencil and add to from the clipboard: the nameless box the
# editor edits a taken text in still counts for its field.
KEYED = ("goal", 2)
PASTE = "They kept to their character and their goal in every turn, as the scenario asked."
ADDED = " Clearly."
ADDED_LATER = " As said."


@dataclass
class Rated:
    """The study, and what each participant in Chromium wrote and had recorded."""

    url: str
    engine: Engine
    written: dict[str, dict[int, dict[str, tuple[str, int]]]]  # by assignment key
    paster: str  # the assignment key of the participant who pasted
    typist: str  # the assignment key of the participant who typed everything


def boot_of(page: Page) -> dict[str, Any]:
    return page.evaluate("JSON.parse(document.getElementById('boot').textContent)")


def paste(page: Page, text: str) -> None:
    """Into the focused box, through the clipboard and the keyboard."""
    page.evaluate("text => navigator.clipboard.writeText(text)", text)
    page.keyboard.press("Control+V")


def rate_in_chromium(browser: Browser, url: str, chosen: dict, *, pasting: bool) -> str:
    """A participant rates one episode, typing every rationale, or (``pasting``) pasting the
    ``PASTED`` one and adding to the ``KEYED`` one; the assignment key."""
    context = browser.new_context(viewport=VIEWPORT,
                                  permissions=["clipboard-read", "clipboard-write"])
    page = context.new_page()
    page.goto(f"{url}/s/pilot?PROLIFIC_PID={prolific_id()}&STUDY_ID={prolific_id()}"
              f"&SESSION_ID={prolific_id()}")
    page.get_by_role("button", name=re.compile("start rating")).click()
    open_rating(page)
    key = boot_of(page)["assignment"]
    fill(page, chosen, blank=PASTED if pasting else None)
    if pasting:
        box = rating_column(page, *PASTED).locator("textarea")
        box.click()
        paste(page, PASTE)
        expect(box).to_have_value(PASTE)
        keyed = rating_column(page, *KEYED)
        keyed.locator("textarea").click()
        page.keyboard.press("End")
        page.keyboard.type(ADDED + "x")
        page.keyboard.press("Backspace")
        page.keyboard.press("Shift+Enter")
        keyed.get_by_role("button", name="Edit Region").click()
        paste(page, ADDED_LATER)
        expect(keyed.locator("textarea")).to_have_value(re.compile(re.escape(ADDED_LATER) + "$"))
    submit(page)
    page.wait_for_url(re.compile(r"/s/pilot/done$"))
    context.close()
    return key


@contextmanager
def served_one_each(client: Client, label_studio: LocalServer,
                    tmp: Path) -> Iterator[tuple[str, Engine]]:
    """A study of one episode per participant served by `sotopia-ls study serve`: its
    address and its database."""
    project = study_project(client, f"test_{tmp.name}_{prolific_id()[:8]}", episodes=3)
    study = make_study(tmp, project, episodes_per_participant=1)
    study_file = tmp / "study.json"
    study_file.write_text(study.model_dump_json())
    env = gateway_env(label_studio.url, label_studio.credentials.api_key,
                      secrets.token_urlsafe(32))
    with gateway(study_file, env) as running:
        yield running.url, open_store(study.database)


@pytest.fixture(scope="module")
def rated(ls_client: Client, label_studio: LocalServer, browser: Browser,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rated]:
    """A study of one episode per participant; one participant pastes, one types."""
    with served_one_each(ls_client, label_studio,
                         tmp_path_factory.mktemp("typing")) as (url, engine):
        pasted, typed = answers(11, "pasting participant"), answers(12, "typing participant")
        paster = rate_in_chromium(browser, url, pasted, pasting=True)
        typist = rate_in_chromium(browser, url, typed, pasting=False)
        yield Rated(url, engine, {paster: pasted, typist: typed}, paster, typist)


def assignment_of(engine: Engine, key: str) -> Any:
    with engine.connect() as conn:
        return conn.execute(select(assignments).where(assignments.c.key == key)).one()


def counts_of(engine: Engine, key: str) -> dict[str, dict[str, int]] | None:
    """The counts kept for the assignment, as plain numbers; None when none were kept."""
    assignment_id = assignment_of(engine, key).id
    kept = recorded_typing(engine, [assignment_id]).get(assignment_id)
    return None if kept is None else {name: c.model_dump() for name, c in kept.items()}


def flagged_as_pasted(engine: Engine, key: str) -> tuple[bool, str] | None:
    """Whether ``pasted_rationale`` fires for the rating, and why, given the counts kept with
    it; None when it cannot judge the rating."""
    row = assignment_of(engine, key)
    annotation = Annotation(participant=str(row.participant_id), episode=str(row.task_id),
                            fields=row.results,  # the stored scores
                            typing=recorded_typing(engine, [row.id]).get(row.id, {}))
    judged = {result.name: (result.fired, result.detail) for result in flag_annotation(annotation)}
    return judged.get("pasted_rationale")


def test_a_pasted_rationale_counts_as_pasted_and_typed_ones_as_typed(rated):
    written = rated.written[rated.paster]
    expected = {
        reasoning_name(key, agent): {"pasted": 0, "typed": len(written[agent][key][0])}
        for agent in AGENTS for key in DIMENSION_KEYS
    }
    expected[reasoning_name(*PASTED)] = {"pasted": len(PASTE), "typed": 0}
    # Key by key: the slip typed and deleted counts too.
    expected[reasoning_name(*KEYED)]["typed"] += len(ADDED + "x")
    expected[reasoning_name(*KEYED)]["pasted"] = len(ADDED_LATER)

    assert counts_of(rated.engine, rated.paster) == expected
    fields = assignment_of(rated.engine, rated.paster).results  # the stored scores
    assert fields[reasoning_name(*PASTED)] == PASTE
    key, agent = KEYED
    assert fields[reasoning_name(key, agent)] == written[agent][key][0] + ADDED + ADDED_LATER


def test_a_rating_typed_throughout_counts_nothing_pasted(rated):
    written = rated.written[rated.typist]

    assert counts_of(rated.engine, rated.typist) == {
        reasoning_name(key, agent): {"pasted": 0, "typed": len(written[agent][key][0])}
        for agent in AGENTS for key in DIMENSION_KEYS
    }


def test_the_pasted_rationale_flag_fires_for_the_paste_and_not_for_a_typed_rating(rated):
    assert flagged_as_pasted(rated.engine, rated.paster) == (
        True, f"mostly pasted: {reasoning_name(*PASTED)} (100%)")

    assert flagged_as_pasted(rated.engine, rated.typist) == (
        False, f"no rationale mostly pasted ({len(AGENTS) * len(DIMENSION_KEYS)} measured)")


# --- over plain HTTP: what the page never sends ---------------------------------------------


def post(someone: Participant, seed: int, **extra: Any) -> Any:
    """A rating as the page posts it, with ``extra`` fields in the body."""
    return someone.http.post(
        "/s/pilot/submit", headers={"X-CSRF-Token": someone.boot["csrf"]},
        json={"assignment": someone.boot["assignment"], "results": results_of(answers(seed)),
              **extra})


FIELD = reasoning_name(*PASTED)


def test_malformed_counts_are_refused_naming_typing_and_counts_in_bounds_are_kept(rated):
    someone = Participant.of(rated.url)
    key = someone.begin()
    malformed = [
        {"somebody_elses_field": {"pasted": 1, "typed": 1}},
        {FIELD: {"pasted": -1, "typed": 4}},
        {FIELD: {"pasted": MOST_CHARACTERS + 1, "typed": 4}},
        {FIELD: {"pasted": 2.5, "typed": 4}},
        {FIELD: {"pasted": "lots", "typed": 4}},
        {FIELD: 5},
        [FIELD],
    ]

    for typing in malformed:
        refused = post(someone, 21, typing=typing)
        assert refused.status_code == 400, typing
        assert refused.json()["error"].startswith(
            "This is not a rating the study can read: typing"), refused.json()
    assert assignment_of(rated.engine, key).state == "leased"

    kept = {FIELD: {"pasted": MOST_CHARACTERS, "typed": 0}}
    assert post(someone, 21, typing=kept).status_code == 200
    assert counts_of(rated.engine, key) == kept


def test_a_rating_from_a_page_without_counts_is_saved_without_them(rated):
    someone = Participant.of(rated.url)
    key = someone.begin()

    assert someone.rate(22).status_code == 200

    assert assignment_of(rated.engine, key).state in ("saving", "saved")
    assert counts_of(rated.engine, key) is None


def test_a_second_submit_of_a_rating_keeps_the_counts_of_the_first(rated):
    someone = Participant.of(rated.url)
    key = someone.begin()
    first = {FIELD: {"pasted": 0, "typed": 40}}

    assert post(someone, 23, typing=first).status_code == 200
    assert post(someone, 23, typing={FIELD: {"pasted": 40, "typed": 0}}).status_code == 200

    assert counts_of(rated.engine, key) == first
