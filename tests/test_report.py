"""The report is one self-contained HTML file a researcher can open anywhere."""

from __future__ import annotations

import base64
import html
import io
import re
from pathlib import Path

import pandas as pd
import pytest

from sotopia_ls.dimensions import DIMENSIONS
from sotopia_ls.exporter import Tally
from sotopia_ls.exporter.commands import report_command
from sotopia_ls.report.build import build_report
from sotopia_ls.report.plots import ALPHA_CHART_ALT, DPI, alpha_chart, png, pyplot

from conftest import invoke, read_study, sections_named

pytestmark = pytest.mark.report


@pytest.fixture(scope="module")
def study(sample_data) -> pd.DataFrame:
    return read_study(sample_data)


def first_annotator_as_model(long: pd.DataFrame) -> pd.DataFrame:
    first = long.sort_values("annotation_id").drop_duplicates(["episode_id", "agent", "dimension"])
    return first[["episode_id", "agent", "dimension", "score"]].assign(evaluator="gpt-4")


@pytest.fixture(scope="module")
def report(study):
    tally = Tally(tasks=42, total=86, exported=85, rejected=0, cancelled=1)
    return build_report(study, first_annotator_as_model(study), tally)


@pytest.fixture(scope="module")
def page(report, tmp_path_factory):
    return report.write(tmp_path_factory.mktemp("report"))


def rows_of(html: str, first_cells: str) -> list[str]:
    """The table rows that start with ``first_cells``, as text with cells joined by "|"."""
    rows = [
        "|".join(re.sub(r"<[^>]+>", "", cell).strip()
                 for cell in re.findall(r"<t[dh][^>]*>(.*?)</t[dh]>", row, flags=re.S))
        for row in re.findall(r"<tr[^>]*>(.*?)</tr>", html, flags=re.S)
    ]
    found = [row for row in rows if row.startswith(first_cells)]
    assert found, f"no row starts with {first_cells!r}"
    return found


def test_one_file_holds_every_section_table_and_plot(page):
    html = page.read_text()
    # Seven score distributions and one human-vs-model scatter, all inline.
    assert html.count('<img alt="plot" src="data:image/png;base64,') == 8
    assert "<script" not in html and "http://" not in html and "https://" not in html
    assert "86 annotations = 85 exported + 0 rejected + 1 cancelled/skipped ✔" in html
    for dimension in DIMENSIONS:
        assert f"<h2>{dimension.label} ({dimension.range_text})</h2>" in html
    for section in ("Agreement per dimension", "Agreement by model pair",
                    "Agreement by agent position", "Comparable with Sotopia-π",
                    "Gwet&#x27;s AC1 and AC2", "Human vs model",
                    "Model against the spread between humans", "Can the judge replace a person?",
                    "Each agent model&#x27;s scores",
                    "Qualification", "Annotators"):
        assert f"<h2>{section}</h2>" in html
    assert {p.name for p in page.parent.iterdir()} == {
        "report.html", "audit.csv", "model_coverage.csv", "agreement.csv",
        "agreement_breakdown.csv", "gwet.csv", "human_vs_model.csv", "model_vs_human_noise.csv",
        "agent_model_scores.csv", "agent_model_differences.csv", "alt_test.csv",
        "annotators.csv",
    }


def test_agreement_figures_carry_their_bootstrap_interval_and_how_it_was_drawn(report, page):
    html = page.read_text()
    goal = report.agreement.set_index("dimension").loc["goal"]
    assert (f"goal|84|170|3|{goal['alpha']:.3f} [{goal['alpha_ci_low']:.3f}, "
            f"{goal['alpha_ci_high']:.3f}]|{goal['icc1']:.3f} [") in rows_of(html, "goal|84")[0]
    assert ("95% percentile bootstrap intervals from 1000 resamples of the 42 episodes (both "
            "agents of an episode move together), seed 0") in html
    assert "ICC(1,k) = " in html and "icc1k [95% CI]" in html
    for table in ("agreement", "agreement_breakdown", "human_vs_model", "model_vs_human_noise"):
        saved = pd.read_csv(page.parent / f"{table}.csv")
        assert (saved["bootstrap_resamples"] == 1000).all() and (saved["bootstrap_seed"] == 0).all()


