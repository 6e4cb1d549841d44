"""Label Studio's labeling editor for the participant page: one pinned release, checked.

The participant page runs Label Studio's own editor on our labeling config, so participants
see exactly the screen annotators see in Label Studio, without Label Studio around it. The
editor comes from the npm package ``@heartexlabs/label-studio`` 1.4.0 (Apache-2.0): its
``build/static`` holds one self-contained UMD script that sets ``window.LabelStudio`` and loads
nothing else, and its stylesheet (the 1.8.0 tarball no longer has ``build/``).

``fetch_editor`` downloads the release's tarball with httpx, checks it against the registry's
``dist.integrity`` (sha512) before reading a byte of it, and extracts only the four files the
page needs (the script, the stylesheet and both licence files) under fixed names, each checked
against its own sha256. Node is never needed. The files live outside the installed package, in
``var/editor/label-studio-1.4.0/`` of the current folder or the folder named by
``SOTOPIA_LS_EDITOR_DIR``; ``check_editor`` refuses a folder whose files are missing or differ.
"""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import tarfile
from pathlib import Path

import httpx

from ..errors import StudyError
from ..folders import replaced_folder

PACKAGE = "@heartexlabs/label-studio"
VERSION = "1.4.0"
TARBALL_URL = "https://registry.npmjs.org/@heartexlabs/label-studio/-/label-studio-1.4.0.tgz"
# The registry's dist.integrity for that tarball (Subresource Integrity form).
INTEGRITY = (
    "sha512-NczF2gDF/Whq7+xI3tYZLrAk8Pq6hacXhYEDmWfHAQIZ0eiieyrMxxHz4KIU7wnagComaGv+QJ2Zc6SBcBmuCg=="
)
# Tarball member → (name served, sha256 of its bytes).
FILES: dict[str, tuple[str, str]] = {
    "package/build/static/js/main.js":
        ("main.js", "231219b8ed42826185320d13d907615cc1e3f16755b6a5af62117611453a39ef"),
    "package/build/static/css/main.css":
        ("main.css", "818ed51653bd39069e2fe0204fb84aa7095a5e47db27cae8fad7490bf59c88a8"),
    "package/LICENSE":
        ("LICENSE", "a521e1bc8db64bb04100212882b4867034a5abc3a12587b44a777494978a7d2e"),
    "package/build/static/js/main.js.LICENSE.txt":
        ("main.js.LICENSE.txt", "60a9d2e7024fdecbda90d1736c270c16a743dee9876716639591513c3f0350e6"),
}
SERVED = frozenset(name for name, _ in FILES.values())
EDITOR_DIR_ENV = "SOTOPIA_LS_EDITOR_DIR"
FETCH_COMMAND = "sotopia-ls study fetch-editor"


def editor_dir() -> Path:
    """``$SOTOPIA_LS_EDITOR_DIR``, else ``var/editor/label-studio-1.4.0`` of the current folder."""
    return Path(os.environ.get(EDITOR_DIR_ENV) or Path("var") / "editor" / f"label-studio-{VERSION}")


def _digest(path: Path, algorithm: str) -> bytes:
    with path.open("rb") as file:
        return hashlib.file_digest(file, algorithm).digest()


def problems(folder: Path) -> list[str]:
    """What is wrong with the editor files in ``folder``; empty when all four are as pinned."""
    found = []
    for name, expected in FILES.values():
        path = folder / name
        if not path.is_file():
            found.append(f"{name} is missing")
        elif _digest(path, "sha256").hex() != expected:
            found.append(f"{name} differs from {PACKAGE} {VERSION}")
    return found


def check_editor(folder: Path) -> Path:
    """``folder`` when it holds the pinned editor files, else ``StudyError`` with the fix."""
    wrong = problems(folder)
    if wrong:
        raise StudyError(
            f"the labeling editor in {folder} is not usable ({'; '.join(wrong)}): run "
            f"`{FETCH_COMMAND}`, or set {EDITOR_DIR_ENV} to the folder it wrote"
        )
    return folder


def _integrity(path: Path) -> str:
    return "sha512-" + base64.b64encode(_digest(path, "sha512")).decode("ascii")


def _download(url: str, target: Path) -> None:
    try:
        with httpx.stream("GET", url, follow_redirects=True, timeout=60) as response:
            response.raise_for_status()
            with target.open("wb") as out:
                for block in response.iter_bytes():
                    out.write(block)
    except httpx.HTTPError as error:
        raise StudyError(f"could not download {PACKAGE} {VERSION}: {error}") from error


def _extract(tarball: Path, folder: Path) -> None:
    """The four pinned members only, under their fixed names: no path in the tarball is used."""
    with tarfile.open(tarball, "r:gz") as archive:
        for member, (name, _) in FILES.items():
            source = archive.extractfile(member)
            if source is None:
                raise StudyError(f"{PACKAGE} {VERSION} has no file {member}")
            with source, (folder / name).open("wb") as out:
                shutil.copyfileobj(source, out)


def fetch_editor(folder: Path | None = None, *, url: str = TARBALL_URL) -> Path:
    """Download, verify and extract the pinned editor into ``folder`` (default ``editor_dir()``).

    Does nothing when the folder already holds the right files. The folder is replaced as a
    whole, so an interrupted run leaves no half-written editor behind, and a folder holding
    anything but the editor's files is refused, never emptied.
    """
    folder = folder or editor_dir()
    if not problems(folder):
        return folder
    with replaced_folder(folder, SERVED.__contains__) as staging:
        tarball = staging / "editor.tgz"
        _download(url, tarball)
        if _integrity(tarball) != INTEGRITY:
            raise StudyError(f"the downloaded {PACKAGE} {VERSION} does not match its pinned "
                             "integrity; nothing was installed")
        _extract(tarball, staging)
        tarball.unlink()
        wrong = problems(staging)
        if wrong:
            raise StudyError(f"{PACKAGE} {VERSION}: {'; '.join(wrong)}; nothing was installed")
    return folder
