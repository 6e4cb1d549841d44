"""The report's HTML: the page, its sections, notes and tables.

Every value that came from the data (emails, ids, tags) is HTML-escaped; the page has no script
and loads nothing, so it can be mailed or archived alone.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterable

import pandas as pd

FLAG = "⚠"
CI_HEADING = " [95% CI]"

STYLE = """
body{font-family:system-ui,sans-serif;margin:2rem auto;max-width:84rem;padding:0 1rem;color:#222}
h1{font-size:1.6rem}h2{margin-top:2.2rem;border-bottom:1px solid #ccc}
.table{border-collapse:collapse;font-size:.85rem}
.table td,.table th{padding:.25rem .6rem;border-bottom:1px solid #eee;text-align:right}
.table td{white-space:nowrap}.table td:has(.ci){white-space:normal}.table .ci{white-space:nowrap}
.table td.long{white-space:normal;overflow-wrap:anywhere;min-width:12rem}
.table th{background:#f4f4f4}.note{color:#555;font-size:.9rem}
.flag{color:#a33;font-weight:600}img{max-width:100%}.scroll{overflow-x:auto}
.grid{display:grid;grid-template-columns:repeat(auto-fill,minmax(24rem,1fr));column-gap:2rem}
"""
TITLE = "Sotopia human evaluation report"


def document(body: str) -> str:
    """The whole page around ``body`` (its sections)."""
    return (
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<title>{TITLE}</title>"
        f"<style>{STYLE}</style></head><body><h1>{TITLE}</h1>"
        f"{body}</body></html>\n"
    )


def section(title: str, *parts: str) -> str:
    return f"<section><h2>{html.escape(title)}</h2>{''.join(parts)}</section>"


def grid(*parts: str) -> str:
    """``parts`` side by side, as many in a row as the window holds (small plots)."""
    return f'<div class="grid">{"".join(parts)}</div>'


def note(text: str) -> str:
    return f'<p class="note">{html.escape(text)}</p>'


def table(frame: pd.DataFrame) -> str:
    """``frame`` as an HTML table: floats to 3 places, p-values (``*_p``) to 2 significant
    digits, a missing value as –."""
    shown = frame.copy()
    for column in [c for c in shown.columns if c.endswith("_p")]:
        shown[column] = shown[column].map(lambda p: "–" if pd.isna(p) else f"{p:.2g}")
    rendered = shown.to_html(index=False, escape=True, float_format=lambda v: f"{v:.3f}",
                             na_rep="–", border=0, classes="table")
    return f'<div class="scroll">{_narrow(rendered)}</div>'


_INTERVAL = re.compile(r"\[(?:-?\d+\.\d+|–), (?:-?\d+\.\d+|–)\]")
_LONG_TEXT = re.compile(r"<td>([^<]{40,})</td>")  # longer than a dimension's key


def _narrow(rendered: str) -> str:
    """The table with places to wrap, so that it fits a laptop's window: after each ``_`` of a
    column name (``pairs_<wbr>within_<wbr>2``), before an interval, which stays whole on
    the line below its estimate, and anywhere in a long text (a source tag with no space). The
    text itself is unchanged."""
    rendered = re.sub(r"<th>([^<]+)</th>",
                      lambda name: "<th>" + name[1].replace("_", "_<wbr>") + "</th>", rendered)
    rendered = _LONG_TEXT.sub(r'<td class="long">\1</td>', rendered)
    return _INTERVAL.sub(lambda interval: f'<span class="ci">{interval[0]}</span>', rendered)


def number(value: object) -> str:
    return "–" if pd.isna(value) else f"{value:.3f}"


def estimate(value: object, low: object = None, high: object = None) -> str:
    """``0.663 [0.453, 0.808]``; the bare estimate when there is no interval."""
    if pd.isna(value) or low is None or pd.isna(low) or pd.isna(high):
        return number(value)
    return f"{number(value)} [{number(low)}, {number(high)}]"


def shown(frame: pd.DataFrame, columns: list[str], flagged: Iterable[str] = ()) -> pd.DataFrame:
    """``columns`` for display: an estimate and its interval as one cell, and on rows marked
    ``low_variance`` the ``flagged`` figures (those agreement cannot be read from there)
    marked ⚠."""
    marked = frame["low_variance"].astype(bool) if "low_variance" in frame else None
    flagged = set(flagged)
    cells = {}
    for column in columns:
        low, high = f"{column}_ci_low", f"{column}_ci_high"
        if low in frame:
            heading = column + CI_HEADING
            values = [estimate(*row) for row in zip(frame[column], frame[low], frame[high])]
        else:
            heading, values = column, frame[column].tolist()
        if marked is not None and column in flagged:
            values = [f"{v if isinstance(v, str) else number(v)} {FLAG}" if flag else v
                      for v, flag in zip(values, marked)]
        cells[heading] = values
    return pd.DataFrame(cells)
