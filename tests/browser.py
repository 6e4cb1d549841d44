"""Drive the labeling page the way an annotator does: log in, open a task, rate, submit.

Chromium is the Debian package at ``/usr/bin/chromium``; Playwright's own browser
download is never used.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from playwright.sync_api import Browser, Locator, Page, expect, sync_playwright

from sotopia_ls.config import rating_class
from sotopia_ls.labelstudio.server import LocalServer

CHROMIUM = Path("/usr/bin/chromium")
# Playwright itself turns off what no test looks at (background networking, extensions, sync,
# component updates, default apps...); a --disable-features here would replace its own list.
LAUNCH_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking"]
VIEWPORT = {"width": 1440, "height": 1000}
LOADED = "text=Your evaluation"


@contextmanager
def launched_chromium() -> Iterator[Browser]:
    """The one place a test starts Chromium. While it runs, Playwright's sync API marks an
    asyncio loop as running, so a test file that calls ``asyncio.run`` after its browser
    tests starts one per test (``chromium_page``) rather than using the ``browser`` fixture."""
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM), args=LAUNCH_ARGS, headless=True
        )
        try:
            yield browser
        finally:
            browser.close()


@contextmanager
def fresh_page(browser: Browser, **options: object) -> Iterator[Page]:
    """A page in a context of its own: its own cookies and storage, as another person's."""
    context = browser.new_context(**{"viewport": VIEWPORT, **options})
    try:
        yield context.new_page()
    finally:
        context.close()


@contextmanager
def chromium_page() -> Iterator[Page]:
    with launched_chromium() as browser, fresh_page(browser) as page:
        yield page


def log_in(page: Page, server: LocalServer) -> None:
    """Through the real login form, with the server's admin credentials. Done once the form's
    redirect away from the login page arrives, with the session cookie: the projects page it
    leads to (the whole web app, ~1-2 s of Chromium's CPU) is not waited for."""
    page.goto(f"{server.url}/user/login/")
    page.fill("input[name=email]", server.credentials.username)
    page.fill("input[name=password]", server.credentials.password)
    page.click("button[type=submit]")
    page.wait_for_url(lambda url: "/user/login" not in url, wait_until="commit")


def open_task(page: Page, server: LocalServer, project: int, task: int) -> None:
    page.goto(f"{server.url}/projects/{project}/data?task={task}")
    page.wait_for_selector(LOADED, timeout=60_000)


def open_stream(page: Page, server: LocalServer, project: int) -> None:
    """The annotator's labeling stream, past the instructions it opens with. They are closed
    as soon as they show: while open, their blurred backdrop is redrawn on every frame of the
    editor loading behind it (about 4 s of Chromium's CPU per load)."""
    page.goto(f"{server.url}/projects/{project}/data?labeling=1")
    page.get_by_role("button", name="Close modal").click(timeout=60_000)
    page.wait_for_selector(LOADED, timeout=60_000)
    expect(page.get_by_text("Labeling Instructions")).to_be_hidden()


def in_view(locator: Locator) -> bool:
    """Whether the annotator sees part of the element: its box cut to the window and to
    every box that clips it (Label Studio scrolls the form inside a panel, the episode
    column scrolls on its own) is not empty, and nothing lies over its middle (Label
    Studio's Submit bar lies over the bottom of the panel)."""
    return locator.evaluate(
        """element => {
            const box = element.getBoundingClientRect();
            let top = Math.max(box.top, 0), bottom = Math.min(box.bottom, innerHeight);
            let left = Math.max(box.left, 0), right = Math.min(box.right, innerWidth);
            for (let clip = element.parentElement; clip; clip = clip.parentElement) {
                if (getComputedStyle(clip).overflowY === 'visible') continue;
                const edge = clip.getBoundingClientRect();
                top = Math.max(top, edge.top); bottom = Math.min(bottom, edge.bottom);
                left = Math.max(left, edge.left); right = Math.min(right, edge.right);
            }
            if (bottom <= top || right <= left) return false;
            return element.contains(document.elementFromPoint((left + right) / 2, (top + bottom) / 2));
        }"""
    )


def editor(page: Page) -> Locator:
    """The labeling form itself, without the data manager's task list beside it."""
    return page.locator(".lsf-main-view")


def rating_column(page: Page, key: str, agent: int) -> Locator:
    return page.locator(f".{rating_class(key, agent)}")


def rate(page: Page, key: str, agent: int, score: int, rationale: str | None) -> None:
    """Pick ``score`` and, unless ``rationale`` is None, type the rationale under it."""
    column = rating_column(page, key, agent)
    column.locator(f'input[type=radio][name="{score}"]').check()
    if rationale is not None:
        column.locator("textarea").fill(rationale)


def submit(page: Page) -> None:
    page.get_by_role("button", name="Submit current annotation").click()


def checked_ratings(page: Page) -> list[str]:
    """The value of every rating shown as selected.

    Read from the drawn state, not ``input:checked``: Label Studio names each radio input
    after its value, so the browser groups all "0" inputs of the page into one native
    radio group and only the last one clicked keeps the native flag.
    """
    return page.locator(".sotopia-rating .ant-radio-wrapper-checked input").evaluate_all(
        "inputs => inputs.map(input => input.name)"
    )


def screenshot_whole_form(page: Page, path: Path) -> None:
    """Label Studio scrolls the form inside a panel, so grow the window to fit it first."""
    height = page.evaluate(
        """() => Math.max(...[...document.querySelectorAll('*')]
            .filter(el => /auto|scroll/.test(getComputedStyle(el).overflowY))
            .map(el => el.scrollHeight))"""
    )
    page.set_viewport_size({"width": VIEWPORT["width"], "height": height + 200})
    page.wait_for_timeout(500)
    path.parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(path), full_page=True)
    page.set_viewport_size(VIEWPORT)


def form_outline(page: Page) -> list[list[object]]:
    """The labeling form as a reader meets it, top to bottom: each heading's text, each rating
    (the control's column and its choices) and each text box (its name and placeholder)."""
    return page.locator(".sotopia-columns").first.evaluate(
        """form => [...form.querySelectorAll('h1, h2, h3, h4, h5, h6, .lsf-choices, textarea')]
            .map(element => {
                if (element.matches('textarea')) return ['text', element.name, element.placeholder];
                if (element.matches('.lsf-choices')) return ['rating',
                    element.closest('.sotopia-rating').className,
                    [...element.querySelectorAll('label')].map(label => label.innerText.trim())];
                return ['heading', element.innerText.trim()];
            })"""
    )
