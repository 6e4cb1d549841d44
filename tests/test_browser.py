"""An annotator rates a real Sotopia episode on the generated labeling screen.

Headless Chromium against the session's real Label Studio: log in through the login page,
open the task, read the episode and the rubric, submit ratings, read them back via the SDK;
and, in the annotator's labeling stream, what the screen looks like at two window sizes.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from browser import (
    CHROMIUM,
    checked_ratings,
    editor,
    fresh_page,
    in_view,
    open_stream,
    open_task,
    rate,
    rating_column,
    screenshot_whole_form,
    submit,
)
from conftest import results_of
from sotopia_ls.dimensions import AGENTS, DIMENSIONS, RUBRIC
from sotopia_ls.episode import Episode, Turn
from sotopia_ls.importer import load_episodes
from sotopia_ls.labelstudio.client import create_project
from sotopia_ls.labelstudio.push import task_payload
from sotopia_ls.labelstudio.tasks import episode_to_task

pytestmark = [
    pytest.mark.browser,
    pytest.mark.server,
    pytest.mark.skipif(not CHROMIUM.exists(), reason=f"Chromium is not installed at {CHROMIUM}"),
]

# The README's screenshot is refreshed only on request, so a test run leaves the tree clean.
README_SCREENSHOT = Path(__file__).resolve().parents[1] / "docs" / "labeling-screen.png"

# Every range edge, negative values and zeros; one rationale with quotes and markup.
SCORES: dict[int, dict[str, tuple[str, int]]] = {
    1: {
        "believability": ("Mia sounds natural throughout.", 7),
        "relationship": ("She insists on the blanket; the friendship cools.", -3),
        "knowledge": ("Nothing new is learned.", 0),
        "secret": ("Mia reveals her punk-band past outright.", -10),
        "social_rules": ("No rule is broken.", 0),
        "financial_and_material_benefits": ("She loses her share of the blanket.", -5),
        "goal": ("They agree to share, which was her goal.", 10),
    },
    2: {
        "believability": ("William repeats Mia's words verbatim.", 0),
        "relationship": ("William says \"we're closer\" & <b>means</b> it.", 5),
        "knowledge": ("He learns how cold Mia is.", 10),
        "secret": ("His sabotage stays hidden.", 0),
        "social_rules": ("He threatens Mia.", -10),
        "financial_and_material_benefits": ("No material change.", 0),
        "goal": ("He keeps the blanket only part of the night.", 3),
    },
}

# The window sizes the screen is measured at: a laptop, and a window half a wide screen.
WIDE = {"width": 1440, "height": 900}
NARROW = {"width": 800, "height": 900}

SCRIPT = "<script>window.__xss=1</script>"
IMAGE = '<img src=x onerror="window.__xss=1">'


@pytest.fixture(scope="module")
def episode(sample_data: Path) -> Episode:
    loaded = load_episodes([sample_data / "episodelog" / "fixture_episode.json"])
    loaded.raise_on_problems()
    return loaded.episodes[0]


@pytest.fixture(scope="module")
def project(ls_client) -> int:
    return create_project(ls_client, f"test_browser_{uuid.uuid4().hex[:8]}").id


@pytest.fixture(scope="module")
def stream_project(ls_client, episode) -> int:
    """A project holding the one episode, so the labeling stream always opens it."""
    project = create_project(ls_client, f"test_stream_{uuid.uuid4().hex[:8]}").id
    ls_client.projects.import_tasks(id=project, request=[task_payload(episode)])
    return project


@pytest.fixture
def page(browser, logged_in) -> Iterator[Page]:
    with fresh_page(browser, storage_state=logged_in) as page:
        yield page


@pytest.fixture(scope="module")
def wide_stream(browser, logged_in, label_studio, stream_project) -> Iterator[Page]:
    """The labeling stream loaded once in a wide window, for the tests that only look at it:
    none rates, submits, reloads or changes the project, so each finds the page as loaded."""
    with fresh_page(browser, storage_state=logged_in, viewport=WIDE) as page:
        open_stream(page, label_studio, stream_project)
        yield page


@pytest.fixture
def open_episode(page, label_studio, ls_client, project):
    """Import an episode as a new task and open it on the labeling page; gives the task id."""

    def _open(episode: Episode) -> int:
        response = ls_client.projects.import_tasks(
            id=project, request=[task_payload(episode)], return_task_ids=True
        )
        task = response.task_ids[0]
        open_task(page, label_studio, project, task)
        return task

    return _open


@pytest.fixture
def stream(page, label_studio, stream_project):
    """Open the annotator's labeling stream in a window of the given size."""

    def _open(size: dict[str, int]) -> None:
        page.set_viewport_size(size)
        open_stream(page, label_studio, stream_project)

    return _open


