"""Exceptions raised by sotopia_ls, so callers know what to catch.

    SotopiaLSError
    ├── InvalidRubric, InvalidInput (every Problem), UnknownFormat, InvalidLabelingConfig
    ├── StudyError (the gateway cannot run as configured), JudgeRefused
    └── LabelStudioError (project/task ids)
        ├── ProjectNotFound, ImportOutcomeUnknown

SDK and HTTP errors become ``LabelStudioError`` at the client boundary, chained with ``from``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# Keys and passwords the package was handed this run; no message may carry them.
_SECRETS: set[str] = set()
# The credentials part of a URL: http://user:password@host
_URL_CREDENTIALS = re.compile(r"(?<=://)[^/@\s]+@")


def keep_secret(secret: str) -> None:
    """From now on, ``secret`` is cut out of every message of this package."""
    if secret.strip():
        _SECRETS.add(secret)
        _SECRETS.add(secret.strip())


# A header value may hold no control character; a key read from a CRLF file ends in one.
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def header_problem(key: str, charset: str) -> str | None:
    """Why ``key`` cannot go into an HTTP header sent in ``charset`` (the HTTP library's), as
    the end of a sentence that never quotes it; None when it can."""
    if _CONTROL.search(key):
        return ("holds a line break or another control character (read from a file with CRLF "
                "line ends?); remove it")
    try:
        key.encode(charset)
    except UnicodeEncodeError:
        return (f"holds a character an HTTP header cannot carry (not {charset}: a typographic "
                "quote or dash pasted with it?); remove it")
    return None


def redacted(text: str) -> str:
    """``text`` without any secret handed to the package and without URL credentials."""
    for secret in sorted(_SECRETS, key=len, reverse=True):
        text = text.replace(secret, "***")
    return _URL_CREDENTIALS.sub("***@", text)


@dataclass(frozen=True)
class Problem:
    """One invalid record: where it is and why it was refused."""

    file: str
    record: str
    reason: str
    field: str = ""

    def __str__(self) -> str:
        where = f"{self.file}" + (f" [{self.record}]" if self.record else "")
        field = f" {self.field}:" if self.field else ""
        return f"{where}:{field} {self.reason}"


class SotopiaLSError(Exception):
    """Base of every error this package raises on purpose; its message is never a secret's
    carrier (``redacted``)."""

    def __str__(self) -> str:
        return redacted(super().__str__())


class InvalidInput(SotopiaLSError):
    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        lines = "\n".join(f"  {problem}" for problem in problems[:20])
        more = f"\n  … and {len(problems) - 20} more" if len(problems) > 20 else ""
        super().__init__(f"{len(problems)} invalid record(s):\n{lines}{more}")

    def __reduce__(self) -> tuple[type, tuple[list[Problem]]]:
        # Raised in export worker processes and pickled back to the parent.
        return type(self), (self.problems,)


class InvalidRubric(SotopiaLSError):
    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        super().__init__(f"rubric {path}: {reason}")


class UnknownFormat(SotopiaLSError):
    def __init__(self, path: str, reason: str, accepted: list[str]) -> None:
        self.path = path
        self.accepted = accepted
        super().__init__(f"{path}: {reason}; accepted formats: {', '.join(accepted)}")


class InvalidLabelingConfig(SotopiaLSError):
    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        lines = "\n".join(f"  {problem}" for problem in problems[:5])
        more = f"\n  … and {len(problems) - 5} more" if len(problems) > 5 else ""
        super().__init__(f"invalid labeling config:\n{lines}{more}")


class LabelStudioError(SotopiaLSError):
    """``status``: the HTTP status Label Studio answered with, None when it gave none (the
    connection failed) or when the error is this package's own finding."""

    def __init__(self, message: str, *, project: int | None = None, task: int | None = None,
                 status: int | None = None):
        self.project = project
        self.task = task
        self.status = status
        context = ", ".join(
            f"{name} {value}" for name, value in (("project", project), ("task", task)) if value
        )
        super().__init__(f"{message} ({context})" if context else message)

    @property
    def permanent(self) -> bool:
        """Label Studio refused the request itself (a 4xx): sending it again changes nothing
        until someone changes its cause. A timeout (408) or throttling (429) is not that."""
        return self.status is not None and 400 <= self.status < 500 and self.status not in (
            408, 429)


class ProjectNotFound(LabelStudioError):
    pass


class ImportOutcomeUnknown(LabelStudioError):
    pass


class StudyError(SotopiaLSError):
    pass


class JudgeRefused(SotopiaLSError):
    pass
