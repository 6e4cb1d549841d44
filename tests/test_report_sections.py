"""A researcher adds a statistic to the report as one section object, and reads Gwet's AC1/AC2
there: the coefficients built for scales piled at one end, as irrCAC computes them."""

from __future__ import annotations

import subprocess
import sys

import pandas as pd
import pytest
from irrCAC.raw import CAC
from irrCAC.weights import Weights

from sotopia_ls.dimensions import DIMENSIONS, RUBRIC
from sotopia_ls.exporter import Tally
from sotopia_ls.report.build import build_report
from sotopia_ls.report.page import note, section, table
from sotopia_ls.report.sections import SECTIONS, Section
from sotopia_ls.statistics.bootstrap import Bootstrap, Draw
from sotopia_ls.statistics.gwet import resampled_coefficients
from sotopia_ls.statistics.reliability import category_counts

from conftest import read_study, sections_named

pytestmark = pytest.mark.report


@pytest.fixture(scope="module")
def study(sample_data) -> pd.DataFrame:
    return read_study(sample_data)


def no_model() -> pd.DataFrame:
    return pd.DataFrame(columns=["episode_id", "agent", "dimension", "score", "evaluator"])


def ratings_per_dimension(inputs, results) -> pd.DataFrame:
    return inputs.long.groupby("dimension", sort=False).size().reset_index(name="ratings")


TOY = Section(
    "ratings_per_dimension", ratings_per_dimension,
    lambda result, needed, inputs, text: section("Ratings per dimension", note(text),
                                                 table(result)),
    note="How many ratings each dimension received.",
)


def most_rated(inputs, needed) -> str:
    agreement = needed["agreement"]
    return agreement.loc[agreement["ratings"].idxmax(), "dimension"]


def shown_most_rated(result, needed, inputs, text) -> str:
    assert set(needed) == {"agreement"}
    return section("Most rated", note(result))


MOST_RATED = Section("most_rated", most_rated, shown_most_rated, table=False, needs=("agreement",))


@pytest.fixture(scope="module")
def extended(study):
    """The default report with both sections above added at its end (read, never changed)."""
    return build_report(study, no_model(), Tally(), bootstrap=0,
                        sections=SECTIONS + (TOY, MOST_RATED))


@pytest.fixture(scope="module")
def extended_page(extended, tmp_path_factory):
    return extended.write(tmp_path_factory.mktemp("extended") / "report")


def test_a_new_statistic_is_one_section_object_computed_written_and_shown(study, extended,
                                                                           extended_page):
    assert extended.ratings_per_dimension["ratings"].tolist() == [170] * 7

    written = pd.read_csv(extended_page.parent / "ratings_per_dimension.csv")
    assert written.to_dict("records")[0] == {"dimension": "believability", "ratings": 170}
    html = extended_page.read_text()
    shown = html.split("<h2>Ratings per dimension</h2>")[1].split("<h2>")[0]
    assert shown.startswith('<p class="note">How many ratings each dimension received.</p>')
    assert "<td>believability</td>" in shown and "<td>170</td>" in shown
    # In the order of the list: after every section of the default report.
    assert html.index("<h2>Goal (0 to 10)</h2>") < html.index("<h2>Ratings per dimension</h2>")

    default = build_report(study, no_model(), Tally(), bootstrap=0)
    assert "ratings_per_dimension" not in default.tables()


def test_a_section_reads_only_the_earlier_sections_it_names_and_the_list_is_checked(
        study, extended, extended_page):
    """A section gets the results it declares in ``needs``; a list without one of them, or
    with it later, is refused when the report is built, not halfway through the page."""
    assert extended.most_rated == "believability"
    assert '<h2>Most rated</h2><p class="note">believability</p>' in extended_page.read_text()

    without_paired = tuple(s for s in SECTIONS if s.name != "paired")
    with pytest.raises(ValueError, match="'human_vs_model' needs paired, which must come "
                                         "before it"):
        build_report(study, no_model(), Tally(), bootstrap=0, sections=without_paired)
    with pytest.raises(ValueError, match="'most_rated' needs agreement"):
        build_report(study, no_model(), Tally(), bootstrap=0, sections=(MOST_RATED, *SECTIONS))


def test_importing_the_report_sets_up_no_plotting_until_a_plot_is_drawn():
    program = ("import sys\nimport sotopia_ls.report.build\n"
               "print(sorted(name for name in sys.modules if name.startswith('matplotlib')))")
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                          check=True, timeout=120)
    assert done.stdout == "[]\n"


