"""The reliability report: one self-contained HTML file plus its tables as CSV.

Sections: the annotation count reconciliation; agreement per dimension (interval α, ICC(1,1)
and ICC(1,k) with bootstrap intervals, pair shares, κ, spread, near-constant flags); the same
per model pair and per agent position; Sotopia-π's figures for comparison with that paper;
human vs model, and the model against the spread between humans; qualification against
reference ratings; per-annotator figures; then for every dimension the score distribution by
annotator. Each measure is defined in the module that computes it (``agreement``,
``sotopia_pi``, ``comparison``) and summed up in the report's notes. Plots are PNGs inlined as
base64, so the file can be mailed or archived alone. Every value that came from the data
(emails, ids, tags) is HTML-escaped.
"""

from __future__ import annotations

import base64
import html
import io
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only; never open a window
# Labels are annotator names and tags: text, never math ("$x$" in an email is not a formula).
matplotlib.rcParams["text.parse_math"] = False

import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
from label_studio_sdk import LabelStudio  # noqa: E402

from ..dimensions import RUBRIC  # noqa: E402
from ..errors import InvalidInput, Problem  # noqa: E402
from ..folders import replaced_folder  # noqa: E402
from .accounting import AUDIT_KINDS, Finding, Tally  # noqa: E402
from .agreement import agreement_breakdown, agreement_table  # noqa: E402
from .bootstrap import DEFAULT_RESAMPLES, DEFAULT_SEED, Bootstrap  # noqa: E402
from .cells import neutralized_frame  # noqa: E402
from .comparison import (  # noqa: E402
    OVERALL,
    annotator_table,
    human_vs_model,
    model_vs_human_noise,
    paired_scores,
    qualification,
)
from .export import ExportResult, Reading, export_file, export_project  # noqa: E402
from .sotopia_pi import PI_COLUMNS  # noqa: E402

MAX_ANNOTATORS_PLOTTED = 40
AUDIT_COLUMNS = [field.name for field in fields(Finding)]


def model_coverage(long: pd.DataFrame, model_scores: pd.DataFrame) -> pd.DataFrame:
    """Per dimension: the episodes and units (episode × agent) the crowd rated, and how many
    of them have a model score to compare with."""
    rated = long[["episode_id", "agent", "dimension"]].drop_duplicates()
    scored = model_scores[["episode_id", "agent", "dimension"]].drop_duplicates()
    both = rated.merge(scored, on=["episode_id", "agent", "dimension"])
    rows = []
    for key in RUBRIC.keys:
        units, paired = rated[rated["dimension"] == key], both[both["dimension"] == key]
        rows.append({"dimension": key, "episodes": units["episode_id"].nunique(),
                     "units": len(units), "episodes_with_model": paired["episode_id"].nunique(),
                     "units_with_model": len(paired)})
    return pd.DataFrame(rows, columns=["dimension", "episodes", "units", "episodes_with_model",
                                       "units_with_model"])


@dataclass
class Report:
    tally: Tally
    # Every audit finding of the export (``validate.Finding`` as rows), and its counts.
    audit: pd.DataFrame
    coverage: pd.DataFrame
    long: pd.DataFrame
    bootstrap: Bootstrap
    agreement: pd.DataFrame
    agreement_breakdown: pd.DataFrame
    human_vs_model: pd.DataFrame
    model_vs_human_noise: pd.DataFrame
    paired: pd.DataFrame
    annotators: pd.DataFrame
    qualification: pd.DataFrame | None

    def tables(self) -> dict[str, pd.DataFrame]:
        tables = {
            "audit": self.audit,
            "model_coverage": self.coverage,
            "agreement": self.agreement,
            "agreement_breakdown": self.agreement_breakdown,
            "human_vs_model": self.human_vs_model,
            "model_vs_human_noise": self.model_vs_human_noise,
            "annotators": self.annotators,
        }
        if self.qualification is not None:
            tables["qualification"] = self.qualification
        return tables

    def write(self, out_dir: Path, *, raw_csv: bool = False) -> Path:
        """Write ``report.html`` and one CSV per table into ``out_dir``, which is replaced as
        one unit (``sotopia_ls.folders``); returns the HTML path. CSV cells a spreadsheet
        would evaluate are neutralized unless ``raw_csv``."""
        page = render_html(self)
        tables = self.tables()
        owned = {"report.html", *(f"{name}.csv" for name in tables)}
        with replaced_folder(out_dir, owned.__contains__) as staging:
            for name, table in tables.items():
                shown = table if raw_csv else neutralized_frame(table)
                shown.to_csv(staging / f"{name}.csv", index=False)
            (staging / "report.html").write_text(page, encoding="utf-8")
        return out_dir / "report.html"


