"""A measured screen: a scripted participant rates episodes on the study gateway in Chromium.

A real Label Studio holds the shortest, median and longest sample episodes; each run is one
participant rating them all as a careful person does. What is measured (actions, scroll,
viewport used, submit to next ready) and why is in docs/benchmarks.md, "The rating screen".
"""

from __future__ import annotations

import os
import re
import secrets
import statistics
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from playwright.sync_api import Browser, Page, sync_playwright
from playwright.sync_api import Error as PlaywrightError

from sotopia_ls.config import rating_class
from sotopia_ls.dimensions import (
    AGENTS,
    DIMENSION_KEYS,
    RUBRIC,
    rating_name,
    reasoning_name,
)
from sotopia_ls.episode import Episode
from sotopia_ls.labelstudio.client import Client, create_project
from sotopia_ls.labelstudio.push import push_episodes
from sotopia_ls.labelstudio.tasks import DIALOGUE, dialogue
from sotopia_ls.study.process import gateway
from sotopia_ls.study.settings import SECRET_ENV, StudyFile

from . import load, servers

CHROMIUM = Path("/usr/bin/chromium")
LAUNCH_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking"]
VIEWPORT = {"width": 1440, "height": 900}
STUDY = "screen"
CODE = "SCR33N1"


def words(turns: list[str]) -> int:
    """Words of a dialogue as the page shows it (each turn's number and speaker included)."""
    return len(" ".join(turns).split())


def chosen_episodes(count: int = 3) -> list[Episode]:
    """The shortest, the median and the longest sample episode by words of dialogue (``count``
    of them spread over that order)."""
    ranked = sorted(load.seed_episodes(),
                    key=lambda episode: words([turn["text"] for turn in dialogue(episode)]))
    picks = sorted({round(i * (len(ranked) - 1) / max(count - 1, 1)) for i in range(count)})
    return [ranked[i] for i in picks]


@contextmanager
def serving(participants: int, episodes: int = 3) -> Iterator[str]:
    """Label Studio and the gateway of a study in which each of ``participants`` rates every
    one of ``episodes`` episodes; the gateway's address."""
    shown = chosen_episodes(episodes)
    with tempfile.TemporaryDirectory(prefix="sotopia-screen-bench-") as folder:
        work = Path(folder)
        with servers.started(work / "label-studio") as (running, _):
            client = Client(base_url=running.url, api_key=running.credentials.api_key)
            project = create_project(client, f"bench_screen_{uuid.uuid4().hex[:8]}",
                                     annotations_per_task=participants)
            push_episodes(client, project.id, shown, progress=False)
            study = StudyFile(
                name=STUDY, project=project.id, raters_per_episode=participants,
                episodes_per_participant=len(shown), completion_code=CODE,
                completion_url=f"http://127.0.0.1:9/complete?cc={CODE}",
                database=f"sqlite:///{work / 'gateway.sqlite3'}")
            study_file = work / "study.json"
            study_file.write_text(study.model_dump_json())
            # The editor is whichever this run's code and environment serve: the benchmark
            # measures the page as it is, old editor or new.
            env = {**os.environ, "LABEL_STUDIO_URL": running.url,
                   "LABEL_STUDIO_API_KEY": running.credentials.api_key,
                   SECRET_ENV: secrets.token_urlsafe(32)}
            with gateway(study_file, env) as running_gateway:
                yield running_gateway.url


# --- the page, seen from inside ------------------------------------------------------------

SUBMIT = 'button[aria-label=submit], button[aria-label="Submit current annotation"]'
RADIOS = sum(len(RUBRIC[key].values) for key in DIMENSION_KEYS) * len(AGENTS)
# The page's content; the editor's bar holding Submit is found from Submit (``BAR_PX``).
CONTENT = ".study-bar, .instructions-panel, #notice, .sotopia-episode, .sotopia-evaluation"
COLUMNS = (".sotopia-episode", ".sotopia-evaluation")
# Submit's bar: its outermost ancestor no taller than this (a bar, not the editor around it).
BAR_PX = 100
GRID_PX = 10
# --quick: each point is a hit test, the costliest part of the run in Chromium; a sixteenth of
# them is enough for the check that the benchmark still runs.
QUICK_GRID_PX = 40
SCROLLERS = {"window": "window", "div.sotopia-episode": "episode column"}

