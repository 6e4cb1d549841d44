"""A researcher adds a statistic to the report as one section object, and reads Gwet's AC1/AC2
there: the coefficients built for scales piled at one end, as irrCAC computes them."""

from __future__ import annotations

import subprocess
import sys

import pandas as pd
import pytest

from sotopia_ls.exporter import Tally
from sotopia_ls.exporter.page import note, section, table
from sotopia_ls.exporter.report import build_report
from sotopia_ls.exporter.sections import SECTIONS, Section

from conftest import read_study


@pytest.fixture(scope="module")
def study(sample_data) -> pd.DataFrame:
    return read_study(sample_data)


def no_model() -> pd.DataFrame:
    return pd.DataFrame(columns=["episode_id", "agent", "dimension", "score", "evaluator"])


def ratings_per_dimension(inputs, results) -> pd.DataFrame:
    return inputs.long.groupby("dimension", sort=False).size().reset_index(name="ratings")


TOY = Section(
    "ratings_per_dimension", ratings_per_dimension,
    lambda result, report, text: section("Ratings per dimension", note(text), table(result)),
    note="How many ratings each dimension received.",
)


def test_a_new_statistic_is_one_section_object_computed_written_and_shown(study, tmp_path):
    report = build_report(study, no_model(), Tally(), bootstrap=0, sections=SECTIONS + (TOY,))
    assert report.ratings_per_dimension["ratings"].tolist() == [170] * 7

    page = report.write(tmp_path / "report")
    written = pd.read_csv(page.parent / "ratings_per_dimension.csv")
    assert written.to_dict("records")[0] == {"dimension": "believability", "ratings": 170}
    html = page.read_text()
    shown = html.split("<h2>Ratings per dimension</h2>")[1]
    assert shown.startswith('<p class="note">How many ratings each dimension received.</p>')
    assert "<td>believability</td>" in shown and "<td>170</td>" in shown
    # In the order of the list: after every section of the default report.
    assert html.index("<h2>Goal (0 to 10)</h2>") < html.index("<h2>Ratings per dimension</h2>")

    default = build_report(study, no_model(), Tally(), bootstrap=0)
    assert "ratings_per_dimension" not in default.tables()


def test_importing_the_report_sets_up_no_plotting_until_a_plot_is_drawn():
    program = ("import sys\nimport sotopia_ls.exporter.report\n"
               "print(sorted(name for name in sys.modules if name.startswith('matplotlib')))")
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                          check=True, timeout=120)
    assert done.stdout == "[]\n"