def build_report(
    long: pd.DataFrame,
    model_scores: pd.DataFrame,
    tally: Tally,
    reference: pd.DataFrame | None = None,
    bootstrap: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
    audit: pd.DataFrame | None = None,
) -> Report:
    """All report tables from ``scores_long`` and the stored model scores.

    Ground-truth rows of ``long`` are the reference ratings (with ``reference``, if given, added
    to them); the other rows are the crowd whose agreement is measured. Intervals come from
    ``bootstrap`` resamples of the episodes drawn from ``seed`` (0 resamples: no intervals).
    """
    is_reference = long["ground_truth"].astype(bool)
    crowd = long[~is_reference]
    references = [frame for frame in (long[is_reference], reference) if frame is not None]
    truth = pd.concat(references, ignore_index=True) if references else None
    resampling = Bootstrap(resamples=bootstrap, seed=seed)
    return Report(
        tally=tally,
        audit=audit if audit is not None else pd.DataFrame(columns=AUDIT_COLUMNS),
        coverage=model_coverage(crowd, model_scores),
        long=crowd,
        bootstrap=resampling,
        agreement=agreement_table(crowd, resampling),
        agreement_breakdown=agreement_breakdown(crowd, resampling),
        human_vs_model=human_vs_model(crowd, model_scores, resampling),
        model_vs_human_noise=model_vs_human_noise(crowd, model_scores, resampling),
        paired=paired_scores(crowd, model_scores),
        annotators=annotator_table(crowd),
        qualification=qualification(crowd, truth) if truth is not None and len(truth) else None,
    )


def _png(figure: plt.Figure, alt: str = "plot") -> str:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
    plt.close(figure)
    encoded = base64.b64encode(buffer.getvalue()).decode("ascii")
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{encoded}">'


ALPHA_CHART_ALT = "Krippendorff's α per dimension with its bootstrap interval"
# Krippendorff's guides for interval α: 0.8 for reliable data, 0.667 the least for tentative
# conclusions; 0 is chance agreement.
ALPHA_GUIDES = (0.0, 0.667, 0.8)


def alpha_chart(agreement: pd.DataFrame) -> plt.Figure:
    """A forest plot of interval α: one row per dimension in rubric order, the estimate as a
    dot and its bootstrap interval as a line (none when no resamples were drawn); a dimension
    whose α is undefined is named on its row, one with near-constant ratings marked ⚠."""
    rows = agreement.set_index("dimension").reindex(RUBRIC.keys)
    figure, axis = plt.subplots(figsize=(7, 0.42 * len(rows) + 1.1))
    for guide in ALPHA_GUIDES:
        axis.axvline(guide, color="grey", linewidth=0.8, linestyle=":" if guide else "-")
    positions = range(len(rows))
    low, high = rows.get("alpha_ci_low"), rows.get("alpha_ci_high")
    if low is not None and high is not None:
        axis.hlines(list(positions), low, high, color="#3b6ea8", linewidth=2)
    axis.plot(rows["alpha"], list(positions), "o", color="#1d3f66")
    for position, alpha in zip(positions, rows["alpha"]):
        if pd.isna(alpha):
            axis.text(0.02, position, "α undefined", va="center", fontsize=8, color="#a33")
    labels = [RUBRIC[key].label + (f" {FLAG}" if flagged else "")
              for key, flagged in zip(rows.index, rows["low_variance"].astype(bool))]
    axis.set_yticks(list(positions), labels)
    axis.invert_yaxis()
    finite = pd.concat([rows["alpha"], *(c for c in (low, high) if c is not None)]).dropna()
    axis.set_xlim(min(-0.1, finite.min() - 0.05) if len(finite) else -0.1, 1.02)
    axis.set_xlabel("Krippendorff's α (interval); dotted: 0.667 and 0.8")
    axis.grid(axis="x", alpha=0.3)
    return figure


