"""The report is one self-contained HTML file a researcher can open anywhere."""

from __future__ import annotations

import pandas as pd
import pytest

from sotopia_ls.dimensions import DIMENSIONS
from sotopia_ls.exporter import Tally
from sotopia_ls.exporter.report import build_report

from test_agreement import study_long


@pytest.fixture(scope="module")
def study(sample_data) -> pd.DataFrame:
    csvs = sorted((sample_data / "human_eval").glob("*_final.csv"))
    return study_long(pd.concat([pd.read_csv(p) for p in csvs], ignore_index=True))


def first_annotator_as_model(long: pd.DataFrame) -> pd.DataFrame:
    first = long.sort_values("annotation_id").drop_duplicates(["episode_id", "agent", "dimension"])
    return first[["episode_id", "agent", "dimension", "score"]].assign(evaluator="gpt-4")


@pytest.fixture(scope="module")
def page(study, tmp_path_factory):
    tally = Tally(tasks=42, total=86, exported=85, rejected=0, cancelled=1)
    out = tmp_path_factory.mktemp("report")
    return build_report(study, first_annotator_as_model(study), tally).write(out)


def test_one_file_holds_every_section_table_and_plot(page):
    html = page.read_text()
    # Seven score distributions and one human-vs-model scatter, all inline.
    assert html.count('<img alt="plot" src="data:image/png;base64,') == 8
    assert "<script" not in html and "http://" not in html and "https://" not in html
    assert "86 annotations = 85 exported + 0 rejected + 1 cancelled/skipped ✔" in html
    for dimension in DIMENSIONS:
        assert f"<h2>{dimension.label} ({dimension.range_text})</h2>" in html
    for section in ("Agreement per dimension", "Human vs model", "Qualification", "Annotators"):
        assert f"<h2>{section}</h2>" in html
    assert {p.name for p in page.parent.iterdir()} == {
        "report.html", "agreement.csv", "human_vs_model.csv", "annotators.csv"
    }


def test_annotator_names_are_shown_as_text_never_as_markup(study, tmp_path):
    hostile = study.assign(annotator_id='<img src=x onerror="alert(1)">')
    html = build_report(hostile, first_annotator_as_model(study), Tally()).write(tmp_path)
    text = html.read_text()
    assert "<img src=x" not in text
    assert "&lt;img src=x onerror=" in text


@pytest.mark.browser
def test_the_report_opens_in_chromium_with_every_plot_drawn(page, tmp_path):
    from browser import CHROMIUM, chromium_page

    if not CHROMIUM.exists():
        pytest.skip("Debian chromium is not installed")
    with chromium_page() as browser_page:
        browser_page.goto(page.as_uri())
        drawn = browser_page.locator("img").evaluate_all(
            "images => images.map(image => image.complete && image.naturalWidth > 0)"
        )
        assert drawn == [True] * 8
        headings = browser_page.locator("h2").all_inner_texts()
        assert [d.label for d in DIMENSIONS] == [h.split(" (")[0] for h in headings[-7:]]
        browser_page.screenshot(path=str(tmp_path / "report.png"), full_page=True)
