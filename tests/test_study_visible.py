"""Time on task: the rating page measures the seconds it was visible and focused, the gateway
keeps them with the rating, and the flags and `study status` read them.

The gateway runs as `sotopia-ls study serve` in front of the session's real Label Studio. One
participant uses headless Chromium and, before submitting, reads another tab for a few
seconds; further participants post over plain HTTP, as a tampered page or a page made
before the measure would.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from playwright.sync_api import Page
from sqlalchemy import Engine

from browser import CHROMIUM, submit
from study_support import Participant, answers
from test_study import fill, start_rating
from test_study_typing import assignment_of, post, served_one_each
from sotopia_ls.labelstudio.client import Client
from sotopia_ls.labelstudio.server import LocalServer
from sotopia_ls.study.screening.visible import MOST_SECONDS, recorded_visible

pytestmark = [
    pytest.mark.browser,
    pytest.mark.server,
    pytest.mark.skipif(not CHROMIUM.exists(), reason=f"Chromium is not installed at {CHROMIUM}"),
]

ELSEWHERE = 5.0  # seconds the participant spends in another tab


@dataclass
class Measured:
    """The study, and the Chromium participant's rating: its key and the seconds they had
    the page in front of them, timed by the test."""

    url: str
    engine: Engine
    key: str
    scripted: float


def started_at(page: Page) -> float:
    """When the page's scripts had run (its measure begins), on ``time.monotonic``'s clock."""
    now, loaded = page.evaluate("""() => [performance.now(),
        performance.getEntriesByType("navigation")[0].domContentLoadedEventStart]""")
    return time.monotonic() - (now - loaded) / 1000


def rate_with_a_break(browser: Any, url: str) -> tuple[str, float]:
    """A participant rates one episode, leaving for another tab before submitting; the key
    and the seconds the rating page was in front."""
    page = start_rating(browser, url)
    context = page.context
    start = started_at(page)
    key = page.evaluate("JSON.parse(document.getElementById('boot').textContent).assignment")
    fill(page, answers(31, "visible participant"))  # then a break before submitting
    # Playwright tells every page it has the focus; a real browser's tab in front has it alone.
    # (Headless Chromium keeps a tab behind another "visible": losing the focus is what shows.)
    context.new_cdp_session(page).send("Emulation.setFocusEmulationEnabled", {"enabled": False})
    other = context.new_page()
    left = time.monotonic()
    other.bring_to_front()
    page.wait_for_function("() => !document.hasFocus()", polling=50, timeout=2000)
    time.sleep(ELSEWHERE)
    page.bring_to_front()
    back = time.monotonic()
    other.close()
    submitted = time.monotonic()
    submit(page)
    page.wait_for_url(re.compile(r"/s/pilot/done$"))
    context.close()
    return key, (submitted - start) - (back - left)


@pytest.fixture(scope="module")
def measured(ls_client: Client, label_studio: LocalServer, browser: Any,
             tmp_path_factory: pytest.TempPathFactory) -> Iterator[Measured]:
    with served_one_each(ls_client, label_studio,
                         tmp_path_factory.mktemp("visible")) as (url, engine):
        key, scripted = rate_with_a_break(browser, url)
        yield Measured(url, engine, key, scripted)


def visible_of(engine: Engine, key: str) -> float | None:
    assignment_id = assignment_of(engine, key).id
    return recorded_visible(engine, [assignment_id]).get(assignment_id)


def test_the_time_in_another_tab_is_not_time_on_task(measured):
    recorded = visible_of(measured.engine, measured.key)
    lead_time = assignment_of(measured.engine, measured.key).lead_time

    assert recorded == pytest.approx(measured.scripted, abs=1.0)
    assert lead_time - recorded > ELSEWHERE - 1  # the page open counts the break too


# --- over plain HTTP: what the page never sends ---------------------------------------------


def test_a_malformed_visible_time_is_refused_naming_it_one_in_bounds_kept_once_none_is_none(
        measured):
    someone = Participant.of(measured.url)
    key = someone.begin()

    for malformed in (-1, MOST_SECONDS + 1, "long", [3], {"seconds": 3}):
        refused = post(someone, 32, visible_seconds=malformed)
        assert refused.status_code == 400, malformed
        assert refused.json()["error"].startswith(
            "This is not a rating the study can read: visible_seconds"), refused.json()
    assert assignment_of(measured.engine, key).state == "leased"

    assert post(someone, 32, visible_seconds=MOST_SECONDS).status_code == 200
    assert post(someone, 32, visible_seconds=12.5).status_code == 200  # a second click
    # A day claimed for a page submitted at once: kept as the time the gateway saw pass.
    lead_time = assignment_of(measured.engine, key).lead_time
    assert visible_of(measured.engine, key) == lead_time < 60
    older = Participant.of(measured.url)  # a page made before the measure sends none
    older_key = older.begin()
    assert older.rate(33).status_code == 200
    assert visible_of(measured.engine, older_key) is None
