"""Time on task in the report: the minutes a study's rating page was visible and focused, per
rating and per participant.

Read from the export's ``visible_minutes`` column (``tables.TIME_COLUMNS``), which only
annotations made through a study's gateway carry (``sotopia-ls export --study``), so
``report --from-export`` shows it as well. Label Studio's lead time, which counts while the
participant is in another tab, is not mixed in: it stays in the annotators' table.
"""

from __future__ import annotations

import pandas as pd

QUARTILES = (0.25, 0.5, 0.75)


def _quartiles(per: str, minutes: pd.Series, of: int) -> dict[str, object]:
    low, median, high = minutes.quantile(QUARTILES)
    return {"per": per, "measured": len(minutes), "of": of, "lower_quartile_minutes": low,
            "median_minutes": median, "upper_quartile_minutes": high}


def time_on_task_table(long: pd.DataFrame) -> pd.DataFrame | None:
    """The quartiles of the visible minutes of each rating (an annotation) and of each
    participant (the sum of their measured ratings), with how many were ``measured`` ``of``
    all the ratings and participants in ``long``; None when no rating carries a measure (or
    ``long`` comes from an export made before the column)."""
    if "visible_minutes" not in long:
        return None
    ratings = long.drop_duplicates("annotation_id")
    measured = ratings.dropna(subset=["visible_minutes"])
    if measured.empty:
        return None
    per_participant = measured.groupby("annotator_id")["visible_minutes"].sum()
    return pd.DataFrame([
        _quartiles("rating", measured["visible_minutes"], len(ratings)),
        _quartiles("participant", per_participant, ratings["annotator_id"].nunique()),
    ])