def rater_table(ratings: pd.DataFrame) -> pd.DataFrame:
    """Units × raters as irrCAC reads them: one row per agent of an episode, its ratings in
    the order they were given, NaN where a unit has fewer."""
    multi = ratings[ratings.groupby(["episode_id", "agent"])["score"].transform("size") >= 2]
    multi = multi.sort_values("annotation_id")
    return multi.assign(rater=multi.groupby(["episode_id", "agent"]).cumcount()).pivot(
        index=["episode_id", "agent"], columns="rater", values="score")


@pytest.fixture(scope="module")
def gwet_report(study):
    return build_report(study, no_model(), Tally(), bootstrap=200, sections=sections_named("gwet"))


def test_gwet_ac1_and_ac2_are_irrcacs_own_figures_on_the_sample_ratings(study, gwet_report):
    """AC1 unweighted, AC2 with ordinal weights, every score the rubric allows a category."""
    figures = gwet_report.gwet.set_index("dimension")
    differs = []
    for dimension in DIMENSIONS:
        ratings = rater_table(study[study["dimension"] == dimension.key])
        for column, weights in (("ac1", "identity"), ("ac2", "ordinal")):
            own = CAC(ratings, weights=weights, categories=dimension.values).gwet()
            assert figures.loc[dimension.key, column] == pytest.approx(
                own["est"]["coefficient_value"], abs=5e-5), (dimension.key, column)
            if ratings.stack().nunique() > 1:  # the library needs two categories observed
                observed = CAC(ratings, weights=weights).gwet()["est"]["coefficient_value"]
                differs.append(observed != own["est"]["coefficient_value"])
        assert figures.loc[dimension.key, "categories"] == len(dimension.values)
    # The scores no one gave change the figures: the rubric's categories are the ones used.
    assert any(differs)


def test_gwet_intervals_resample_the_episodes_as_alphas_do(study, gwet_report):
    """Each resample's coefficients are irrCAC's on the resampled ratings, every drawn copy of
    an episode a unit of its own; the intervals come from the resamples α's come from."""
    goal = RUBRIC["goal"]
    ratings = rater_table(study[study["dimension"] == "goal"])
    episodes = pd.Index(sorted(study["episode_id"].unique()))
    (draws,) = Bootstrap(resamples=3, seed=11).weights(len(episodes))
    long = ratings.stack().rename("score").reset_index()
    counts = category_counts(long, long["score"], goal.values)
    weights = [Weights(goal.values)[name] for name in ("identity", "ordinal")]
    where = episodes.get_indexer(ratings.index.get_level_values("episode_id"))
    replicates = resampled_coefficients(counts, weights, Draw(draws, where))
    for drawn, figures in zip(draws, replicates):
        copies = ratings.loc[ratings.index.repeat(drawn[where])].reset_index(drop=True)
        library = [CAC(copies, weights=name, categories=goal.values, digits=15).gwet()
                   ["est"]["coefficient_value"] for name in ("identity", "ordinal")]
        assert figures == pytest.approx(library, abs=1e-9)

    table = gwet_report.gwet
    assert (table["bootstrap_resamples"] == 200).all() and (table["bootstrap_seed"] == 0).all()
    for name in ("ac1", "ac2"):
        assert (table[f"{name}_ci_low"] <= table[name]).all()
        assert (table[name] <= table[f"{name}_ci_high"]).all()


def test_the_gwet_section_says_why_it_is_there(gwet_report, tmp_path):
    page = gwet_report.write(tmp_path / "report")
    shown = page.read_text().split("<h2>Gwet&#x27;s AC1 and AC2</h2>")[1].split("<h2>")[0]
    assert "Sotopia-π binarized its scores to get a usable α" in shown
    assert "secret and social_rules" in shown and "irrCAC" in shown
    social = gwet_report.gwet.set_index("dimension").loc["social_rules"]
    assert (f"<td>{social['ac1']:.3f} <span class=\"ci\">[{social['ac1_ci_low']:.3f}, "
            f"{social['ac1_ci_high']:.3f}]</span></td>") in shown
    written = pd.read_csv(page.parent / "gwet.csv")
    assert written["dimension"].tolist() == [d.key for d in DIMENSIONS]
