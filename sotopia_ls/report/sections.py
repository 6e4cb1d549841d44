"""The report's sections: each one object that says how it is computed, which earlier sections'
results it reads (``needs``), its table, how it is shown and its note; ``SECTIONS`` lists them
in page order, and no loop knows one by name (README.md, "Sections").
"""

from __future__ import annotations

import html
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import pandas as pd

from ..dimensions import RUBRIC
from ..exporter.accounting import AUDIT_KINDS, Tally
from ..exporter.review import review_table
from ..exporter.tables import gold_rows
from ..extras import missing_extra
from ..labelstudio.tasks import REJECT
from ..statistics import DEFAULT_EPSILON
from ..statistics.agreement import agreement_breakdown, agreement_table
from ..statistics.alttest import ALL_AGENTS, MIN_ITEMS, Verdict, alt_test
from ..statistics.bootstrap import Bootstrap
from ..statistics.comparison import (
    annotator_table,
    human_vs_model,
    model_coverage,
    model_vs_human_noise,
    paired_scores,
    qualification,
)
from ..statistics.gwet import gwet_table
from ..statistics.sotopia_pi import PI_COLUMNS
from ..text import counted
from .page import FLAG, estimate, grid, note, number, section, shown, table
from .plots import (
    ALPHA_CHART_ALT,
    MODEL_CHART_ALT,
    alpha_chart,
    distribution_plot,
    model_chart,
    png,
    scatter_chart,
)
from .time_on_task import time_on_task_table

@dataclass(frozen=True)
class Inputs:
    """What the sections are computed from."""

    long: pd.DataFrame  # the crowd's ratings: scores_long without the reference ratings
    model_scores: pd.DataFrame
    reference: pd.DataFrame | None  # ground-truth and reference-file ratings, if any
    tally: Tally
    audit: pd.DataFrame  # every audit finding of the export (``Finding`` as rows)
    bootstrap: Bootstrap
    # Which scores ``long`` holds, as the page says it: the raters' own, or adjudicated.
    scores: str = "Scores: raw (each rater's own ratings)."
    alt_test_epsilon: float = DEFAULT_EPSILON  # the alternative annotator test's ε

    @cached_property
    def units(self) -> pd.DataFrame:
        """The crowd's ratings that agreement is measured on: without gold episodes' (hidden
        checks rated by any number of participants, which would outweigh the episodes rated
        by k)."""
        return self.long[~gold_rows(self.long)]


Results = Mapping[str, Any]


@dataclass(frozen=True)
class Section:
    """One part of the report.

    ``needs`` names the earlier sections whose results it reads: ``compute(inputs, needed)``
    and ``render(result, needed, inputs, note)`` get those results, and only those, in
    ``needed`` (by name). What compute returns is the section's result, ``report.<name>``.
    With ``table``, a result that is a DataFrame is written as ``<name>.csv`` (a result of None
    writes nothing). render's return is the section's HTML, "" for none.
    """

    name: str
    compute: Callable[[Inputs, Results], Any]
    render: Callable[[Any, Results, Inputs, str], str]
    note: str = ""
    table: bool = True
    needs: tuple[str, ...] = ()


def check_needs(sections: tuple[Section, ...]) -> None:
    """Refuse a list with two sections of one name, or a section before one it needs."""
    names = [listed.name for listed in sections]
    if len(set(names)) != len(names):
        raise ValueError(f"two report sections share a name: {', '.join(names)}")
    for position, listed in enumerate(sections):
        missing = [need for need in listed.needs if need not in names[:position]]
        if missing:
            raise ValueError(f"the report section {listed.name!r} needs {', '.join(missing)}, "
                             "which must come before it in the list of sections")


def needed_by(section: Section, results: Results) -> Results:
    """The results of the sections ``section`` needs, by name."""
    return {name: results[name] for name in section.needs}


def earlier(name: str) -> Callable[[Inputs, Results], Any]:
    """A compute that takes the result of an earlier section (which the section ``needs``): a
    second view of the same table."""
    return lambda inputs, needed: needed[name]


