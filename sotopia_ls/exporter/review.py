"""The study review's decisions in the report: how many of the crowd's annotations each
decision marks, how many were excluded, and each decision's share.

The decisions come from the export's ``review_decision`` column (read from the tasks' meta,
``tasks.REVIEW``); annotations marked reject that the export left out (``--exclude-rejected``)
are only counted, in ``Tally.excluded``.
"""

from __future__ import annotations

import pandas as pd

from ..labelstudio.tasks import REJECT, REVIEW_DECISIONS

NOT_REVIEWED = "not reviewed"


def review_table(long: pd.DataFrame, excluded: int) -> pd.DataFrame | None:
    """One row per decision, then the annotations not reviewed: ``annotations`` (excluded
    ones included), ``excluded`` and ``share`` of all the annotations; None when no annotation
    carries a decision (or ``long`` comes from an export that did not read them)."""
    if "review_decision" not in long:
        return None
    decisions = long.drop_duplicates("annotation_id")["review_decision"].fillna("")
    counts = decisions.value_counts()
    left_out = {REJECT: excluded}
    table = pd.DataFrame(
        [{"decision": decision,
          "annotations": int(counts.get(decision, 0)) + left_out.get(decision, 0),
          "excluded": left_out.get(decision, 0)} for decision in REVIEW_DECISIONS]
        + [{"decision": NOT_REVIEWED, "annotations": int(counts.get("", 0)), "excluded": 0}])
    if not table["annotations"].iloc[:-1].any():
        return None
    return table.assign(share=table["annotations"] / table["annotations"].sum())
