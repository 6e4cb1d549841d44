"""What accounts for every annotation of an export: the counts (``Tally``), each refusal
(``ErrorRow``, a line of ``errors.jsonl``) and each audit finding (``Finding``, a line of
``audit.jsonl``). Workers make them for their chunk (``validate``); the parent joins and
completes them (``collection``)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any


@dataclass(frozen=True)
class ErrorRow:
    """One reason an annotation was refused; a line of ``errors.jsonl``."""

    task_id: int | None
    annotation_id: int | None
    annotator: str
    field: str
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Finding:
    """Something the export saw that a study should not have: a line of ``audit.jsonl``.

    ``kind`` is one of ``AUDIT_KINDS``."""

    kind: str
    task_id: int | None
    annotation_id: int | None
    annotator: str
    detail: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


AUDIT_KINDS: tuple[str, ...] = (
    "edited_by_another_user", "more_annotations_than_overlap", "repeated_annotator",
    "episode_in_several_tasks",
)


@dataclass
class Tally:
    """Counts that account for every annotation:
    ``total = exported + rejected + cancelled + excluded``, ``excluded`` being the annotations
    the study review marked reject, left out when asked (``Settings.exclude_rejected``)."""

    tasks: int = 0
    total: int = 0
    exported: int = 0
    rejected: int = 0
    cancelled: int = 0
    duplicates: int = 0
    ground_truth: int = 0
    drafts: int = 0
    invalid_model_evaluations: int = 0
    excluded: int = 0

    @property
    def balanced(self) -> bool:
        return self.total == self.exported + self.rejected + self.cancelled + self.excluded

    def reconciliation(self) -> str:
        excluded = f" + {self.excluded} excluded by review" if self.excluded else ""
        return (
            f"{self.total} annotations = {self.exported} exported + {self.rejected} rejected "
            f"+ {self.cancelled} cancelled/skipped{excluded}"
        )

    def add(self, other: Tally) -> None:
        for name in (f.name for f in fields(self)):
            setattr(self, name, getattr(self, name) + getattr(other, name))


def repeat_refusal(task_id: int, annotation_id: int, annotator: str, reason: str
                   ) -> tuple[ErrorRow, Finding]:
    """An annotator's earlier rating of an episode they rated again: refused, and audited."""
    return (ErrorRow(task_id, annotation_id, annotator, "", reason),
            Finding("repeated_annotator", task_id, annotation_id, annotator, reason))