def shown_nowhere(result: Any, needed: Results, inputs: Inputs, note: str) -> str:
    """For a section whose result another section shows."""
    return ""


# --- the numbers behind the page -------------------------------------------------------------

# Figures that read as high agreement on a near-constant dimension without measuring any.
FLAGGED_COLUMNS = ("alpha", "icc1", "icc1k", "pairs_exact", "pairs_within_2",
                   "randolph_kappa_rubric_binary", *PI_COLUMNS[1:])
BREAKDOWN_SHOWN = ["group", "dimension", "units", "ratings", "alpha", "icc1", "icc1k",
                   "pairs_exact", "pairs_within_2", "randolph_kappa_rubric_binary"]
# The fewest episodes a reliability study should rate (Koo & Li 2016, J. Chiropr. Med. 15:155,
# ask for at least 30 heterogeneous samples for an ICC); below it the report warns.
FEW_EPISODES = 30
BREAKDOWNS = (("model pair", "Agreement by model pair",
               "model pair (the episodes' source tag, else their models)"),
              ("agent", "Agreement by agent position", "agent position"))


def bootstrap_note(inputs: Inputs) -> str:
    resampling = inputs.bootstrap
    if resampling.resamples <= 0:
        return note("No bootstrap intervals were drawn (--bootstrap 0).")
    return small_sample_warning(inputs.units["episode_id"].nunique()) + note(
        f"[low, high]: {resampling.level:.0%} percentile bootstrap intervals from "
        f"{resampling.resamples} resamples of the {inputs.units['episode_id'].nunique()} "
        f"episodes (both agents of an episode move together), seed {resampling.seed}; "
        f"--bootstrap {resampling.resamples} --seed {resampling.seed} reproduces them."
    )


def small_sample_warning(episodes: int) -> str:
    """A warning above intervals drawn from fewer episodes than a reliability study needs."""
    if episodes >= FEW_EPISODES:
        return ""
    return (f'<p class="flag">{FLAG} Only {counted(episodes, "episode")} with two raters or '
            f"more: with fewer than {FEW_EPISODES}, these figures and their intervals are "
            "unstable (an ICC's interval can reach far below 0, where no reliability lies): "
            "read them as a pilot's, not as the study's result.</p>")


def _flag_note(agreement: pd.DataFrame) -> str:
    flagged = agreement.loc[agreement["low_variance"], "dimension"].tolist()
    if not flagged:
        return ""
    return (f'<p class="flag">Near-constant ratings ({FLAG}): α is undefined or meaningless, '
            "and κ, the pair shares and Sotopia-π's figures are high only because there is "
            f'nothing to disagree about: {html.escape(", ".join(flagged))}</p>')


def _annotations(tally: Tally, needed: Results, inputs: Inputs, _: str) -> str:
    return section(
        "Annotations",
        note(tally.reconciliation() + (" ✔" if tally.balanced else " ✘ does not add up")),
        note(f"{tally.tasks} tasks; {tally.duplicates} duplicate annotations (same annotator, "
             f"same task) refused; {tally.drafts} unsubmitted drafts ignored; "
             f"{tally.ground_truth} ground-truth annotations used as reference."),
        _gold_note(inputs.long),
        _added_slot_note(inputs.long),
        note(inputs.scores),
    )


def _gold_note(long: pd.DataFrame) -> str:
    """How many annotations of gold episodes the crowd's ratings hold, counted apart."""
    gold = long[gold_rows(long)]
    if gold.empty:
        return ""
    return note(f"{counted(gold['annotation_id'].nunique(), 'annotation')} of "
                f"{counted(gold['episode_id'].nunique(), 'gold episode')} (a study's hidden "
                "checks with reference ratings, each rated by any number of participants: the "
                "gold column) are left out of agreement (α, ICC, Gwet's coefficients and the "
                "model-vs-human-noise units); the other sections include them.")


