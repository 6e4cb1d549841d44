"""A researcher reads the report of a pilot on a 1440 px laptop screen: five episodes rated by
two people, two judges, and a long source tag, as a newcomer's first study gives them."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from conftest import read_study
from sotopia_ls.exporter import Tally
from sotopia_ls.report.build import Report, build_report
from sotopia_ls.report.plots import pyplot, scatter_chart

pytestmark = pytest.mark.report

TAG = "otree_pilot_2026-11_gpt-4o-mini-2024-07-18_vs_Meta-Llama-3.1-8B-Instruct-Turbo"
WINDOW = {"width": 1440, "height": 900}
PILOT = 5  # episodes people rated


@pytest.fixture(scope="module")
def pilot(sample_data) -> Report:
    """Two annotators on each of five sample episodes; one judge scores a point above the
    first of them, the other at random."""
    study = read_study(sample_data)
    episodes = sorted(study["episode_id"].unique())[:PILOT]
    rated = study[study["episode_id"].isin(episodes)]
    firsts = rated.groupby("episode_id")["annotation_id"].unique().map(lambda ids: sorted(ids)[:2])
    names = {annotation: f"annotator-{k + 2}" for ids in firsts for k, annotation in enumerate(ids)}
    long = rated[rated["annotation_id"].isin(names)].assign(
        annotator_id=lambda frame: frame["annotation_id"].map(names), source_tag=TAG)
    first = long.sort_values("annotation_id").drop_duplicates(["episode_id", "agent", "dimension"])
    scores = first[["episode_id", "agent", "dimension", "score"]]
    random = np.random.default_rng(0).integers(-3, 4, len(scores))
    judges = pd.concat([scores.assign(evaluator="gpt-4o-mini", score=scores["score"] + 1),
                        scores.assign(evaluator="qwen2.5:7b", score=random)])
    return build_report(long, judges, Tally(), bootstrap=200)


@pytest.mark.browser
def test_the_pilot_report_fits_a_1440_pixel_screen_and_warns_of_its_few_episodes(
        pilot, browser, tmp_path):
    from browser import fresh_page

    page = pilot.write(tmp_path / "report")
    with fresh_page(browser, viewport=WINDOW) as window:
        window.goto(page.as_uri())
        window.screenshot(path=str(tmp_path / "report.png"), full_page=True)
        too_wide = window.evaluate("""() => [...document.querySelectorAll("body *")]
            .filter(e => e.getBoundingClientRect().right > 1440
                         || e.scrollWidth > e.clientWidth + 1 && e.clientWidth > 0)
            .map(e => e.tagName + " " + e.scrollWidth + " in " + e.clientWidth + " px, "
                      + e.closest("section")?.querySelector("h2")?.textContent)""")
        plots = window.evaluate("""() => [...document.querySelectorAll(".grid img")]
            .map(i => i.getBoundingClientRect().toJSON())""")
        warning = window.locator(".flag", has_text="Only 5 episodes").first.inner_text()

    assert too_wide == []
    # The seven per-annotator plots stand three in a row, all within a window and a half.
    assert len(plots) == 7
    assert all(plot["width"] <= WINDOW["width"] / 3 for plot in plots)
    assert max(p["bottom"] for p in plots) - min(p["top"] for p in plots) <= 1.5 * WINDOW["height"]
    assert "fewer than 30" in warning


def test_the_judges_legend_covers_no_tick_label(pilot):
    """Every panel's drawn extent (matplotlib's tight box: tick labels, title, axis labels)
    stays clear of the legend."""
    figure = scatter_chart(pilot.paired)
    renderer = figure.canvas.get_renderer()
    figure.draw(renderer)
    (legend,) = figure.legends
    box = legend.get_window_extent(renderer)
    panels = [axis.get_tightbbox(renderer) for axis in figure.axes if axis.get_visible()]
    pyplot().close(figure)
    assert len(panels) == 8 and not [panel for panel in panels if box.overlaps(panel)]


def test_the_warning_is_only_for_a_study_of_fewer_than_thirty_episodes(pilot, sample_data):
    whole = build_report(read_study(sample_data), pilot.inputs.model_scores.iloc[:0], Tally(),
                         bootstrap=20)
    assert whole.inputs.units["episode_id"].nunique() >= 30
    assert "with fewer than 30" not in whole.html()
    assert "with fewer than 30" in pilot.html()