# Run in every page before its own scripts: the scroll listener; the moment of each click,
# kept in the tab's session storage so that the next page can read when Submit was pressed;
# and the first animation frame at which every radio button of a blank form is drawn, again for
# each episode the page shows in place ("sotopia:episode"), counting the files fetched since.
WATCH = """
(() => {
  const screen = window.__screen = { scrolled: {}, positions: new Map(), readyAt: null,
                                     episode: 1, filesBefore: 0 };
  const name = element => element === document.scrollingElement ? "window"
    : element.tagName.toLowerCase() + "." + String(element.className).trim().split(/\\s+/)[0];
  screen.reset = () => {
    screen.scrolled = {};
    screen.positions = new Map();
    for (const element of document.querySelectorAll("*")) {
      if (element.scrollTop || element.scrollLeft) {
        screen.positions.set(element, [element.scrollTop, element.scrollLeft]);
      }
    }
  };
  addEventListener("scroll", event => {
    const element = event.target === document ? document.scrollingElement : event.target;
    if (element.matches("textarea, input")) return;  // a text box following its own caret
    const [top, left] = screen.positions.get(element) || [0, 0];
    const moved = Math.abs(element.scrollTop - top) + Math.abs(element.scrollLeft - left);
    screen.positions.set(element, [element.scrollTop, element.scrollLeft]);
    screen.scrolled[name(element)] = (screen.scrolled[name(element)] || 0) + moved;
  }, true);
  addEventListener("click", event => {
    sessionStorage.setItem("screen-clicked-at", String(performance.timeOrigin + event.timeStamp));
  }, true);
  const drawn = () => {
    const radios = document.querySelectorAll(".sotopia-rating input[type=radio]");
    const last = radios[radios.length - 1];
    const blank = !document.querySelector(".sotopia-rating .ant-radio-wrapper-checked");
    if (radios.length >= RADIOS && blank && last.getBoundingClientRect().height > 0) {
      screen.readyAt = performance.timeOrigin + performance.now();
    } else {
      requestAnimationFrame(drawn);
    }
  };
  requestAnimationFrame(drawn);
  document.addEventListener("sotopia:episode", () => {
    screen.episode += 1;
    screen.readyAt = null;
    screen.filesBefore = performance.getEntriesByType("resource").length;
    requestAnimationFrame(drawn);
  });
})();
""".replace("RADIOS", str(RADIOS))

# Share of grid points over the viewport at which the topmost element is content.
USED = """
([content, submit, barPx, grid]) => {
  let bar = document.querySelector(submit);
  while (bar && bar.parentElement && bar.parentElement.getBoundingClientRect().height <= barPx) {
    bar = bar.parentElement;
  }
  let used = 0, points = 0;
  for (let y = grid / 2; y < innerHeight; y += grid) {
    for (let x = grid / 2; x < innerWidth; x += grid) {
      const hit = document.elementFromPoint(x, y);
      points += 1;
      used += Boolean(hit && (hit.closest(content) || (bar && bar.contains(hit))));
    }
  }
  return used / points;
}
"""

# The columns' horizontal extent: [left, right] of each, cut to the window.
COLUMN_EDGES = """
selectors => selectors.map(selector => {
  const box = document.querySelector(selector).getBoundingClientRect();
  return [Math.max(box.left, 0), Math.min(box.right, innerWidth)];
})
"""

# The dialogue's last turn: its last element holding text and no other element.
LAST_TURN = """
() => [...document.querySelectorAll(".sotopia-dialogue *")]
  .filter(element => !element.children.length && element.textContent.trim()).pop()
"""