def wait_for_annotations(ls_client, task: int, timeout: float = 20.0) -> list[Any]:
    deadline = time.monotonic() + timeout
    while not (annotations := ls_client.annotations.list(id=task)) and time.monotonic() < deadline:
        time.sleep(0.5)
    return annotations


def comparable(results: list[dict[str, Any]]) -> list[tuple[str, str, str, str]]:
    """Results without Label Studio's ids and origin, in a stable order."""
    return sorted(
        (r["from_name"], r["to_name"], r["type"], json.dumps(r["value"], sort_keys=True))
        for r in results
    )


def fill_form(page: Page, *, skip_rationale: tuple[str, int] | None = None) -> None:
    for agent in AGENTS:
        for key, (rationale, score) in SCORES[agent].items():
            rate(page, key, agent, score, None if (key, agent) == skip_rationale else rationale)


def test_an_annotator_sees_the_episode_and_the_rubric(page, open_episode, episode, tmp_path):
    open_episode(episode)

    data = episode_to_task(episode)
    shown = [data["scenario"]]
    for agent in AGENTS:
        shown += [data[f"agent_{agent}_goal"], data[f"agent_{agent}_secret"]]
    shown += [turn["text"] for turn in data["dialogue"]]
    shown += [turn["speaker"] for turn in data["dialogue"]]
    for dimension in DIMENSIONS:
        shown += [f"{dimension.label} ({dimension.range_text})", dimension.guidance]
    form = editor(page)
    for text in shown:
        expect(form.get_by_text(text, exact=True).first).to_be_visible()
    for agent in AGENTS:
        secret_of = f"Secret of {data[f'agent_{agent}_name']} (private"
        expect(form.get_by_text(secret_of)).to_be_visible()

    # The instruction page's examples sit one click away, under each dimension.
    believability = RUBRIC["believability"]
    form.get_by_text(f"Annotation examples and worked example for {believability.label}").click()
    expect(form.get_by_text(believability.examples[1].assessment, exact=True)).to_be_visible()

    # Typing outside a text box selects nothing: no choice has Label Studio's auto hotkeys.
    form.get_by_text("Scenario", exact=True).click()
    for key in "1234567890qwe":
        page.keyboard.press(key)
    assert checked_ratings(page) == []

    screenshot = README_SCREENSHOT if os.environ.get("UPDATE_SCREENSHOT") else tmp_path / "form.png"
    screenshot_whole_form(page, screenshot)

    page.get_by_role("button", name="Instructions").click()
    expect(page.get_by_text("Worked example: Donovan Reeves and Noah Davis")).to_be_visible()


def test_a_form_with_a_missing_rationale_is_refused(page, open_episode, episode, ls_client):
    task = open_episode(episode)

    fill_form(page, skip_rationale=("goal", 2))
    submit(page)

    expect(page.get_by_text("Please explain your Goal rating for agent 2.")).to_be_visible()
    assert wait_for_annotations(ls_client, task, timeout=3) == []