def test_near_constant_secret_is_flagged_on_every_figure_that_looks_perfect(page):
    html = page.read_text()
    secret = rows_of(html, "secret|84")[0]
    assert secret.count("1.000 ⚠") == 3  # pairs exact, pairs within ±2, κ
    assert "– ⚠" in secret  # α and ICC: undefined
    assert "Near-constant ratings (⚠)" in html
    assert "near-constant: none of these measures agreement" in html


def test_the_breakdown_shows_believability_agreement_per_model_pair(report, page):
    html = page.read_text()
    pairs = report.agreement_breakdown.set_index(["breakdown", "group", "dimension"])
    for pair in ("gpt3.5", "mistral"):
        alpha = pairs.loc[("model pair", pair, "believability"), "alpha"]
        assert rows_of(html, f"{pair}|believability")[0].split("|")[4].startswith(f"{alpha:.3f} [")
    assert rows_of(html, "agent 2|goal")


def test_the_sotopia_pi_columns_say_which_divisor_they_used(page):
    html = page.read_text()
    assert "commit 5756713" in html
    assert rows_of(html, "financial_and_material_benefits|84|170|5|3|")
    assert "Sotopia's" not in html  # no measure is named for Sotopia unless it is theirs


def test_the_model_is_placed_against_the_spread_between_humans(report, page):
    noise = report.model_vs_human_noise.set_index("dimension")
    # The "model" is one of the two annotators, so it is closer to the others than a human.
    assert noise.loc["goal", "verdict"] == "closer than a human"
    assert rows_of(page.read_text(), "gpt-4|goal|84|170|")[-1].endswith("|closer than a human")


def test_the_same_seed_gives_the_same_report_and_another_seed_other_intervals(study, report):
    model = first_annotator_as_model(study)
    again = build_report(study, model, Tally(), seed=0)
    for name, table in report.tables().items():
        pd.testing.assert_frame_equal(again.tables()[name], table)
    agreement = sections_named("agreement")
    other = build_report(study, model, Tally(), seed=7, sections=agreement).agreement
    assert not other["alpha_ci_low"].equals(report.agreement["alpha_ci_low"])
    without = build_report(study, model, Tally(), bootstrap=0, sections=agreement).agreement
    assert without["alpha_ci_low"].isna().all()
    assert without["alpha"].equals(report.agreement["alpha"])


def test_the_command_records_its_resamples_and_seed(export_file, tmp_path):
    out = tmp_path / "report"
    result = invoke(report_command, "--from-file", str(export_file), "-o", str(out),
                    "--bootstrap", "50", "--seed", "3")
    assert result.exit_code == 0, result.output
    agreement = pd.read_csv(out / "agreement.csv")
    assert (agreement["bootstrap_resamples"] == 50).all()
    assert (agreement["bootstrap_seed"] == 3).all()
    assert "from 50 resamples of the 3 episodes" in (out / "report.html").read_text()


def test_annotator_names_are_shown_as_text_never_as_markup(study, tmp_path):
    hostile = study.assign(annotator_id='<img src=x onerror="alert(1)">',
                           source_tag="<b>pair</b>")
    html = build_report(hostile, first_annotator_as_model(study), Tally(),
                        bootstrap=20).write(tmp_path)
    text = html.read_text()
    assert "<img src=x" not in text and "<b>pair" not in text
    assert "&lt;img src=x onerror=" in text and "&lt;b&gt;pair&lt;/b&gt;" in text


@pytest.mark.browser
def test_the_report_opens_in_chromium_with_every_plot_drawn(page, browser, tmp_path):
    from browser import fresh_page

    with fresh_page(browser) as browser_page:
        browser_page.goto(page.as_uri())
        drawn = browser_page.locator("img").evaluate_all(
            "images => images.map(image => image.complete && image.naturalWidth > 0)"
        )
        # α per dimension, human vs model, each agent model's scores, seven distributions
        assert drawn == [True] * 10
        headings = browser_page.locator("h2").all_inner_texts()
        assert [d.label for d in DIMENSIONS] == [h.split(" (")[0] for h in headings[-7:]]
        browser_page.screenshot(path=str(tmp_path / "report.png"), full_page=True)


def test_the_report_says_how_many_episodes_had_a_model_score_and_why_a_figure_is_blank(
    study, tmp_path
):
    """One episode of 42 has a model evaluation: the comparison says so, and its correlations
    are blank for a reason the page gives, not left unexplained."""
    model = first_annotator_as_model(study)
    one = model[model["episode_id"] == model["episode_id"].iloc[0]]
    report = build_report(study, one, Tally(), bootstrap=0,
                          sections=sections_named("model_coverage", "paired", "human_vs_model"))
    html = report.write(tmp_path / "report").read_text()
    assert "1 of 42 rated episodes (2 of 84 episode × agent units) carry a model evaluation" in html
    assert "blank (–) with fewer than 3 paired units" in html
    assert report.human_vs_model["pearson"].isna().all()
    coverage = report.model_coverage.set_index("dimension")
    assert (coverage["units"] == 84).all() and (coverage["units_with_model"] == 2).all()