# Whether part of an element is in view: the browser's own intersection with the viewport,
# cut by every box that clips it (the form's panel, the episode column).
IN_VIEW = """
element => new Promise(seen => {
  const watch = new IntersectionObserver(([entry]) => {
    watch.disconnect();
    seen(entry.isIntersecting);
  });
  watch.observe(element);
})
"""

ADD_BUTTONS = """
() => [...document.querySelectorAll("button")]
  .filter(button => button.offsetParent && button.textContent.trim() === "Add").length
"""

# From the last click of the previous episode (Start or Submit) to this one ready; the kilobytes
# its files (and, for an episode shown in place, the Submit's answer) took over the network.
LOADED = """
() => [window.__screen.readyAt - Number(sessionStorage.getItem("screen-clicked-at")),
       performance.getEntriesByType("resource").slice(window.__screen.filesBefore)
         .reduce((sum, file) => sum + file.transferSize, 0) / 1024]
"""

# The page has gone to another address, or shown its next episode in place.
MOVED_ON = """
episode => !window.__screen || window.__screen.episode > episode
  || !location.pathname.endsWith("/rate")
"""

SETTLED = "() => new Promise(done => requestAnimationFrame(() => requestAnimationFrame(done)))"


# --- one participant ----------------------------------------------------------------------


@dataclass
class EpisodeFigures:
    """What one episode took of one participant."""

    words: int  # in the dialogue shown: which episode it was (the page holds no id)
    actions: int
    scrolled: dict[str, float]  # pixels per scrolling element ("window", "episode column", …)
    used_top: float  # share of the viewport used as the page opens
    used_last: float  # … and with the last dimension in view
    columns_px: float  # width of the two columns
    right_px: float  # empty width right of the columns
    add_buttons: int  # "Add" buttons shown (not pressed: not needed)
    last_turn_seen: bool  # the dialogue's last turn in view while rating the last dimension
    number: int  # the episode's place in the visit, from 1
    ready_ms: float  # from the click that asked for the page (Start, else Submit) to it ready
    transferred_kb: float  # what the page's files took over the network (not from the cache)

    @property
    def scroll_px(self) -> float:
        return sum(self.scrolled.values())


def _answers() -> list[dict[str, str]]:
    """Real participants' answers (rows of the sample human-evaluation CSVs), as the value
    each control takes; rows missing a rationale are left out."""
    rows = []
    for results in load.real_ratings():
        answer = {result["from_name"]: (result["value"].get("choices") or result["value"]["text"])[0]
                  for result in results}
        if all(str(value).strip() for value in answer.values()) and len(answer) == 2 * len(
                DIMENSION_KEYS) * len(AGENTS):
            rows.append(answer)
    return rows


def _rate(page: Page, answer: dict[str, str]) -> int:
    """Read the episode to its last turn, then rate every dimension of both agents in the
    page's order, typing each rationale; the clicks made (the ratings)."""
    page.evaluate(f"() => ({LAST_TURN.strip()})().scrollIntoView({{block: 'nearest'}})")
    clicks = 0
    for key in DIMENSION_KEYS:
        for agent in AGENTS:
            column = page.locator(f".{rating_class(key, agent)}")
            score = int(answer[rating_name(key, agent)])
            column.locator("label.ant-radio-wrapper").nth(RUBRIC[key].values.index(score)).click()
            clicks += 1
            column.locator("textarea").fill(answer[reasoning_name(key, agent)])
    return clicks


def _submit(page: Page) -> None:
    """Press Submit and wait for the next episode, shown in place or as a new page; a refusal
    is an error naming what it said."""
    episode = page.evaluate("() => window.__screen.episode")
    page.locator(SUBMIT).first.click()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if page.evaluate(MOVED_ON, episode):
                return
        except PlaywrightError:  # the page is being replaced by the next one
            pass
        time.sleep(0.05)
    notice = page.locator("#notice").inner_text() if page.locator("#notice").count() else ""
    raise RuntimeError(f"Submit was not taken: {notice or 'no page followed'}")


