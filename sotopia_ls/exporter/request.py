"""One export as asked for: ``sotopia-ls export``'s options in one checked, frozen value.

An option that would do nothing in the combination given is refused in one line naming it,
never ignored; ``ExportRequest.from_options`` builds the value from the command's options.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

from ..errors import SotopiaLSError
from .parallel import default_workers


def check_source(project: str | None, from_file: Path | None, with_predictions: bool,
                 *others: Path | None) -> None:
    """Exactly one source (``others``: the report's export folder), and predictions only from
    a live project."""
    if sum(source is not None for source in (project, from_file, *others)) != 1:
        names = "--project or --from-file" + (" or --from-export" if others else "")
        raise SotopiaLSError(f"give exactly one of {names}")
    if with_predictions and project is None:
        raise SotopiaLSError("--with-predictions reads a live project's predictions (an export "
                             "file lists them by id only); give --project")


@dataclass(frozen=True)
class ExportRequest:
    """What to export (a live project or an export file), where to, and how."""

    output: Path
    project: str | None = None
    from_file: Path | None = None
    url: str | None = None
    api_key: str | None = field(default=None, repr=False)
    with_predictions: bool = False
    keep_identities: bool = False
    raw_csv: bool = False
    exclude_rejected: bool = False
    workers: int = field(default_factory=default_workers)
    model_names: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    overlap: int | None = None
    studies: tuple[Path, ...] = ()
    database: str | None = None
    adjudication: str | None = None

    def __post_init__(self) -> None:
        check_source(self.project, self.from_file, self.with_predictions)
        if self.overlap is not None and self.from_file is None:
            raise SotopiaLSError("--overlap is for --from-file; a live project's is read from it")
        if self.adjudication is not None and self.project is None:
            raise SotopiaLSError("--adjudication-project goes with --project: both are read "
                                 "from Label Studio")
        if self.database is not None and not self.studies:
            raise SotopiaLSError("--database is for --study: it reads the study's gateway "
                                 "database")

    @classmethod
    def from_options(cls, *, model_names: tuple[str, ...] = (),
                     database_from_environment: bool = False, **options: object
                     ) -> ExportRequest:
        """The request ``sotopia-ls export``'s options make: ``--model-name TAG=LABEL`` pairs
        read, and a database from the environment kept only for a study (it is the default of
        every study command, not a choice made for this export)."""
        names = {}
        for pair in model_names:
            tag, sep, label = pair.partition("=")
            if not sep or not tag:
                raise SotopiaLSError(f"--model-name: {pair!r} is not TAG=LABEL")
            names[tag] = label
        if database_from_environment and not options.get("studies"):
            options["database"] = None
        return cls(model_names=MappingProxyType(names), **options)  # type: ignore[arg-type]
