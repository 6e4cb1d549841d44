"""The reliability report: one self-contained HTML file plus its tables as CSV.

Sections: the annotation count reconciliation, agreement per dimension, human vs model,
qualification against reference ratings, per-annotator figures, then for every dimension the
score distribution by annotator. Plots are PNGs inlined as base64, so the file can be mailed or
archived alone. Every value that came from annotators (emails, ids) is HTML-escaped.
"""

from __future__ import annotations

import base64
import html
import io
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only; never open a window

import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from ..dimensions import RUBRIC  # noqa: E402
from .agreement import agreement_table  # noqa: E402
from .validate import Tally  # noqa: E402
from .comparison import (  # noqa: E402
    OVERALL,
    annotator_table,
    human_vs_model,
    paired_scores,
    qualification,
)

MAX_ANNOTATORS_PLOTTED = 40


@dataclass
class Report:
    tally: Tally
    long: pd.DataFrame
    agreement: pd.DataFrame
    human_vs_model: pd.DataFrame
    paired: pd.DataFrame
    annotators: pd.DataFrame
    qualification: pd.DataFrame | None

    def tables(self) -> dict[str, pd.DataFrame]:
        tables = {
            "agreement": self.agreement,
            "human_vs_model": self.human_vs_model,
            "annotators": self.annotators,
        }
        if self.qualification is not None:
            tables["qualification"] = self.qualification
        return tables

    def write(self, out_dir: Path) -> Path:
        """Write ``report.html`` and one CSV per table into ``out_dir``; returns the HTML path."""
        out_dir.mkdir(parents=True, exist_ok=True)
        for name, table in self.tables().items():
            table.to_csv(out_dir / f"{name}.csv", index=False)
        path = out_dir / "report.html"
        path.write_text(render_html(self), encoding="utf-8")
        return path


def build_report(
    long: pd.DataFrame,
    model_scores: pd.DataFrame,
    tally: Tally,
    reference: pd.DataFrame | None = None,
) -> Report:
    """All report tables from ``scores_long`` and the stored model scores.

    Ground-truth rows of ``long`` are the reference ratings (with ``reference``, if given, added
    to them); the other rows are the crowd whose agreement is measured.
    """
    is_reference = long["ground_truth"].astype(bool)
    crowd = long[~is_reference]
    references = [frame for frame in (long[is_reference], reference) if frame is not None]
    truth = pd.concat(references, ignore_index=True) if references else None
    return Report(
        tally=tally,
        long=crowd,
        agreement=agreement_table(crowd),
        human_vs_model=human_vs_model(crowd, model_scores),
        paired=paired_scores(crowd, model_scores),
        annotators=annotator_table(crowd),
        qualification=qualification(crowd, truth) if truth is not None and len(truth) else None,
    )


def _png(figure: plt.Figure) -> str:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
    plt.close(figure)
    encoded = base64.b64encode(buffer.getvalue()).decode("ascii")
    return f'<img alt="plot" src="data:image/png;base64,{encoded}">'


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


def scatter_plot(paired: pd.DataFrame) -> str:
    """Human (annotator mean) against model score, one panel per dimension and overall."""
    panels = [*RUBRIC.keys, OVERALL]
    figure, axes = plt.subplots(2, 4, figsize=(13, 6.5))
    for axis, dimension in zip(axes.flat, panels):
        subset = paired[paired["dimension"] == dimension]
        axis.scatter(subset["score_model"], subset["score_human"], s=14, alpha=0.6,
                     color="#b5523b")
        if dimension == OVERALL:
            low = sum(d.range_low for d in RUBRIC.dimensions) / len(RUBRIC.dimensions)
            high = sum(d.range_high for d in RUBRIC.dimensions) / len(RUBRIC.dimensions)
            axis.set_title("Overall (mean of seven)", fontsize=9)
        else:
            low, high = RUBRIC[dimension].range_low, RUBRIC[dimension].range_high
            axis.set_title(RUBRIC[dimension].label, fontsize=9)
        axis.plot([low, high], [low, high], color="grey", linewidth=0.8, linestyle="--")
        axis.set_xlim(low - 0.5, high + 0.5)
        axis.set_ylim(low - 0.5, high + 0.5)
        axis.set_xlabel("model", fontsize=8)
        axis.set_ylabel("human mean", fontsize=8)
    figure.tight_layout()
    return _png(figure)