def _episode(page: Page, answer: dict[str, str], number: int,
             dialogs: list[int], grid_px: int) -> EpisodeFigures:
    """One episode, from its page ready until Submit is pressed (the next page not awaited)."""
    page.wait_for_function("() => window.__screen && window.__screen.readyAt", timeout=120_000)
    ready_ms, transferred_kb = page.evaluate(LOADED)
    shown = page.evaluate(
        "key => JSON.parse(document.getElementById('boot').textContent).task.data[key]"
        ".map(turn => turn.text)", DIALOGUE)
    page.evaluate(SETTLED)
    page.evaluate("() => window.__screen.reset()")
    used = [CONTENT, SUBMIT, BAR_PX, grid_px]
    used_top = page.evaluate(USED, used)
    edges = page.evaluate(COLUMN_EDGES, list(COLUMNS))
    dialogs_before = len(dialogs)
    clicks = _rate(page, answer)
    page.evaluate(SETTLED)
    figures = EpisodeFigures(
        words=words(shown),
        actions=clicks + 1 + len(dialogs) - dialogs_before,  # + Submit, + any dialog dismissed
        scrolled={SCROLLERS.get(name, name): moved
                  for name, moved in page.evaluate("() => window.__screen.scrolled").items()},
        used_top=used_top,
        used_last=page.evaluate(USED, used),
        columns_px=sum(right - left for left, right in edges),
        right_px=VIEWPORT["width"] - max(right for _, right in edges),
        add_buttons=page.evaluate(ADD_BUTTONS),
        last_turn_seen=page.evaluate_handle(LAST_TURN).evaluate(IN_VIEW),
        number=number, ready_ms=ready_ms, transferred_kb=transferred_kb,
    )
    _submit(page)
    return figures


def participate(browser: Browser, url: str, answers: list[dict[str, str]],
                grid_px: int = GRID_PX) -> list[EpisodeFigures]:
    """One participant from the Prolific link to the completion page; each episode's figures."""
    context = browser.new_context(viewport=VIEWPORT)
    context.add_init_script(WATCH)
    page = context.new_page()
    dialogs: list[int] = []

    def dismiss(dialog: Any) -> None:  # a dialog is one more action the page demands
        dialogs.append(1)
        dialog.dismiss()

    page.on("dialog", dismiss)
    try:
        page.goto(f"{url}/s/{STUDY}?PROLIFIC_PID={secrets.token_hex(12)}&STUDY_ID={'b' * 24}"
                  f"&SESSION_ID={secrets.token_hex(12)}")
        page.get_by_role("button", name=re.compile("start rating")).click()
        page.wait_for_url(re.compile(r"/rate$"))
        shown: list[EpisodeFigures] = []
        for number, answer in enumerate(answers, start=1):
            shown.append(_episode(page, answer, number, dialogs, grid_px))
            if page.url.endswith("/done"):
                break
        return shown
    finally:
        context.close()


# --- the benchmark ------------------------------------------------------------------------


@dataclass
class Figures:
    """Every participant's episodes; ``rounds`` participants, each rating every episode."""

    rounds: int
    grid_px: int
    episodes: list[EpisodeFigures] = field(default_factory=list)
    seconds: float = 0.0


def measure_screen(rounds: int = 3, episodes: int = 3, grid_px: int = GRID_PX) -> Figures:
    """``rounds`` scripted participants, one after another, each rating ``episodes`` sample
    episodes on fresh servers, the viewport used read on a grid ``grid_px`` apart; see the
    module's docstring."""
    if not CHROMIUM.exists():
        raise RuntimeError(f"Chromium is not installed at {CHROMIUM}")
    answers = _answers()
    with serving(rounds, episodes) as url, sync_playwright() as playwright:
        figures = Figures(rounds, grid_px)
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=LAUNCH_ARGS,
                                             headless=True)
        begun = time.perf_counter()
        try:
            for round_ in range(rounds):
                mine = [answers[(round_ * episodes + n) % len(answers)] for n in range(episodes)]
                figures.episodes += participate(browser, url, mine, grid_px)
        finally:
            browser.close()
        figures.seconds = time.perf_counter() - begun
    return figures