def _added_slot_note(long: pd.DataFrame) -> str:
    """How many annotations were rated on slots a study's adaptive extra raters added."""
    if "added_slot" not in long:  # scores_long made before the column
        return ""
    added = long[long["added_slot"].astype(bool)]
    if added.empty:
        return ""
    return note(f"{counted(added['annotation_id'].nunique(), 'annotation')} of "
                f"{counted(added['episode_id'].nunique(), 'episode')} came from slots the "
                "study added because the episode's raters disagreed (adaptive extra raters: "
                "the added_slot column); they count in agreement like every other rating.")


def _audit(audit: pd.DataFrame, needed: Results, inputs: Inputs, text: str) -> str:
    counts = audit["kind"].value_counts() if len(audit) else pd.Series(dtype=int)
    lines = ", ".join(f"{kind.replace('_', ' ')}: {int(counts.get(kind, 0))}"
                      for kind in AUDIT_KINDS)
    first = audit.head(50)
    return section("Study integrity", note(text), note(lines), table(first) if len(first) else "")


def _review(decided: pd.DataFrame | None, needed: Results, inputs: Inputs, text: str) -> str:
    if decided is None:  # no annotation carries a decision: nothing to show
        return ""
    excluded = inputs.tally.excluded
    marked = int(decided.loc[decided["decision"] == REJECT, "annotations"].sum())
    if excluded:
        said = (f"{counted(excluded, 'annotation')} marked reject left out of every table and "
                "figure of this report (--exclude-rejected).")
    elif marked:
        said = (f"{counted(marked, 'annotation')} marked reject kept in every table and figure "
                "of this report; export with --exclude-rejected to leave them out.")
    else:
        said = ""
    return section("Review decisions", note(text), note(said) if said else "", table(decided))


def _agreement(agreement: pd.DataFrame, needed: Results, inputs: Inputs, text: str) -> str:
    columns = [c for c in agreement.columns if not c.endswith(("_ci_low", "_ci_high"))
               and not c.startswith(("pi_", "bootstrap_"))]
    return section(
        "Agreement per dimension", note(text), bootstrap_note(inputs),
        png(alpha_chart(agreement), ALPHA_CHART_ALT),
        table(shown(agreement, columns, FLAGGED_COLUMNS)), _flag_note(agreement),
    )


def _breakdown(breakdown: pd.DataFrame, needed: Results, inputs: Inputs, text: str) -> str:
    return "".join(
        section(title, note(text.format(what=what)),
                table(shown(breakdown[breakdown["breakdown"] == name], BREAKDOWN_SHOWN,
                            FLAGGED_COLUMNS)))
        for name, title, what in BREAKDOWNS
    )


def _pi_view(inputs: Inputs, needed: Results) -> pd.DataFrame:
    agreement = needed["agreement"]
    return agreement.assign(
        rubric_max_abs=[RUBRIC[key].max_abs for key in agreement["dimension"]],
        pi_divisor=agreement["pi_divisor"].map(lambda v: "–" if pd.isna(v) else f"{v:g}"),
    )


def _sotopia_pi(pi: pd.DataFrame, needed: Results, inputs: Inputs, text: str) -> str:
    return section("Comparable with Sotopia-π", note(text), table(shown(
        pi, ["dimension", "units", "ratings", "rubric_max_abs", *PI_COLUMNS], FLAGGED_COLUMNS)))


def _gwet(coefficients: pd.DataFrame, needed: Results, inputs: Inputs, text: str) -> str:
    return section("Gwet's AC1 and AC2", note(text), bootstrap_note(inputs), table(shown(
        coefficients, ["dimension", "units", "ratings", "categories", "ac1", "ac2"])))


def _coverage_note(coverage: pd.DataFrame, paired: pd.DataFrame, long: pd.DataFrame) -> str:
    """How many episodes and units have a model score, and why a figure may be blank."""
    episodes = int(long["episode_id"].nunique())
    with_model = int(paired["episode_id"].nunique()) if not paired.empty else 0
    units = int(coverage["units"].max()) if len(coverage) else 0
    paired_units = int(coverage["units_with_model"].max()) if len(coverage) else 0
    return note(
        f"{with_model} of {episodes} rated episodes ({paired_units} of {units} episode × agent "
        "units) carry a model evaluation (a stored Sotopia evaluation, a judge's from sotopia-ls "
        "evaluate, or with --with-predictions a backend's prediction); the others are left out "
        "of this section. "
        "A correlation is blank (–) with fewer than 3 paired units, or where the human means or "
        "the model's scores do not vary."
    )