def distribution_plot(long: pd.DataFrame, dimension: str) -> str:
    """Scores given by each annotator on one dimension: dot area = number of ratings."""
    dim = RUBRIC[dimension]
    scores = long[long["dimension"] == dimension]
    busiest = scores["annotator_id"].value_counts().index[:MAX_ANNOTATORS_PLOTTED]
    counts = (
        scores[scores["annotator_id"].isin(busiest)]
        .groupby(["annotator_id", "score"]).size().reset_index(name="n")
    )
    order = {name: i for i, name in enumerate(sorted(busiest))}
    figure, axis = plt.subplots(figsize=(7, 0.28 * max(len(order), 4) + 1.2))
    axis.scatter(counts["score"], counts["annotator_id"].map(order), s=counts["n"] * 40,
                 alpha=0.7, color="#3b6ea8")
    axis.set_yticks(range(len(order)), list(order), fontsize=7)
    axis.set_xticks(dim.values)
    axis.set_xlim(dim.range_low - 0.5, dim.range_high + 0.5)
    axis.set_ylim(-0.7, len(order) - 0.3)
    axis.set_xlabel(f"{dim.label} score ({dim.range_text})")
    axis.grid(axis="x", alpha=0.3)
    return _png(figure)


PANELS_PER_ROW = 4


