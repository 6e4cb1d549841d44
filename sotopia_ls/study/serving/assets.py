"""The participant pages' static files, served by ServeStatic: each folder under an address
holding its content's hash, forever cacheable (a new release has new addresses), and gzipped
once, at the first start, into a cache folder. Why, and where, in docs/gateway.md, "Serving".
"""

from __future__ import annotations

import gzip
import hashlib
import os
import shutil
import tempfile
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from servestatic import ServeStaticASGI
from starlette.types import ASGIApp

from ...errors import StudyError
from .editor import Editor

CACHE_ENV = "SOTOPIA_LS_STATIC_CACHE"
COMPRESSED = frozenset({".js", ".css", ".svg", ".ttf", ".json", ".txt"})
SMALLEST = 1024  # smaller files gain nothing worth a second file
FONTS_SECONDS = 24 * 3600  # the editor's stylesheet asks for its fonts at a fixed address
_LEFT_OUT = (".map", ".gz")


def cache_dir() -> Path:
    """``$SOTOPIA_LS_STATIC_CACHE``, else ``sotopia-ls/static`` in the user's cache folder."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    home = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(home) / "sotopia-ls" / "static"


def _files(folder: Path) -> list[Path]:
    return sorted(path for path in folder.iterdir()
                  if path.is_file() and not path.name.startswith(".")
                  and not path.name.endswith(_LEFT_OUT))


@cache
def content_hash(folder: Path) -> str:
    """A hash of the names and bytes of the files served from ``folder``, read once per process
    (a running gateway serves the files it started with)."""
    digest = hashlib.sha256()
    for path in _files(folder):
        digest.update(f"{path.name}\0{path.stat().st_size}\0".encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def compressed_copy(folder: Path, name: str, cache: Path) -> Path:
    """``cache/<name>-<hash>``: the served files of ``folder`` and a ``.gz`` beside each that
    compresses, written once (under a temporary name, then renamed, so a gateway starting at
    the same time finds it whole or not at all)."""
    target = cache / f"{name}-{content_hash(folder)}"
    if target.is_dir():
        return target
    try:
        cache.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(dir=cache, prefix=f".{name}-"))
    except OSError as error:
        raise StudyError(f"cannot write the compressed static files into {cache} ({error}); "
                         f"set {CACHE_ENV} to a folder the gateway may write") from None
    try:
        for path in _files(folder):
            data = path.read_bytes()
            (staging / path.name).write_bytes(data)
            if path.suffix in COMPRESSED and len(data) >= SMALLEST:
                (staging / f"{path.name}.gz").write_bytes(gzip.compress(data, 9, mtime=0))
        staging.rename(target)
    except OSError:
        if not target.is_dir():  # else another gateway made it first
            raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


@dataclass(frozen=True)
class Assets:
    """Where the pages find the editor's files and the gateway's own (each address holding
    its folder's hash), and the folders served there."""

    editor: str  # "/static/editor/<hash>/"
    own: str  # "/static/<hash>/"
    folders: dict[str, Path]  # address prefix -> compressed copy

    @property
    def release(self) -> str:
        """Names what the pages run: a page made by another release loads the next anew."""
        return f"{self.editor}{self.own}"

    @classmethod
    def of(cls, editor: Editor, cache: Path | None = None) -> Assets:
        cache = cache or cache_dir()
        with resources.as_file(resources.files(__package__) / "static") as own_folder:
            own = compressed_copy(own_folder, "gateway", cache)
        app = compressed_copy(editor.folder, f"label-studio-{editor.release}", cache)
        fonts = compressed_copy(editor.fonts, "fonts", cache)
        editor_url = f"/static/editor/{app.name.rsplit('-', 1)[1]}/"
        own_url = f"/static/{own.name.rsplit('-', 1)[1]}/"
        return cls(editor_url, own_url, {editor_url: app, own_url: own, "/static/fonts/": fonts})

    def serve(self, app: ASGIApp) -> ServeStaticASGI:
        """``app`` behind the static files: gzip for a browser that takes it, cached forever
        but the fonts (a day: their address holds no hash)."""
        static = _static(app)
        static.files = _files_served(tuple(self.folders.items()))
        return static


def _static(app: ASGIApp | None) -> ServeStaticASGI:
    return ServeStaticASGI(app, max_age=FONTS_SECONDS, allow_all_origins=False,
                           mimetypes={".ttf": "font/ttf"},
                           immutable_file_test=lambda path, url: not url.startswith(
                               "/static/fonts/"))


@cache
def _files_served(folders: tuple[tuple[str, Path], ...]) -> dict[str, Any]:
    """ServeStatic's table of the files of ``folders`` (address prefix, folder), read once per
    process: each folder's name holds its content's hash, so its table never changes (and an
    app made again, as the tests make hundreds, does not stat its 700 files again)."""
    static = _static(None)
    for prefix, folder in folders:
        static.add_files(folder, prefix=prefix)
    return static.files