def _human_vs_model(comparison: pd.DataFrame, needed: Results, inputs: Inputs,
                    text: str) -> str:
    paired = needed["paired"]
    coverage = _coverage_note(needed["model_coverage"], paired, inputs.long)
    if paired.empty:
        return section("Human vs model", coverage, note(
            "No rated episode in this export has a model evaluation to compare with."))
    return section(
        "Human vs model", coverage, note(text), bootstrap_note(inputs),
        table(shown(comparison, ["evaluator", "dimension", "n", "pearson", "pearson_p",
                                 "spearman", "spearman_p", "mse", "bias"])),
        png(scatter_chart(paired)),
    )


def _noise(noise: pd.DataFrame, needed: Results, inputs: Inputs, text: str) -> str:
    if needed["paired"].empty:  # no model evaluation: the section above says so
        return ""
    return section("Model against the spread between humans", note(text), table(shown(
        noise, ["evaluator", "dimension", "units", "rows", "human_human_r", "model_human_r",
                "r_difference", "human_human_mad", "model_human_mad", "mad_difference",
                "verdict"])))


def _agent_model_scores(inputs: Inputs, needed: Results) -> pd.DataFrame | None:
    """``statistics.agent_models``' table on the crowd's units and every judge score; None
    without the ppi extra (the section says how to install it)."""
    if missing_extra("ppi", included=False):
        return None
    from ..statistics.agent_models import agent_model_scores  # ppi-python: when installed

    return agent_model_scores(inputs.units, inputs.model_scores)


def _agent_model_differences(inputs: Inputs, needed: Results) -> pd.DataFrame | None:
    scores = needed["agent_model_scores"]
    if scores is None:
        return None
    from ..statistics.agent_models import agent_model_differences

    return agent_model_differences(scores)


MODEL_SCORES_SHOWN = ["agent_model", "dimension", "estimate", "evaluator", "mean", "n",
                      "effective_n"]
MODEL_DIFFERENCES_SHOWN = ["model_a", "model_b", "dimension", "estimate", "evaluator",
                           "difference", "n"]


def _model_scores(differences: pd.DataFrame | None, needed: Results, inputs: Inputs,
                  text: str) -> str:
    scores = needed["agent_model_scores"]
    title = "Each agent model's scores"
    if scores is None:
        return section(title, note(f"This section {missing_extra('ppi', included=False)}."))
    if scores.empty:
        return section(title, note("No unit has a rating or a judge's score."))
    return section(
        title, note(text), png(model_chart(scores), MODEL_CHART_ALT),
        table(shown(scores, MODEL_SCORES_SHOWN)),
        note("The difference between each pair of agent models (model_a − model_b), the same "
             "three ways; its interval takes the two models' intervals as independent."),
        table(shown(differences, MODEL_DIFFERENCES_SHOWN)),
    )


def _alt_test_summary(tested: pd.DataFrame) -> str:
    """Per judge, the dimensions it passes and fails on, over both agents; or how many episodes
    still need a third rater."""
    lines = []
    for judge, rows in tested.groupby("evaluator", sort=True):
        said = [f"{verdict} on {', '.join(rows.loc[rows['verdict'] == verdict, 'dimension'])}"
                for verdict in (Verdict.PASSES, Verdict.FAILS)
                if (rows["verdict"] == verdict).any()]
        short = rows.loc[rows["verdict"] == Verdict.TOO_FEW, "third_raters_needed"]
        if len(short):
            said.append(f"too few items on {counted(len(short), 'dimension')}: "
                        f"{counted(int(short.max()), 'more episode')} need a third rater "
                        f"({MIN_ITEMS} items at the least, 50–100 recommended)")
        lines.append(note(f"{html.escape(judge or 'the judge')}: {'; '.join(said)}."))
    return "".join(lines)


