"""Label Studio's own labeling editor for the participant page: the release its server runs.

The page loads the web app's webpack chunks as the app does, read from the release's own files,
so a later release needs no change here. Where the files come from, and why, is in README.md,
"The editor", and docs/gateway.md, "Serving".
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from ...errors import StudyError
from ...folders import replaced_folder

DISTRIBUTION = "label-studio"
PINNED = "1.23.2"
# The sha256 of label_studio-1.23.2-py3-none-any.whl as published on PyPI.
WHEEL_SHA256 = "c575b2552d0b271554224c5e56ab2ce9449c6e62a0b4851bc8c706d8fe651137"
APP = "web/dist/apps/labelstudio"
FONTS = "label_studio/core/static/fonts"
# The app's stylesheets ask for these at /static/fonts/; nothing else outside the app is used.
FONT_FILES = ("Figtree-Regular.ttf", "Figtree-SemiBold.ttf")
RELEASE_FILE = "release.json"
EDITOR_DIR_ENV = "SOTOPIA_LS_EDITOR_DIR"
FETCH_COMMAND = "sotopia-ls study fetch-editor"

_CHUNK_LIST = re.compile(r"self\.(webpackChunk\w+)=self\.webpackChunk\w+\|\|\[\]")
_CHUNK_ID = re.compile(rb"\.push\(\[\[(\d+)\]")
_ENTRY_NEEDS = re.compile(r"\w\.O\(0,\[([\d,]*)\],")
_IMPORT = re.compile(r"Promise\.all\(\[((?:\w\.e\(\d+\),?)+)\]\)\.then\(\w\.bind\(\w,(\d+)\)\)")
_DEFINES_EDITOR = b"window.LabelStudio="


@dataclass(frozen=True)
class Loader:
    """How the page loads the editor from a release's webpack build."""

    chunk_list: str  # the global array through which chunks register with the runtime
    scripts: tuple[str, ...]  # loaded in order by the page: the runtime, shared chunks, the entry
    stylesheet: str  # the app's stylesheet: its fonts and colours, which the editor uses
    entry: int  # the app's entry chunk: its modules are needed, its start is not
    chunks: tuple[int, ...]  # the editor's chunks, loaded through the runtime
    module: int  # the module that sets window.LabelStudio

    def for_page(self) -> dict[str, object]:
        return {"chunkList": self.chunk_list, "entry": self.entry, "chunks": list(self.chunks),
                "module": self.module}


@dataclass(frozen=True)
class Editor:
    """A release of the editor: its app folder, its fonts, how to load it, where it came from."""

    folder: Path
    fonts: Path
    release: str
    source: str
    loader: Loader


def _first_bytes(path: Path) -> bytes:
    with path.open("rb") as file:
        return file.read(400)


def read_loader(folder: Path) -> Loader:
    """The loading recipe of the web app in ``folder``, or ``StudyError`` naming what is not
    where a Label Studio build keeps it."""
    def need(found: object, what: str) -> None:
        if not found:
            raise StudyError(f"{folder} does not hold Label Studio's web app as expected: {what} "
                             f"not found; run `{FETCH_COMMAND}`, or set {EDITOR_DIR_ENV} to the "
                             "folder it wrote")

    runtime, entry = folder / "runtime.js", folder / "main.js"
    need(runtime.is_file() and entry.is_file(), "runtime.js and main.js")
    chunk_list = _CHUNK_LIST.search(runtime.read_text(encoding="utf-8"))
    need(chunk_list, "the runtime's chunk list")
    files = {int(match.group(1)): path.name for path in sorted(folder.glob("*.js"))
             if (match := _CHUNK_ID.search(_first_bytes(path)))}
    entry_id = next((chunk for chunk, name in files.items() if name == entry.name), None)
    need(entry_id is not None, "main.js's chunk id")
    code = entry.read_text(encoding="utf-8")
    needs = _ENTRY_NEEDS.findall(code[-2000:])
    need(needs, "main.js's start")
    shared = [int(chunk) for chunk in needs[-1].split(",") if chunk]
    need(all(chunk in files for chunk in shared), "the app's shared chunks")
    editor = None
    for match in _IMPORT.finditer(code):
        chunks = tuple(int(chunk) for chunk in re.findall(r"\d+", match.group(1)))
        last = folder / f"{chunks[-1]}.js"
        if last.is_file() and _DEFINES_EDITOR in last.read_bytes():
            editor = (chunks, int(match.group(2)))
            break
    need(editor, "the editor's chunks")
    assert editor is not None
    absent = [f"{chunk}.js" for chunk in editor[0]
              if chunk not in shared and not (folder / f"{chunk}.js").is_file()]
    need(not absent, f"the editor's chunk files {', '.join(absent)}")
    assert entry_id is not None  # for the type checker: need() raised
    return Loader(chunk_list=chunk_list.group(1),
                  scripts=("runtime.js", *(files[chunk] for chunk in shared), entry.name),
                  stylesheet="main.css", entry=entry_id, chunks=editor[0], module=editor[1])


