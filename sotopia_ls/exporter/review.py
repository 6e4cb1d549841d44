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


def decision_counts(decisions: pd.Series, excluded: int) -> dict[str, int]:
    """Annotations per decision of ``REVIEW_DECISIONS``, then ``NOT_REVIEWED``: ``decisions``
    holds one per exported annotation (empty or missing: none), ``excluded`` the rejected ones
    the export left out, counted with reject."""
    counts = decisions.fillna("").value_counts()
    found = {decision: int(counts.get(decision, 0)) for decision in REVIEW_DECISIONS}
    return found | {REJECT: found[REJECT] + excluded, NOT_REVIEWED: int(counts.get("", 0))}


def review_table(long: pd.DataFrame, excluded: int) -> pd.DataFrame | None:
    """One row per decision, then the annotations not reviewed: ``annotations`` (excluded
    ones included), ``excluded`` and ``share`` of all the annotations; None when no annotation
    carries a decision (or ``long`` comes from an export that did not read them)."""
    if "review_decision" not in long:
        return None
    counts = decision_counts(long.drop_duplicates("annotation_id")["review_decision"], excluded)
    table = pd.DataFrame([{"decision": decision, "annotations": annotations,
                           "excluded": excluded if decision == REJECT else 0}
                          for decision, annotations in counts.items()])
    if not table["annotations"].iloc[:-1].any():
        return None
    return table.assign(share=table["annotations"] / table["annotations"].sum())