def _alt_test(tested: pd.DataFrame, needed: Results, inputs: Inputs, text: str) -> str:
    if needed["paired"].empty:  # no model evaluation: the human-vs-model section says so
        return ""
    pooled = tested[tested["agent"] == ALL_AGENTS]
    return section(
        "Can the judge replace a person?", note(text),
        note(f"ε = {inputs.alt_test_epsilon:g} (--alt-test-epsilon)."),
        _alt_test_summary(pooled),
        table(shown(pooled, ["evaluator", "dimension", "annotators", "items",
                             "annotators_tested", "winning_rate", "advantage_probability",
                             "verdict", "third_raters_needed"])))


def _qualification(passed: pd.DataFrame | None, needed: Results, inputs: Inputs, text: str) -> str:
    if passed is None:
        return section("Qualification", note(
            "No reference ratings (ground-truth annotations or a reference file) were given."))
    return section("Qualification", note(text), table(passed))


def _annotators(annotators: pd.DataFrame, needed: Results, inputs: Inputs, text: str) -> str:
    return section("Annotators", table(annotators))


def _time_on_task(times: pd.DataFrame | None, needed: Results, inputs: Inputs,
                  text: str) -> str:
    if times is None:
        return section("Time on task", note(NO_TIME_ON_TASK_NOTE))
    return section("Time on task", note(text), table(times))


def _dimension_summary(row: pd.Series) -> str:
    def figure(name: str) -> str:
        return estimate(row[name], row.get(f"{name}_ci_low"), row.get(f"{name}_ci_high"))

    summary = (f"α = {figure('alpha')}, ICC(1,1) = {figure('icc1')}, "
               f"ICC(1,k) = {figure('icc1k')}, exact pairs = {number(row['pairs_exact'])}, "
               f"pairs within ±2 = {number(row['pairs_within_2'])}, κ (rubric binary) = "
               f"{number(row['randolph_kappa_rubric_binary'])}, {row['units']} units")
    if row["low_variance"]:
        summary += f" {FLAG} near-constant: none of these measures agreement"
    return summary


def _distributions(agreement: pd.DataFrame, needed: Results, inputs: Inputs, text: str) -> str:
    rows = agreement.set_index("dimension")
    return grid(*(
        section(f"{dimension.label} ({dimension.range_text})",
                note(_dimension_summary(rows.loc[dimension.key])),
                distribution_plot(inputs.long, dimension.key))
        for dimension in RUBRIC.dimensions
    ))


# --- the notes -------------------------------------------------------------------------------

AUDIT_NOTE = (
    "What a study should not have, seen in the export: an annotation last saved by another "
    "user (Label Studio Community lets any annotator edit anyone's), an annotator's repeated "
    "rating of an episode (only the latest counts), a task with more submitted annotations "
    "than the project asks for, an episode found in several tasks. Each is listed in "
    "audit.jsonl and audit.csv with task, annotation and annotator.")
REVIEW_NOTE = (
    "The researchers' decisions from the study review (sotopia-ls study review), per annotation "
    "of the crowd: approve, look (to look at again) or reject, and the annotations not "
    "reviewed. share: of all the crowd's annotations, excluded ones included.")