def _editor(folder: Path, fonts: Path, release: str, source: str) -> Editor:
    missing = [name for name in FONT_FILES if not (fonts / name).is_file()]
    if missing:
        raise StudyError(f"{fonts} lacks {', '.join(missing)}: run `{FETCH_COMMAND}`")
    return Editor(folder, fonts, release, source, read_loader(folder))


def fetched_editor(folder: Path) -> Editor:
    """The editor ``study fetch-editor`` wrote into ``folder``."""
    try:
        release = json.loads((folder / RELEASE_FILE).read_text(encoding="utf-8"))["release"]
    except (OSError, ValueError, KeyError, TypeError):
        raise StudyError(f"{folder} holds no editor written by `{FETCH_COMMAND}` (no readable "
                         f"{RELEASE_FILE}); run it, or set {EDITOR_DIR_ENV} to the folder it "
                         "wrote") from None
    return _editor(folder / "app", folder / "fonts", str(release), f"fetched into {folder}")


def installed_editor() -> Editor | None:
    """The editor of the installed ``label-studio`` package, if there is one."""
    try:
        distribution = metadata.distribution(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return None
    folder = Path(str(distribution.locate_file(APP)))
    fonts = Path(str(distribution.locate_file(FONTS)))
    return _editor(folder, fonts, distribution.version, "the installed label-studio package")


def fetch_dir() -> Path:
    """``$SOTOPIA_LS_EDITOR_DIR``, else ``var/editor/label-studio-<PINNED>`` of the current
    folder: where ``study fetch-editor`` writes."""
    return Path(os.environ.get(EDITOR_DIR_ENV) or Path("var") / "editor" / f"label-studio-{PINNED}")


def find_editor() -> Editor:
    """The editor the participant page runs (the module's docstring says which)."""
    if os.environ.get(EDITOR_DIR_ENV):
        return fetched_editor(fetch_dir())
    installed = installed_editor()
    if installed is not None:
        return installed
    if fetch_dir().exists():
        return fetched_editor(fetch_dir())
    raise StudyError(f"no Label Studio editor for the participant page: install label-studio "
                     f"(the server extra) or run `{FETCH_COMMAND}`")


def release_notice(editor: Editor, server_release: str | None) -> str:
    """One line on which editor participants get, and whether the server runs the same."""
    line = f"participant editor: Label Studio {editor.release}, from {editor.source}"
    if server_release is None or server_release == editor.release:
        return line
    return (f"{line}; WARNING: the Label Studio server runs {server_release}, so participants "
            "and annotators may see different screens (install the server's release beside "
            f"the gateway, or `{FETCH_COMMAND}` for {PINNED})")


def _download(staging: Path) -> Path:
    """The pinned wheel, by pip: its own index settings (``PIP_INDEX_URL``, pip.conf) apply."""
    requirements = staging / "requirements.txt"
    requirements.write_text(f"{DISTRIBUTION}=={PINNED} --hash=sha256:{WHEEL_SHA256}\n")
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
               "--require-hashes", "--disable-pip-version-check", "--quiet",
               "-r", str(requirements), "-d", str(staging / "wheel")]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    wheels = list((staging / "wheel").glob("*.whl"))
    if done.returncode != 0 or len(wheels) != 1:
        reason = " ".join((done.stderr.strip().splitlines() or ["no wheel"])[-1].split())
        raise StudyError(f"could not download {DISTRIBUTION} {PINNED} with its pinned sha256 "
                         f"{WHEEL_SHA256} (pip: {reason}); nothing was installed")
    return wheels[0]


def _extract(wheel: Path, staging: Path) -> None:
    """The web app (source maps left out) and the two fonts, under fixed folders: a member is
    written only where its name, relative to its folder, is a plain file name."""
    wanted = {f"{APP}/": staging / "app", f"{FONTS}/": staging / "fonts"}
    with zipfile.ZipFile(wheel) as archive:
        for member in archive.infolist():
            for prefix, target in wanted.items():
                name = member.filename.removeprefix(prefix)
                if (name == member.filename or "/" in name or not name or name.endswith(".map")
                        or (target.name == "fonts" and name not in FONT_FILES)):
                    continue
                target.mkdir(exist_ok=True)
                (target / name).write_bytes(archive.read(member))


def fetch_editor(folder: Path | None = None) -> Editor:
    """Download the pinned ``label-studio`` wheel (sha256 required), and keep its editor in
    ``folder`` (default ``fetch_dir()``). Nothing is downloaded when the
    folder already holds it. The folder is replaced as a whole, so an interrupted run leaves no
    half-written editor, and a folder holding anything else is refused, never emptied."""
    folder = folder or fetch_dir()
    try:
        current = fetched_editor(folder)
    except StudyError:
        current = None
    if current is not None and current.release == PINNED:
        return current
    with replaced_folder(folder, {"app", "fonts", RELEASE_FILE}.__contains__) as staging:
        with tempfile.TemporaryDirectory() as downloads:
            _extract(_download(Path(downloads)), staging)
        (staging / RELEASE_FILE).write_text(json.dumps({"release": PINNED}) + "\n")
        fetched_editor(staging)
    return fetched_editor(folder)