def test_the_agreement_chart_draws_each_dimensions_alpha_within_its_interval(report, page):
    """A forest plot: one row per dimension in rubric order, α as a dot on its bootstrap
    interval; the near-constant Secret is marked and has no dot, its α being undefined."""
    agreement = report.agreement.set_index("dimension").loc[[d.key for d in DIMENSIONS]]
    axis = alpha_chart(report.agreement).axes[0]
    assert [label.get_text() for label in axis.get_yticklabels()] == [
        d.label + (" ⚠" if agreement.loc[d.key, "low_variance"] else "") for d in DIMENSIONS]
    ends = [value for line in axis.collections[0].get_segments()
            for value in ((line[0][0], line[1][0]) if len(line) else (float("nan"),) * 2)]
    expected = [value for pair in zip(agreement["alpha_ci_low"], agreement["alpha_ci_high"])
                for value in pair]  # an undefined α has no interval, nor a line
    assert ends == pytest.approx(expected, nan_ok=True)
    (dots,) = [line for line in axis.lines if line.get_marker() == "o"]
    assert list(dots.get_xdata()) == pytest.approx(list(agreement["alpha"]), nan_ok=True)
    section = page.read_text().split("<h2>Agreement per dimension</h2>")[1].split("<h2>")[0]
    assert f'<img alt="{html.escape(ALPHA_CHART_ALT)}" src="data:image/png;base64,' in section


@pytest.fixture(scope="module")
def full_page(study, tmp_path_factory) -> Path:
    """A report with every table, qualification against reference ratings, review decisions
    and time on task (every fifth rating unmeasured, as if made in Label Studio) included."""
    model = first_annotator_as_model(study)
    decisions = ["approve", "look", "reject", ""]
    reviewed = study.assign(
        review_decision=[decisions[a % 4] for a in study["annotation_id"]],
        visible_minutes=[None if a % 5 == 0 else 3.0 + a % 7 for a in study["annotation_id"]])
    report = build_report(reviewed, model, Tally(), reference=model, bootstrap=100)
    return report.write(tmp_path_factory.mktemp("full") / "report")


@pytest.mark.browser
def test_a_plot_is_cropped_to_the_same_bytes_as_matplotlibs_tight_box(report):
    """``png`` measures the tight box itself to spare savefig a drawing; the image must not
    move by a pixel for it."""
    tight, figure = io.BytesIO(), alpha_chart(report.agreement)
    figure.savefig(tight, format="png", dpi=DPI, bbox_inches="tight")
    pyplot().close(figure)
    assert png(alpha_chart(report.agreement)).endswith(
        f'src="data:image/png;base64,{base64.b64encode(tight.getvalue()).decode()}">')


def test_every_table_fits_a_window_1440_pixels_wide(full_page, browser):
    """No table, plot or line runs past a 1440×900 window or needs a scroll bar of its own:
    long names wrap at their underscores and an interval goes below its estimate."""
    from browser import fresh_page

    with fresh_page(browser, viewport={"width": 1440, "height": 900}) as window:
        window.goto(full_page.as_uri())
        # All but the empty audit; each agent model's scores has two.
        assert window.locator("table").count() == 14
        assert window.evaluate("document.documentElement.scrollWidth") <= 1440
        too_wide = window.evaluate("""() => [...document.querySelectorAll("body *")]
            .filter(e => e.getBoundingClientRect().right > 1440
                         || e.scrollWidth > e.clientWidth + 1 && e.clientWidth > 0)
            .map(e => e.tagName + " " + Math.round(e.getBoundingClientRect().width)
                      + " in " + e.closest("section")?.querySelector("h2")?.textContent)""")
    assert too_wide == []


def test_the_readme_lists_exactly_the_files_the_report_writes(full_page):
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    section = readme.split("### `sotopia-ls report`")[1].split("\n### ")[0]
    listed = set(re.findall(r"^\| `([^`]+)` \|", section, flags=re.M))
    assert listed == {path.name for path in full_page.parent.iterdir()}