AGREEMENT_NOTE = (
    "Units are episode × agent with at least two annotators; every rating of a unit is used. "
    "alpha: Krippendorff's α, interval level, on the scores (the headline figure). icc1: "
    "one-way random ICC(1,1), the reliability of one annotator's score; icc1k: ICC(1,k), the "
    "reliability of the mean of icc_k0 annotators, the human mean the model is compared with "
    "(one-way ANOVA, unbalanced design). pairs_exact / pairs_within_2: share of annotator "
    "pairs on a unit giving the same score / scores at most 2 apart, averaged over units. "
    "randolph_kappa_rubric_binary: Randolph's free-marginal κ on round(score / max|rubric "
    "range|), every code the rubric allows counted as a category. std, modal_share: spread "
    "of all ratings."
)
BREAKDOWN_NOTE = (
    "The same figures within each {what}; the intervals resample the episodes of the group."
)
SOTOPIA_PI_NOTE = (
    "Computed as Sotopia-π's human_eval/agreement.py computes them (sotopia-lab/sotopia-pi, "
    "branch feature/add-human-eval-agreement-code, commit 5756713), pooled over model pairs "
    "and both agents, to set this study next to that paper's numbers; they are not the "
    "figures above. Codes: round(score / pi_divisor), pi_divisor being the largest |score| "
    "observed, not the rubric's max|range| (rubric_max_abs). pi_pairwise_agreement: per unit, "
    "the mean over annotator pairs of 1 − |code₁ − code₂|, averaged over units. pi_alpha: "
    "1 − (1 − pairwise) / (1 − chance), chance being that agreement between two different "
    "ratings drawn from all codes. pi_randolph_kappa: Randolph's κ on the codes with the "
    "categories observed, each unit with its own number of annotators (their script's "
    "two-annotator formula exceeds 1 on a unit with three); 1 when one code is observed, as "
    "in their script."
)
GWET_NOTE = (
    "Sotopia-π binarized its scores to get a usable α: on the secret and social_rules scales "
    "nearly every rating sits at the top, so the disagreement α expects by chance is tiny and "
    "α falls towards zero however often annotators agree. Gwet's coefficients are built for "
    "such a skew: their chance agreement shrinks as the ratings concentrate. ac1: Gwet's AC1, "
    "only the same score agrees; ac2: Gwet's AC2 with ordinal weights, scores a few ranks "
    "apart agree in part. Computed by irrCAC on the units with two annotators or more, every "
    "score the rubric allows counted as a category whether given or not (categories). Where "
    "every rating is the same score both are 1: no one disagreed, which does not show that "
    "the scale tells episodes apart."
)
HUMAN_VS_MODEL_NOTE = (
    "Per judge (evaluator: the stored evaluation's model, and each model sotopia-ls evaluate "
    "asked), annotator-averaged human scores against the judge's evaluation on the episodes it "
    "evaluated, both agents pooled: Pearson and Spearman with p-values and intervals, MSE, "
    "bias = mean(human − model). The human mean is itself only as reliable as icc1k above."
)
NOISE_NOTE = (
    "Is the model as close to the humans as one more human would be? On each unit with two "
    "annotators or more, each annotator in turn is held out and the mean of the unit's other "
    "annotators is the target. human_human_*: the held-out annotator against the target; "
    "model_human_*: the model against the same target. r: Pearson over unit × held-out "
    "annotator rows; mad: mean absolute distance; *_difference: model − human. verdict, from "
    "the interval of mad_difference: closer than a human (wholly below 0), as close as a "
    "human (contains 0), farther than a human (wholly above 0)."
)
AGENT_MODELS_NOTE = (
    "Each agent model's mean score, three ways. A unit is one agent of one episode. people: "
    "the mean over the units people rated of their raters' mean score. judge: the judge's "
    "mean over every unit it scored, its interval as if its scores were the truth (a judge's "
    "bias is not in it). prediction-powered: the judge's mean over every unit it scored, "
    "corrected by the people's ratings on the units both rated (PPI++, ppi-python); valid "
    "if the rated episodes are a random sample of the judged ones. effective_n: how many "
    "human-rated units alone would give an interval as narrow. Intervals are 95%, normal "
    "approximation; blank (–) with fewer than two units on a side."
)
ALT_TEST_NOTE = (
    "The alternative annotator test (Calderon, Reichart & Dror, ACL 2025; nitaytech/AltTest), "
    "on the units rated by three people or more: each annotator in turn is left out, and on "
    "each unit the judge and the left-out annotator are compared with the others by negative "
    "RMSE (the paper's measure for numeric scores). Per annotator, a one-sided paired t-test "
    "asks whether the judge wins more often, less a margin ε for its lower cost; "
    "Benjamini–Yekutieli at q = 0.05 over the annotators. winning_rate: the share of "
    "annotators the judge beats; the judge passes at 0.5 or more. advantage_probability: how "
    "often the judge aligns at least as well as the left-out annotator. annotators: the people "
    "when each rated 30 units or more, else the first, second, third… rater of every unit. "
    "Both agents pooled here; alt_test.csv has each agent too."
)
QUALIFICATION_NOTE = "Pass: every score on every reference unit within ±2 of the reference."
TIME_ON_TASK_NOTE = (
    "Minutes the study gateway's rating page was visible and focused (the tab shown, its "
    "window focused): per rating, and per participant summed over their measured ratings; "
    "lower quartile, median and upper quartile. measured: the ratings (participants) with a "
    "measure, of all the crowd's. Label Studio's lead time, which runs on while the page is "
    "in another tab, is the annotators table's."
)
NO_TIME_ON_TASK_NOTE = (
    "No rating carries a measured time on task. The study gateway measures the minutes its "
    "rating page was visible and focused; sotopia-ls export --study FILE writes them "
    "(visible_minutes) for the annotations made through it, and a report of that export shows "
    "them here. Label Studio's lead time is the annotators table's."
)


