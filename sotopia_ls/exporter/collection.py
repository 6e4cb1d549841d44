"""Collect, in the parent: the parts of every chunk joined in input order into a
``Collection``, then settled once every chunk is in: what only the whole export shows (an
episode in several tasks, an annotator counted once per episode), the tallies, the audit and
the summary.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import pandas as pd

from ..labelstudio.tasks import REVIEW_DECISIONS
from .accounting import AUDIT_KINDS, ErrorRow, Finding, Tally, repeat_refusal
from .review import decision_counts
from .tables import annotation_table
from .validate import ModelRow, Part, Rated

if TYPE_CHECKING:
    import pyarrow as pa

MODEL_SCORE_COLUMNS: tuple[str, ...] = ("episode_id", "agent", "dimension", "score", "evaluator",
                                        "agent_model", "rated")


@dataclass(frozen=True)
class Repeats:
    """What episodes found in several tasks change, by row: each exported annotation's number
    in input order (its line of ``annotations.jsonl``).

    ``several_tasks`` maps each such episode to its tasks; ``refused`` are the rows of
    annotations an annotator replaced by rating the episode again in another task;
    ``aggregated`` the crowd rows of those episodes that remain, in input order, which
    ``episodes.jsonl`` aggregates once every chunk is in."""

    several_tasks: dict[str, list[int]] = field(default_factory=dict)
    refused: list[int] = field(default_factory=list)
    aggregated: list[int] = field(default_factory=list)


@dataclass
class Collection:
    """Parts joined in input order; ``settle`` once the last is in."""

    tally: Tally = field(default_factory=Tally)
    tables: list[pa.Table] = field(default_factory=list)
    errors: list[ErrorRow] = field(default_factory=list)
    model_rows: dict[str, list[ModelRow]] = field(default_factory=dict)
    rated: list[Rated] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    identities: dict[str, str] = field(default_factory=dict)
    repeats: Repeats = field(default_factory=Repeats)

    def add(self, part: Part) -> None:
        self.tally.add(part.tally)
        if part.table is not None:
            self.tables.append(part.table)
        errors, findings = len(self.errors), len(self.findings)
        self.errors.extend(part.errors)
        for episode, rows in part.model_rows.items():
            self.model_rows.setdefault(episode, rows)
        # Where a task's refusals and findings end, counted in the whole export's lists.
        self.rated.extend((*key[:5], key[5] + errors, key[6] + findings) for key in part.rated)
        self.findings.extend(part.findings)
        self.identities.update(part.identities)

    def settle(self) -> None:
        """Refuse every annotation its annotator replaced by rating the same episode again in
        another task, as the refusals of its own task: one annotator is one rating of an
        episode."""
        several = _several_tasks(self.rated)
        if not several:
            return
        later = _superseded(self.rated)
        refused = [row for row, key in enumerate(self.rated) if key[3] in later]
        self.repeats = Repeats(several, refused, [
            row for row, (episode, _, _, annotation, ground_truth, _, _) in enumerate(self.rated)
            if episode in several and not ground_truth and annotation not in later
        ])
        refusals = []
        for row in refused:
            episode, task, annotator, annotation, ground_truth, errors_at, findings_at = (
                self.rated[row])
            reason = (f"duplicate: the same annotator also annotated episode {episode} in "
                      f"another task (annotation {later[annotation]}); only the latest is kept")
            refusals.append((errors_at, findings_at, *repeat_refusal(task, annotation,
                                                                     annotator, reason)))
            self.tally.ground_truth -= ground_truth
        self.errors = _inserted(self.errors, [(at, error) for at, _, error, _ in refusals])
        self.findings = _inserted(self.findings,
                                  [(at, finding) for _, at, _, finding in refusals])
        self.tally.duplicates += len(refused)
        self.tally.rejected += len(refused)
        self.tally.exported -= len(refused)
        self.tables = [self.table().filter(_kept_mask(len(self.rated), refused))]

    def audit_findings(self) -> list[Finding]:
        """Every finding, and one for each episode found in several tasks."""
        return self.findings + [
            Finding("episode_in_several_tasks", tasks[0], None, "",
                    f"episode {episode} is in tasks {', '.join(map(str, tasks))}")
            for episode, tasks in self.repeats.several_tasks.items()
        ]

    def audit(self) -> dict[str, int]:
        """How many findings of each kind."""
        findings = self.audit_findings()
        return {kind: sum(f.kind == kind for f in findings) for kind in AUDIT_KINDS}

    def review(self) -> dict[str, int]:
        """How many annotations the study review marked with each decision: those exported
        and, for reject, those excluded (as the report's review table counts them)."""
        counts = decision_counts(self.table().column("review_decision").to_pandas(),
                                 self.tally.excluded)
        return {decision: counts[decision] for decision in REVIEW_DECISIONS}

    def summary(self, unlogged: dict[str, str]) -> dict[str, Any]:
        """``summary.json``: the counts, the audit's, the review's decisions, the episodes
        found in several tasks and those ``unlogged`` (without an ``EpisodeLog``, and why)."""
        return asdict(self.tally) | {
            "balanced": self.tally.balanced, "audit": self.audit(), "review": self.review(),
            "episodes_in_several_tasks": self.repeats.several_tasks,
            "episodes_without_episode_log": unlogged,
        }

    def table(self) -> pa.Table:
        """One row per exported annotation: identifiers, timing and the oTree fields."""
        import pyarrow as pa

        self.tables = [pa.concat_tables(self.tables or [annotation_table([])])]
        return self.tables[0]

    def error_table(self) -> pd.DataFrame:
        return pd.DataFrame(
            [error.to_dict() for error in self.errors],
            columns=["task_id", "annotation_id", "annotator", "field", "reason"],
        )

    def model_scores(self) -> pd.DataFrame:
        """Every episode's model evaluations, people rated it or not (``rated``: an exported
        annotation of the crowd): one row per episode × judge × agent × dimension, the judge
        named in ``evaluator``, the agent's model in ``agent_model``."""
        rated = {key[0] for key in self.rated if not key[4]}
        return pd.DataFrame([(*row, row[0] in rated) for rows in self.model_rows.values()
                             for row in rows], columns=list(MODEL_SCORE_COLUMNS))


def _several_tasks(rated: list[Rated]) -> dict[str, list[int]]:
    """``episode → its task ids`` for every episode found in more than one task."""
    first: dict[str, int] = {}
    several: dict[str, set[int]] = {}
    for episode, task, *_ in rated:
        if first.setdefault(episode, task) != task:
            several.setdefault(episode, {first[episode]}).add(task)
    return {episode: sorted(ids) for episode, ids in several.items()}


def _superseded(rated: list[Rated]) -> dict[int, int]:
    """``annotation → the same annotator's later annotation of the same episode`` in another
    task (within a task, validation kept only the latest)."""
    latest: dict[tuple[str, str], int] = {}
    superseded: dict[int, int] = {}
    for episode, _, annotator, annotation, *_ in sorted(rated, key=lambda key: key[3]):
        earlier = latest.get((episode, annotator))
        if earlier is not None:
            superseded[earlier] = annotation
        latest[(episode, annotator)] = annotation
    return superseded


def _inserted(items: list[Any], insertions: list[tuple[int, Any]]) -> list[Any]:
    """``items`` with each ``(position, item)`` put before ``items[position]``, those of one
    position in the order given (positions ascending)."""
    result, done = [], 0
    for position, item in insertions:
        result += items[done:position]
        result.append(item)
        done = position
    return result + items[done:]


def _kept_mask(count: int, refused: list[int]) -> pa.Array:
    import numpy as np
    import pyarrow as pa

    kept = np.ones(count, dtype=bool)
    kept[refused] = False
    return pa.array(kept)