def _spread(values: list[float], unit: str, digits: int = 0) -> str:
    """The median, and the least and most when they differ."""
    middle = f"{statistics.median(values):,.{digits}f}"
    low, high = f"{min(values):,.{digits}f}", f"{max(values):,.{digits}f}"
    return f"{middle}{unit}" + ("" if low == high else f" ({low}–{high})")


def rows(figures: Figures) -> list[dict[str, Any]]:
    """The screen's figures as rows of the benchmark table: medians over every episode each
    participant rated (each figure is measured ``rounds`` times per episode)."""
    shown = figures.episodes
    by_words = sorted({episode.words for episode in shown})
    size = (f"{len(by_words)} sample episodes ({'/'.join(map(str, by_words))} words of dialogue), "
            f"{figures.rounds} participant(s) each rating all, Chromium "
            f"{VIEWPORT['width']}x{VIEWPORT['height']}, Label Studio and gateway on SQLite")
    scrollers = sorted({name for episode in shown for name in episode.scrolled},
                       key=lambda name: (name != "window", name))
    each = ", ".join(f"{name} {statistics.median(e.scrolled.get(name, 0) for e in shown):,.0f}"
                     for name in scrollers)
    per_episode = " / ".join(
        f"{statistics.median(e.scroll_px for e in shown if e.words == count):,.0f}"
        for count in by_words)
    actions = [episode.actions for episode in shown]
    first = [episode for episode in shown if episode.number == 1]
    later = [episode for episode in shown if episode.number > 1]
    seen = sum(episode.last_turn_seen for episode in shown)
    return [
        {"benchmark": "screen: actions per episode", "size": size,
         "seconds": f"{figures.seconds:,.1f}",
         "figures": f"{_spread(actions, ' clicks and keys')} besides the rationales' text; "
                    f"{_spread([e.add_buttons for e in shown], '')} \"Add\" buttons shown, "
                    "none pressed",
         "target": f"the floor: {2 * len(DIMENSION_KEYS)} ratings + Submit",
         "met": statistics.median(actions) == 2 * len(DIMENSION_KEYS) + 1},
        {"benchmark": "screen: scroll per episode", "size": size,
         "figures": f"{_spread([e.scroll_px for e in shown], ' px')}: {each}; by episode "
                    f"({'/'.join(map(str, by_words))} words): {per_episode} px"},
        {"benchmark": "screen: viewport used", "size": size,
         "figures": f"points {figures.grid_px} px apart: {_spread([e.used_top * 100 for e in shown], '%')} as the page opens, "
                    f"{_spread([e.used_last * 100 for e in shown], '%')} with the last dimension "
                    f"in view; the two columns {_spread([e.columns_px for e in shown], ' px')} of "
                    f"{VIEWPORT['width']:,} wide, {_spread([e.right_px for e in shown], ' px')} "
                    f"empty right of them; the last turn in view while rating the last "
                    f"dimension: {seen} of {len(shown)}"},
        _ready_row("screen: Submit to the next episode ready", size, later),
        _ready_row("screen: Start to the first episode ready (empty cache)", size, first),
    ]


def _ready_row(name: str, size: str, pages: list[EpisodeFigures]) -> dict[str, Any]:
    """How long ``pages`` took to be ready after the click asking for them, and what their
    files took over the network."""
    if not pages:
        return {"benchmark": name, "size": size, "figures": "none"}
    return {"benchmark": name, "size": size,
            "figures": f"{_spread([e.ready_ms for e in pages], ' ms')} (pages: {len(pages)}); "
                       f"files over the network {_spread([e.transferred_kb for e in pages], ' KB')}"}
