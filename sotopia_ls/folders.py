"""Outputs replaced as one unit, or left exactly as they were: folders and single files.

``replaced_folder(target)`` hands out a staging folder beside ``target``; when the block ends
without an error the staging folder takes ``target``'s place by two renames, else it is
removed. Leftovers of a run that was killed (a staging folder, or the previous folder set
aside between the two renames) are cleaned up, or put back, by the next run. A folder holding
files the command did not write is never replaced: nothing of a researcher's is deleted.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from .errors import SotopiaLSError


@contextmanager
def _locked(folder: Path) -> Iterator[None]:
    """One replacing run at a time in ``folder`` (an advisory lock on the folder itself)."""
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise SotopiaLSError(
                f"another sotopia-ls run is writing into {folder}; wait for it to finish"
            ) from None
        yield
    finally:
        os.close(descriptor)


def _leftovers(target: Path, kind: str) -> list[Path]:
    return sorted(target.parent.glob(f".{target.name}.{kind}-*"))


def _clean_leftovers(target: Path) -> None:
    for staging in _leftovers(target, "staging"):
        shutil.rmtree(staging, ignore_errors=True)
    for previous in _leftovers(target, "replaced"):
        if not target.exists() and (previous / "folder").is_dir():
            (previous / "folder").rename(target)  # the run died between its two renames
        shutil.rmtree(previous, ignore_errors=True)


def _check_replaceable(target: Path, owns: Callable[[str], bool]) -> None:
    if not target.exists():
        return
    if not target.is_dir():
        raise SotopiaLSError(f"{target} is a file, not a folder")
    foreign = sorted(entry.name for entry in target.iterdir() if not owns(entry.name))
    if foreign:
        shown = ", ".join(foreign[:5]) + (" …" if len(foreign) > 5 else "")
        raise SotopiaLSError(
            f"{target} holds files this command does not write ({shown}); give an empty or "
            "new folder, or the folder of an earlier run"
        )


@contextmanager
def replaced_folder(target: Path, owns: Callable[[str], bool]) -> Iterator[Path]:
    """A staging folder that replaces ``target`` as one unit when the block succeeds.

    ``owns(name)`` tells the entries of an existing ``target`` that an earlier run of the same
    command wrote; any other entry stops the run before anything is written.
    """
    target = target.absolute()
    _check_folder_for(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    with _locked(target.parent):
        _clean_leftovers(target)
        _check_replaceable(target, owns)
        staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.staging-", dir=target.parent))
        try:
            yield staging
            if target.exists():
                previous = Path(tempfile.mkdtemp(prefix=f".{target.name}.replaced-",
                                                 dir=target.parent))
                target.rename(previous / "folder")
                staging.rename(target)
                shutil.rmtree(previous)
            else:
                staging.rename(target)
        finally:
            shutil.rmtree(staging, ignore_errors=True)


def _check_folder_for(path: Path) -> None:
    """Refuse a path whose nearest existing ancestor is a file: told plainly, before anything
    is made."""
    for ancestor in path.parents:
        if ancestor.exists():
            if not ancestor.is_dir():
                raise SotopiaLSError(f"{ancestor} is a file, not a folder")
            return


def write_file(path: Path, text: str, mode: int = 0o644) -> Path:
    """``text`` as the whole of ``path``: written beside it, then renamed into place, so a
    failure leaves the old file (or none), never half a new one. Only a regular file is ever
    replaced: a device or a folder at ``path`` is refused. ``mode`` is narrowed by the umask."""
    path = path.absolute()
    if path.exists() and not path.is_file():
        raise SotopiaLSError(f"{path} is not a regular file; give a file to write")
    _check_folder_for(path)
    descriptor, partial = tempfile.mkstemp(prefix=f".{path.name}.partial-", dir=path.parent)
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as out:
            out.write(text)
        os.chmod(partial, mode & ~_umask())
        os.replace(partial, path)
    except BaseException as error:
        Path(partial).unlink(missing_ok=True)
        if isinstance(error, OSError) and error.filename is None:
            # A failed write (a full disk) names no file: the file meant is ``path``.
            raise OSError(error.errno, error.strerror, str(path)) from error
        raise
    return path


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current