def _table(frame: pd.DataFrame) -> str:
    shown = frame.copy()
    for column in [c for c in shown.columns if c.endswith("_p")]:
        shown[column] = shown[column].map(lambda p: "–" if pd.isna(p) else f"{p:.2g}")
    table = shown.to_html(index=False, escape=True, float_format=lambda v: f"{v:.3f}",
                          na_rep="–", border=0, classes="table")
    return f'<div class="scroll">{table}</div>'


_STYLE = """
body{font-family:system-ui,sans-serif;margin:2rem auto;max-width:72rem;color:#222}
h1{font-size:1.6rem}h2{margin-top:2.2rem;border-bottom:1px solid #ccc}
.table{border-collapse:collapse;font-size:.85rem}
.table td,.table th{padding:.25rem .6rem;border-bottom:1px solid #eee;text-align:right}
.table th{background:#f4f4f4}.note{color:#555;font-size:.9rem}
.flag{color:#a33;font-weight:600}img{max-width:100%}.scroll{overflow-x:auto}
"""


def _section(title: str, *parts: str) -> str:
    return f"<section><h2>{html.escape(title)}</h2>{''.join(parts)}</section>"


def _note(text: str) -> str:
    return f'<p class="note">{html.escape(text)}</p>'


def render_html(report: Report) -> str:
    tally = report.tally
    flagged = report.agreement.loc[report.agreement["low_variance"], "dimension"].tolist()
    parts = [
        _section(
            "Annotations",
            _note(tally.reconciliation() + (" ✔" if tally.balanced else " ✘ does not add up")),
            _note(f"{tally.tasks} tasks; {tally.duplicates} duplicate annotations (same annotator, "
                  f"same task) refused; {tally.drafts} unsubmitted drafts ignored; "
                  f"{tally.ground_truth} ground-truth annotations used as reference."),
        ),
        _section(
            "Agreement per dimension",
            _note("Units are episode × agent with at least two annotators. α: Krippendorff, "
                  "interval. ICC(1,1): one-way random. exact / within_2: share of annotator pairs "
                  "agreeing exactly / within 2 points. κ: Randolph on round(score / max|range|)."),
            _table(report.agreement),
            f'<p class="flag">Near-constant ratings, α not meaningful: '
            f'{html.escape(", ".join(flagged))}</p>' if flagged else "",
        ),
    ]
    if report.paired.empty:
        parts.append(_section("Human vs model", _note(
            "No episode in this export has a stored model evaluation to compare with.")))
    else:
        parts.append(_section(
            "Human vs model",
            _note("Annotator-averaged human scores against the stored model evaluation, both "
                  "agents pooled. bias = mean(human − model)."),
            _table(report.human_vs_model),
            scatter_plot(report.paired),
        ))
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
    for dimension in RUBRIC.dimensions:
        row = report.agreement.set_index("dimension").loc[dimension.key]
        summary = (f"α = {row['alpha']:.3f}, ICC = {row['icc']:.3f}, exact = {row['exact']:.3f}, "
                   f"within ±2 = {row['within_2']:.3f}, κ = {row['randolph_kappa']:.3f}, "
                   f"{row['units']} units")
        parts.append(_section(
            f"{dimension.label} ({dimension.range_text})",
            _note(summary),
            distribution_plot(report.long, dimension.key),
        ))
    body = "".join(parts)
    return (
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
        "<title>Sotopia human evaluation report</title>"
        f"<style>{_STYLE}</style></head><body><h1>Sotopia human evaluation report</h1>"
        f"{body}</body></html>\n"
    )