SECTIONS: tuple[Section, ...] = (
    Section("annotations", lambda inputs, needed: inputs.tally, _annotations, table=False),
    Section("audit", lambda inputs, needed: inputs.audit, _audit, AUDIT_NOTE),
    Section("review", lambda inputs, needed: review_table(inputs.long, inputs.tally.excluded),
            _review, REVIEW_NOTE),
    Section("agreement", lambda inputs, needed: agreement_table(inputs.units, inputs.bootstrap),
            _agreement, AGREEMENT_NOTE),
    Section("agreement_breakdown",
            lambda inputs, needed: agreement_breakdown(inputs.units, inputs.bootstrap),
            _breakdown, BREAKDOWN_NOTE),
    Section("sotopia_pi", _pi_view, _sotopia_pi, SOTOPIA_PI_NOTE, table=False,
            needs=("agreement",)),
    Section("gwet", lambda inputs, needed: gwet_table(inputs.units, inputs.bootstrap), _gwet,
            GWET_NOTE),
    # The two below are shown in the human-vs-model section.
    Section("model_coverage",
            lambda inputs, needed: model_coverage(inputs.long, inputs.model_scores),
            shown_nowhere),
    Section("paired", lambda inputs, needed: paired_scores(inputs.long, inputs.model_scores),
            shown_nowhere, table=False),
    Section("human_vs_model",
            lambda inputs, needed: human_vs_model(needed["paired"], inputs.bootstrap),
            _human_vs_model, HUMAN_VS_MODEL_NOTE, needs=("model_coverage", "paired")),
    Section("model_vs_human_noise", lambda inputs, needed: model_vs_human_noise(
        inputs.units, inputs.model_scores, inputs.bootstrap), _noise, NOISE_NOTE,
        needs=("paired",)),
    Section("agent_model_scores", _agent_model_scores, shown_nowhere),
    Section("agent_model_differences", _agent_model_differences, _model_scores,
            AGENT_MODELS_NOTE, needs=("agent_model_scores",)),
    Section("alt_test", lambda inputs, needed: alt_test(
        inputs.units, inputs.model_scores, inputs.alt_test_epsilon), _alt_test, ALT_TEST_NOTE,
        needs=("paired",)),
    Section("qualification", lambda inputs, needed: (
        qualification(inputs.long, inputs.reference)
        if inputs.reference is not None and len(inputs.reference) else None),
        _qualification, QUALIFICATION_NOTE),
    Section("annotators", lambda inputs, needed: annotator_table(inputs.long), _annotators),
    Section("time_on_task", lambda inputs, needed: time_on_task_table(inputs.long),
            _time_on_task, TIME_ON_TASK_NOTE),
    Section("distributions", earlier("agreement"), _distributions, table=False,
            needs=("agreement",)),
)
