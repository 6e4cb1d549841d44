"""The report's plots, drawn with matplotlib and inlined as PNG.

matplotlib is configured when the first plot is drawn (``pyplot``), not when this module is
imported: importing the report never touches a plotting backend. Plots are deterministic: the
same data draws the same bytes.
"""

from __future__ import annotations

import base64
import html
import io
from functools import cache
from types import ModuleType
from typing import TYPE_CHECKING

import pandas as pd

from ..dimensions import RUBRIC
from ..statistics.comparison import OVERALL
from .page import FLAG

if TYPE_CHECKING:
    from matplotlib.figure import Figure
    from matplotlib.transforms import Bbox

DPI = 110
MAX_ANNOTATORS_PLOTTED = 40
PANELS_PER_ROW = 4
ALPHA_CHART_ALT = "Krippendorff's α per dimension with its bootstrap interval"
# Krippendorff's guides for interval α: 0.8 for reliable data, 0.667 the least for tentative
# conclusions; 0 is chance agreement.
ALPHA_GUIDES = (0.0, 0.667, 0.8)


@cache
def pyplot() -> ModuleType:
    """``matplotlib.pyplot``, set up on first use to draw into files only (never a window), and
    to read labels as text: an annotator name or tag with ``$x$`` in it is not a formula."""
    import matplotlib

    matplotlib.use("Agg")
    matplotlib.rcParams["text.parse_math"] = False
    import matplotlib.pyplot

    return matplotlib.pyplot


def png(figure: Figure, alt: str = "plot") -> str:
    """``figure`` as an inline ``<img>`` (closed once drawn)."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=DPI, bbox_inches=_tight_box(figure))
    pyplot().close(figure)
    encoded = base64.b64encode(buffer.getvalue()).decode("ascii")
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{encoded}">'


def _tight_box(figure: Figure) -> Bbox | str:
    """The box ``bbox_inches="tight"`` crops to, measured without the layout-only drawing
    savefig makes for it (the same bytes, one drawing less); a figure with a layout engine
    is drawn for its layout anyway."""
    if figure.get_layout_engine() is not None:
        return "tight"
    figure.set_dpi(DPI)
    box = figure.get_tightbbox(figure.canvas.get_renderer())
    return box.padded(pyplot().rcParams["savefig.pad_inches"])


def alpha_chart(agreement: pd.DataFrame) -> Figure:
    """A forest plot of interval α: one row per dimension in rubric order, the estimate as a
    dot and its bootstrap interval as a line (none when no resamples were drawn); a dimension
    whose α is undefined is named on its row, one with near-constant ratings marked ⚠."""
    rows = agreement.set_index("dimension").reindex(RUBRIC.keys)
    figure, axis = pyplot().subplots(figsize=(7, 0.42 * len(rows) + 1.1))
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
    """Scores given by each annotator on one dimension: dot area = number of ratings. Small
    enough to stand three in a row on a laptop's window (the report sets them in a grid)."""
    dim = RUBRIC[dimension]
    scores = long[long["dimension"] == dimension]
    busiest = scores["annotator_id"].value_counts().index[:MAX_ANNOTATORS_PLOTTED]
    counts = (
        scores[scores["annotator_id"].isin(busiest)]
        .groupby(["annotator_id", "score"]).size().reset_index(name="n")
    )
    order = {name: i for i, name in enumerate(sorted(busiest))}
    figure, axis = pyplot().subplots(figsize=(4.2, 0.2 * max(len(order), 4) + 1))
    axis.scatter(counts["score"], counts["annotator_id"].map(order), s=counts["n"] * 40,
                 alpha=0.7, color="#3b6ea8")
    axis.set_yticks(range(len(order)), list(order), fontsize=7)
    axis.set_xticks(dim.values)
    axis.tick_params(axis="x", labelsize=8)
    axis.set_xlim(dim.range_low - 0.5, dim.range_high + 0.5)
    axis.set_ylim(-0.7, len(order) - 0.3)
    axis.set_xlabel(f"{dim.label} score ({dim.range_text})", fontsize=9)
    axis.grid(axis="x", alpha=0.3)
    return png(figure)


def scatter_chart(paired: pd.DataFrame) -> Figure:
    """Human (annotator mean) against model score, one panel per dimension and overall, one
    colour per judge; the judges' legend sits above the panels, clear of every tick label."""
    panels = [*RUBRIC.keys, OVERALL]
    rows = -(-len(panels) // PANELS_PER_ROW)
    figure, axes = pyplot().subplots(rows, PANELS_PER_ROW, figsize=(13, 3.25 * rows),
                                     squeeze=False, layout="constrained")
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
        figure.legend(handles, labels, loc="outside upper center", ncols=len(labels),
                      fontsize=8, title="judge")
    return figure


MODEL_CHART_ALT = ("Each agent model's mean per dimension with its interval: people, each "
                   "judge, and prediction-powered")


def model_chart(scores: pd.DataFrame) -> Figure:
    """Models × dimensions: a panel per dimension and overall, a row per agent model, and on
    it each estimate's mean (dot) and interval (line) side by side: people, then per judge
    the judge alone and prediction-powered (``statistics.agent_models``)."""
    panels = [*RUBRIC.keys, OVERALL]
    models = sorted(scores["agent_model"].unique())
    series = list(dict.fromkeys(zip(scores["estimate"], scores["evaluator"])))
    rows = -(-len(panels) // PANELS_PER_ROW)
    figure, axes = pyplot().subplots(rows, PANELS_PER_ROW, sharey=True, squeeze=False,
                                     figsize=(13, (0.3 * len(models) * len(series) + 1.2) * rows))
    colours = pyplot().rcParams["axes.prop_cycle"].by_key()["color"]
    for axis in axes.flat[len(panels):]:
        axis.set_visible(False)
    step = 0.8 / max(len(series), 1)
    for axis, panel in zip(axes.flat, panels):
        shown = scores[scores["dimension"] == panel].set_index(
            ["agent_model", "estimate", "evaluator"])
        for number, (estimate, judge) in enumerate(series):
            at = [position - 0.4 + step * (number + 0.5) for position in range(len(models))]
            cells = shown.reindex([(model, estimate, judge) for model in models])
            colour = colours[number % len(colours)]
            axis.hlines(at, cells["mean_ci_low"], cells["mean_ci_high"], color=colour,
                        linewidth=2)
            axis.plot(cells["mean"], at, "o", color=colour, markersize=4,
                      label=f"{estimate} {judge}".strip())
        axis.set_title(RUBRIC[panel].label if panel != OVERALL else "Overall", fontsize=9)
        axis.set_yticks(range(len(models)), models, fontsize=8)
        axis.grid(axis="x", alpha=0.3)
    axes.flat[0].invert_yaxis()
    handles, labels = axes.flat[0].get_legend_handles_labels()
    figure.legend(handles, labels, loc="upper center", ncol=min(len(labels), 5), fontsize=8,
                  bbox_to_anchor=(0.5, 0.0), frameon=False)
    figure.tight_layout()
    return figure