def test_negative_and_zero_ratings_are_stored_exactly(page, open_episode, episode, ls_client):
    task = open_episode(episode)

    fill_form(page)
    assert sorted(checked_ratings(page)) == sorted(
        str(score) for agent in AGENTS for _, score in SCORES[agent].values()
    )
    submit(page)

    annotations = wait_for_annotations(ls_client, task)
    assert len(annotations) == 1
    assert comparable(annotations[0].result) == comparable(results_of(SCORES))


def test_episode_text_is_shown_as_text_and_never_runs(page, open_episode, episode):
    first, *rest = episode.turns
    hostile = episode.model_copy(
        update={
            "id": f"{episode.id}-xss",
            "scenario": f"{episode.scenario} {SCRIPT}",
            "turns": (Turn(speaker=first.speaker, kind=first.kind, text=f"Hello {IMAGE}"), *rest),
        }
    )
    open_episode(hostile)

    form = editor(page)
    expect(form.get_by_text(f"{episode.scenario} {SCRIPT}", exact=True)).to_be_visible()
    first_turn = episode_to_task(hostile)["dialogue"][0]["text"]
    assert first_turn.endswith(f"Hello {IMAGE}")
    expect(form.get_by_text(first_turn, exact=True)).to_be_visible()
    page.wait_for_timeout(1000)
    assert page.evaluate("() => window.__xss") is None


def test_projects_we_create_have_no_skip_button(
    wide_stream, page, stream, ls_client, stream_project
):
    assert ls_client.projects.get(id=stream_project).show_skip_button is False
    expect(wide_stream.get_by_role("button", name="Submit current annotation")).to_be_visible()
    expect(wide_stream.get_by_role("button", name="Skip")).to_have_count(0)

    # The same stream shows the button once the setting is on: the check above can see it.
    ls_client.projects.update(id=stream_project, show_skip_button=True)
    try:
        stream(WIDE)
        expect(page.get_by_role("button", name="Skip")).to_be_visible()
    finally:
        ls_client.projects.update(id=stream_project, show_skip_button=False)


def test_label_studio_side_panels_are_hidden_and_the_form_has_the_width(wide_stream):
    expect(wide_stream.get_by_text("Labeled regions will appear here")).to_be_hidden()
    expect(wide_stream.get_by_text("View region details")).to_be_hidden()
    assert editor(wide_stream).bounding_box()["width"] == WIDE["width"]


def test_on_a_wide_screen_the_dialogue_stays_in_view_while_rating(wide_stream, episode):
    page = wide_stream  # scrolled here, after the other tests of the page have measured it
    form = editor(page)
    context, ratings = form.locator(".sotopia-episode"), form.locator(".sotopia-evaluation")
    left, right = context.bounding_box(), ratings.bounding_box()
    assert left["x"] + left["width"] <= right["x"], "episode and ratings are not side by side"

    last_turn = form.get_by_text(episode_to_task(episode)["dialogue"][-1]["text"], exact=True)
    last_rating = rating_column(page, DIMENSIONS[-1].key, AGENTS[-1])
    last_turn.scroll_into_view_if_needed()  # the annotator reads the dialogue to its end
    last_rating.scroll_into_view_if_needed()

    assert in_view(last_rating)
    assert in_view(last_turn), "the last turn left the screen when the last rating came in"


def test_on_a_narrow_screen_context_dialogue_and_ratings_read_top_to_bottom(
    page, stream, episode
):
    stream(NARROW)
    form = editor(page)
    data = episode_to_task(episode)
    scenario = form.get_by_text(data["scenario"], exact=True).bounding_box()
    last_turn = form.get_by_text(data["dialogue"][-1]["text"], exact=True).bounding_box()
    first_rating = rating_column(page, DIMENSIONS[0].key, AGENTS[0]).bounding_box()
    assert scenario["y"] < last_turn["y"] < first_rating["y"]

    context = form.locator(".sotopia-episode").bounding_box()
    ratings = form.locator(".sotopia-evaluation").bounding_box()
    assert context["y"] + context["height"] <= ratings["y"]
    assert context["x"] == ratings["x"]