def scatter_plot(paired: pd.DataFrame) -> str:
    """Human (annotator mean) against model score, one panel per dimension and overall, one
    colour per judge."""
    panels = [*RUBRIC.keys, OVERALL]
    rows = -(-len(panels) // PANELS_PER_ROW)
    figure, axes = plt.subplots(rows, PANELS_PER_ROW, figsize=(13, 3.25 * rows), squeeze=False)
    for axis in axes.flat[len(panels):]:
        axis.set_visible(False)
    for axis, dimension in zip(axes.flat, panels):
        subset = paired[paired["dimension"] == dimension]
        for judge, scores in subset.groupby("evaluator", sort=True):
            axis.scatter(scores["score_model"], scores["score_human"], s=14, alpha=0.6,
                         label=judge or "model")
        if dimension == OVERALL:
            low = sum(d.range_low for d in RUBRIC.dimensions) / len(RUBRIC.dimensions)
            high = sum(d.range_high for d in RUBRIC.dimensions) / len(RUBRIC.dimensions)
            axis.set_title(f"Overall (mean of {len(RUBRIC.dimensions)})", fontsize=9)
        else:
            low, high = RUBRIC[dimension].range_low, RUBRIC[dimension].range_high
            axis.set_title(RUBRIC[dimension].label, fontsize=9)
        axis.plot([low, high], [low, high], color="grey", linewidth=0.8, linestyle="--")
        axis.set_xlim(low - 0.5, high + 0.5)
        axis.set_ylim(low - 0.5, high + 0.5)
        axis.set_xlabel("model", fontsize=8)
        axis.set_ylabel("human mean", fontsize=8)
    handles, labels = axes.flat[0].get_legend_handles_labels()
    if len(labels) > 1:
        figure.legend(handles, labels, loc="lower right", fontsize=8, title="judge")
    figure.tight_layout()
    return _png(figure)


def _table(frame: pd.DataFrame) -> str:
    shown = frame.copy()
    for column in [c for c in shown.columns if c.endswith("_p")]:
        shown[column] = shown[column].map(lambda p: "–" if pd.isna(p) else f"{p:.2g}")
    table = shown.to_html(index=False, escape=True, float_format=lambda v: f"{v:.3f}",
                          na_rep="–", border=0, classes="table")
    return f'<div class="scroll">{_narrow(table)}</div>'


_INTERVAL = re.compile(r"\[(?:-?\d+\.\d+|–), (?:-?\d+\.\d+|–)\]")


def _narrow(table: str) -> str:
    """The table with places to wrap, so that it fits a laptop's window: after each ``_`` of a
    column name (``pairs_<wbr>within_<wbr>2``), and before an interval, which stays whole on
    the line below its estimate. The text itself is unchanged."""
    table = re.sub(r"<th>([^<]+)</th>",
                   lambda name: "<th>" + name[1].replace("_", "_<wbr>") + "</th>", table)
    return _INTERVAL.sub(lambda interval: f'<span class="ci">{interval[0]}</span>', table)


# Figures that read as high agreement on a near-constant dimension without measuring any.
FLAGGED_COLUMNS = ("alpha", "icc1", "icc1k", "pairs_exact", "pairs_within_2",
                   "randolph_kappa_rubric_binary", *PI_COLUMNS[1:])
FLAG = "⚠"
CI_HEADING = " [95% CI]"


def _number(value: object) -> str:
    return "–" if pd.isna(value) else f"{value:.3f}"


def _estimate(value: object, low: object = None, high: object = None) -> str:
    """``0.663 [0.453, 0.808]``; the bare estimate when there is no interval."""
    if pd.isna(value) or low is None or pd.isna(low) or pd.isna(high):
        return _number(value)
    return f"{_number(value)} [{_number(low)}, {_number(high)}]"


def _shown(frame: pd.DataFrame, columns: list[str]) -> pd.DataFrame:
    """``columns`` for display: an estimate and its interval as one cell, and on rows marked
    ``low_variance`` the figures that agreement cannot be read from marked ⚠."""
    flagged = frame["low_variance"].astype(bool) if "low_variance" in frame else None
    shown = {}
    for column in columns:
        low, high = f"{column}_ci_low", f"{column}_ci_high"
        if low in frame:
            heading = column + CI_HEADING
            values = [_estimate(*row) for row in zip(frame[column], frame[low], frame[high])]
        else:
            heading, values = column, frame[column].tolist()
        if flagged is not None and column in FLAGGED_COLUMNS:
            values = [f"{v if isinstance(v, str) else _number(v)} {FLAG}" if flag else v
                      for v, flag in zip(values, flagged)]
        shown[heading] = values
    return pd.DataFrame(shown)


_STYLE = """
body{font-family:system-ui,sans-serif;margin:2rem auto;max-width:84rem;padding:0 1rem;color:#222}
h1{font-size:1.6rem}h2{margin-top:2.2rem;border-bottom:1px solid #ccc}
.table{border-collapse:collapse;font-size:.85rem}
.table td,.table th{padding:.25rem .6rem;border-bottom:1px solid #eee;text-align:right}
.table td{white-space:nowrap}.table td:has(.ci){white-space:normal}.table .ci{white-space:nowrap}
.table th{background:#f4f4f4}.note{color:#555;font-size:.9rem}
.flag{color:#a33;font-weight:600}img{max-width:100%}.scroll{overflow-x:auto}
"""


def _section(title: str, *parts: str) -> str:
    return f"<section><h2>{html.escape(title)}</h2>{''.join(parts)}</section>"


def _note(text: str) -> str:
    return f'<p class="note">{html.escape(text)}</p>'


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
BREAKDOWN_SHOWN = ["group", "dimension", "units", "ratings", "alpha", "icc1", "icc1k",
                   "pairs_exact", "pairs_within_2", "randolph_kappa_rubric_binary"]


def _bootstrap_note(report: Report) -> str:
    resampling = report.bootstrap
    if resampling.resamples <= 0:
        return _note("No bootstrap intervals were drawn (--bootstrap 0).")
    return _note(
        f"[low, high]: {resampling.level:.0%} percentile bootstrap intervals from "
        f"{resampling.resamples} resamples of the {report.long['episode_id'].nunique()} "
        f"episodes (both agents of an episode move together), seed {resampling.seed}; "
        f"--bootstrap {resampling.resamples} --seed {resampling.seed} reproduces them."
    )


def _flag_note(agreement: pd.DataFrame) -> str:
    flagged = agreement.loc[agreement["low_variance"], "dimension"].tolist()
    if not flagged:
        return ""
    return (f'<p class="flag">Near-constant ratings ({FLAG}): α is undefined or meaningless, '
            "and κ, the pair shares and Sotopia-π's figures are high only because there is "
            f'nothing to disagree about: {html.escape(", ".join(flagged))}</p>')


def _agreement_sections(report: Report) -> list[str]:
    agreement = report.agreement
    shown = [c for c in agreement.columns
             if not c.endswith(("_ci_low", "_ci_high")) and not c.startswith(("pi_", "bootstrap_"))]
    sections = [_section(
        "Agreement per dimension", _note(AGREEMENT_NOTE), _bootstrap_note(report),
        _png(alpha_chart(agreement), ALPHA_CHART_ALT),
        _table(_shown(agreement, shown)), _flag_note(agreement),
    )]
    for breakdown, title, what in (("model pair", "Agreement by model pair", "model pair (the "
                                    "episodes' source tag, else their models)"),
                                   ("agent", "Agreement by agent position", "agent position")):
        rows = report.agreement_breakdown[report.agreement_breakdown["breakdown"] == breakdown]
        sections.append(_section(title, _note(BREAKDOWN_NOTE.format(what=what)),
                                 _table(_shown(rows, BREAKDOWN_SHOWN))))
    pi = agreement.assign(
        rubric_max_abs=[RUBRIC[key].max_abs for key in agreement["dimension"]],
        pi_divisor=agreement["pi_divisor"].map(lambda v: "–" if pd.isna(v) else f"{v:g}"),
    )
    sections.append(_section(
        "Comparable with Sotopia-π", _note(SOTOPIA_PI_NOTE),
        _table(_shown(pi, ["dimension", "units", "ratings", "rubric_max_abs", *PI_COLUMNS])),
    ))
    return sections


AUDIT_NOTE = (
    "What a study should not have, seen in the export: an annotation last saved by another "
    "user (Label Studio Community lets any annotator edit anyone's), an annotator's repeated "
    "rating of an episode (only the latest counts), a task with more submitted annotations "
    "than the project asks for, an episode found in several tasks. Each is listed in "
    "audit.jsonl and audit.csv with task, annotation and annotator.")


def _audit_section(report: Report) -> str:
    counts = report.audit["kind"].value_counts() if len(report.audit) else pd.Series(dtype=int)
    lines = ", ".join(f"{kind.replace('_', ' ')}: {int(counts.get(kind, 0))}"
                      for kind in AUDIT_KINDS)
    shown = report.audit.head(50)
    return _section("Study integrity", _note(AUDIT_NOTE), _note(lines),
                    _table(shown) if len(shown) else "")


def _coverage_note(report: Report) -> str:
    """How many episodes and units have a model score, and why a figure may be blank."""
    coverage = report.coverage
    episodes = int(report.long["episode_id"].nunique())
    with_model = int(report.paired["episode_id"].nunique()) if not report.paired.empty else 0
    units = int(coverage["units"].max()) if len(coverage) else 0
    paired_units = int(coverage["units_with_model"].max()) if len(coverage) else 0
    return _note(
        f"{with_model} of {episodes} rated episodes ({paired_units} of {units} episode × agent "
        "units) carry a model evaluation (a stored Sotopia evaluation, a judge's from sotopia-ls "
        "evaluate, or with --with-predictions a backend's prediction); the others are left out "
        "of this section. "
        "A correlation is blank (–) with fewer than 3 paired units, or where the human means or "
        "the model's scores do not vary."
    )


def _model_sections(report: Report) -> list[str]:
    if report.paired.empty:
        return [_section("Human vs model", _coverage_note(report), _note(
            "No rated episode in this export has a model evaluation to compare with."))]
    comparison = report.human_vs_model
    noise = report.model_vs_human_noise
    return [
        _section("Human vs model", _coverage_note(report), _note(HUMAN_VS_MODEL_NOTE),
                 _bootstrap_note(report),
                 _table(_shown(comparison, ["evaluator", "dimension", "n", "pearson", "pearson_p",
                                            "spearman", "spearman_p", "mse", "bias"])),
                 scatter_plot(report.paired)),
        _section("Model against the spread between humans", _note(NOISE_NOTE),
                 _table(_shown(noise, ["evaluator", "dimension", "units", "rows", "human_human_r",
                                       "model_human_r", "r_difference", "human_human_mad",
                                       "model_human_mad", "mad_difference", "verdict"]))),
    ]


def _dimension_summary(row: pd.Series) -> str:
    def figure(name: str) -> str:
        return _estimate(row[name], row.get(f"{name}_ci_low"), row.get(f"{name}_ci_high"))

    summary = (f"α = {figure('alpha')}, ICC(1,1) = {figure('icc1')}, "
               f"ICC(1,k) = {figure('icc1k')}, exact pairs = {_number(row['pairs_exact'])}, "
               f"pairs within ±2 = {_number(row['pairs_within_2'])}, κ (rubric binary) = "
               f"{_number(row['randolph_kappa_rubric_binary'])}, {row['units']} units")
    if row["low_variance"]:
        summary += f" {FLAG} near-constant: none of these measures agreement"
    return summary


def render_html(report: Report) -> str:
    tally = report.tally
    parts = [
        _section(
            "Annotations",
            _note(tally.reconciliation() + (" ✔" if tally.balanced else " ✘ does not add up")),
            _note(f"{tally.tasks} tasks; {tally.duplicates} duplicate annotations (same annotator, "
                  f"same task) refused; {tally.drafts} unsubmitted drafts ignored; "
                  f"{tally.ground_truth} ground-truth annotations used as reference."),
        ),
        _audit_section(report),
        *_agreement_sections(report),
        *_model_sections(report),
    ]
    if report.qualification is None:
        parts.append(_section("Qualification", _note(
            "No reference ratings (ground-truth annotations or a reference file) were given.")))
    else:
        parts.append(_section(
            "Qualification",
            _note("Pass: every score on every reference unit within ±2 of the reference."),
            _table(report.qualification),
        ))
    parts.append(_section("Annotators", _table(report.annotators)))
    agreement = report.agreement.set_index("dimension")
    for dimension in RUBRIC.dimensions:
        parts.append(_section(
            f"{dimension.label} ({dimension.range_text})",
            _note(_dimension_summary(agreement.loc[dimension.key])),
            distribution_plot(report.long, dimension.key),
        ))
    body = "".join(parts)
    return (
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
        "<title>Sotopia human evaluation report</title>"
        f"<style>{_STYLE}</style></head><body><h1>Sotopia human evaluation report</h1>"
        f"{body}</body></html>\n"
    )


# --- one public call per input ---------------------------------------------------------------

_REFERENCE_COLUMNS = {"episode_id", "agent", "dimension", "score"}


def read_reference(path: Path) -> pd.DataFrame:
    """Reference ratings: a ``scores_long`` .csv/.parquet of an earlier export, or a Label
    Studio JSON export (``.json``)."""
    if path.suffix == ".json":
        return export_file(path).scores_long
    try:
        table = pd.read_parquet(path) if path.suffix == ".parquet" else pd.read_csv(path)
    except (ValueError, OSError, UnicodeDecodeError) as error:
        raise InvalidInput([Problem(str(path), "", f"cannot read it as a table: {error}")]) from None
    missing = _REFERENCE_COLUMNS - set(table.columns)
    if missing:
        raise InvalidInput([Problem(
            str(path), "", f"not a scores_long table (no {', '.join(sorted(missing))}); give "
            "the scores_long.csv of an earlier export, or a Label Studio JSON export")])
    return table


def _build_and_write(long: pd.DataFrame, model_scores: pd.DataFrame, tally: Tally,
                     audit: pd.DataFrame, out_dir: Path, reference: Path | None,
                     bootstrap: int, seed: int, raw_csv: bool) -> Report:
    report = build_report(
        long, model_scores, tally,
        read_reference(reference) if reference is not None else None,
        bootstrap=bootstrap, seed=seed, audit=audit,
    )
    report.write(out_dir, raw_csv=raw_csv)
    return report


def _tables(result: ExportResult) -> tuple[pd.DataFrame, pd.DataFrame, Tally, pd.DataFrame]:
    """What the report reads of an export just made: long scores, model scores, tally, audit."""
    audit = pd.DataFrame([f.to_dict() for f in result.collection.audit_findings()],
                         columns=AUDIT_COLUMNS)
    return result.scores_long, result.model_scores, result.tally, audit


def report_project(
    client: LabelStudio, project: str | int, out_dir: Path, *,
    reference: Path | None = None, with_predictions: bool = False,
    keep_identities: bool = False, bootstrap: int = DEFAULT_RESAMPLES, seed: int = DEFAULT_SEED,
    raw_csv: bool = False, reading: Reading = Reading(), progress: bool = False,
) -> Report:
    """The report of a live project (read as ``export_project`` reads it), written to
    ``out_dir``."""
    result = export_project(client, project, with_predictions=with_predictions,
                            keep_identities=keep_identities, reading=reading, progress=progress)
    return _build_and_write(*_tables(result), out_dir, reference, bootstrap, seed, raw_csv)


def report_file(
    path: Path, out_dir: Path, *, identities: Mapping[int, str] | None = None,
    reference: Path | None = None, keep_identities: bool = False,
    bootstrap: int = DEFAULT_RESAMPLES, seed: int = DEFAULT_SEED, raw_csv: bool = False,
    reading: Reading = Reading(), progress: bool = False,
) -> Report:
    """The report of a Label Studio JSON export file, written to ``out_dir``."""
    result = export_file(path, identities=identities, keep_identities=keep_identities,
                         reading=reading, progress=progress)
    return _build_and_write(*_tables(result), out_dir, reference, bootstrap, seed, raw_csv)


def report_export(
    folder: Path, out_dir: Path, *, reference: Path | None = None,
    bootstrap: int = DEFAULT_RESAMPLES, seed: int = DEFAULT_SEED, raw_csv: bool = False,
) -> Report:
    """The report of an export folder ``sotopia-ls export`` wrote: nothing is read again from
    Label Studio. Annotators keep the names that export gave them."""
    def read(name: str, reader: Callable[[Path], Any]) -> Any:
        path = folder / name
        if not path.is_file():
            raise InvalidInput([Problem(str(folder), "", f"no {name}: not a sotopia-ls export "
                                        "folder (sotopia-ls export -o FOLDER writes one)")])
        try:
            return reader(path)
        except (ValueError, OSError, TypeError) as error:
            raise InvalidInput([Problem(str(path), "", f"cannot read it: {error}")]) from None

    def tally(path: Path) -> Tally:
        summary = json.loads(path.read_text(encoding="utf-8"))
        return Tally(**{name: summary[name] for name in Tally.__dataclass_fields__
                        if name in summary})

    counts = read("summary.json", tally)  # first: it tells an export folder from another
    audit = read("audit.jsonl", lambda path: pd.DataFrame(
        [json.loads(line) for line in path.open(encoding="utf-8") if line.strip()],
        columns=AUDIT_COLUMNS))
    return _build_and_write(
        read("scores_long.parquet", pd.read_parquet),
        read("model_scores.csv", lambda path: pd.read_csv(
            path, dtype={"episode_id": str, "evaluator": str})),
        counts, audit, out_dir, reference, bootstrap, seed, raw_csv,
    )
