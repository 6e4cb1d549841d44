"""Label Studio's editor for a gateway host without Label Studio installed.

`study fetch-editor` downloads the pinned label-studio wheel with pip, its sha256 required, and
keeps only the web app and its two fonts; the gateway refuses a folder that does not hold the
editor, by name. pip's only index is a real local HTTP server (a PEP 503 "simple" index)
serving a small wheel made here from the installed package's own files, pinned in the real
wheel's place.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import threading
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from importlib import metadata
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import invoke
from study_support import make_study

from sotopia_ls.cli import main
from sotopia_ls.errors import StudyError
from sotopia_ls.labelstudio.server import LocalServer
from sotopia_ls.study.serving import editor
from sotopia_ls.study.serving.editor import (
    APP,
    DISTRIBUTION,
    EDITOR_DIR_ENV,
    FETCH_COMMAND,
    FONT_FILES,
    FONTS,
    PINNED,
    fetched_editor,
    installed_editor,
    read_loader,
    release_notice,
)
from sotopia_ls.study.settings import SECRET_ENV

INSTALLED = installed_editor()
assert INSTALLED is not None, "the tests run with the server extra: label-studio installed"
# What the participant page needs of the web app: its scripts, its stylesheet, and the editor's
# chunks that are files of their own (the last defines window.LabelStudio).
EDITOR_CHUNK = f"{INSTALLED.loader.chunks[-1]}.js"
APP_FILES = {*INSTALLED.loader.scripts, INSTALLED.loader.stylesheet,
             *(f"{chunk}.js" for chunk in INSTALLED.loader.chunks
               if (INSTALLED.folder / f"{chunk}.js").is_file())}


def _installed(path: str) -> Path:
    return Path(str(metadata.distribution(DISTRIBUTION).locate_file(path)))


def _wheel(folder: Path) -> Path:
    """A wheel of the pinned release holding the app's needed files, a source map and the
    fonts: what the real wheel holds of them, with just enough metadata for pip."""
    wheel = folder / f"label_studio-{PINNED}-py3-none-any.whl"
    info = f"label_studio-{PINNED}.dist-info"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as archive:
        for name in (*APP_FILES, "main.css.map"):
            archive.write(_installed(f"{APP}/{name}"), f"{APP}/{name}")
        for name in FONT_FILES:
            archive.write(_installed(f"{FONTS}/{name}"), f"{FONTS}/{name}")
        archive.writestr(f"{info}/METADATA",
                         f"Metadata-Version: 2.1\nName: {DISTRIBUTION}\nVersion: {PINNED}\n")
        archive.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: tests\n"
                         "Root-Is-Purelib: true\nTag: py3-none-any\n")
    return wheel


@dataclass
class Index:
    wheel: Path
    requests: list[str] = field(default_factory=list)

    def wheel_requests(self) -> list[str]:
        return [path for path in self.requests if path.endswith(".whl")]


@pytest.fixture
def index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Index]:
    """pip's only index, serving ``_wheel``; it records the paths it was asked for."""
    served = tmp_path / "index"
    project = served / "simple" / DISTRIBUTION
    project.mkdir(parents=True)
    index = Index(_wheel(served))
    (project / "index.html").write_text(f'<a href="/{index.wheel.name}">wheel</a>\n')

    class Handler(SimpleHTTPRequestHandler):
        def do_GET(self) -> None:  # http.server's name
            index.requests.append(self.path)
            super().do_GET()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(Handler, directory=str(served)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("PIP_INDEX_URL", f"http://127.0.0.1:{server.server_port}/simple/")
    # Only this index: not the host's pip.conf, find-links or cache (nothing written outside).
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.delenv("PIP_FIND_LINKS", raising=False)
    monkeypatch.setenv("PIP_NO_CACHE_DIR", "1")
    try:
        yield index
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def pinned(index: Index, monkeypatch: pytest.MonkeyPatch) -> Index:
    """The index's wheel pinned in place of the real one."""
    digest = hashlib.sha256(index.wheel.read_bytes()).hexdigest()
    monkeypatch.setattr(editor, "WHEEL_SHA256", digest)
    return index


def _fetch(folder: Path):
    return invoke(main, "study", "fetch-editor", "--dir", str(folder))


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(path.relative_to(folder)): path.read_bytes()
            for path in sorted(folder.rglob("*")) if path.is_file()}


def test_fetch_editor_keeps_the_wheels_editor_and_downloads_it_once(tmp_path, pinned):
    folder = tmp_path / "editor"

    first, second = _fetch(folder), _fetch(folder)

    assert first.exit_code == 0 and second.exit_code == 0, first.output + second.output
    assert fetched_editor(folder).loader == INSTALLED.loader
    assert {path.name for path in (folder / "app").iterdir()} == APP_FILES  # no source map
    assert {path.name for path in (folder / "fonts").iterdir()} == set(FONT_FILES)
    assert json.loads((folder / "release.json").read_text()) == {"release": "1.23.2"}
    assert pinned.wheel_requests() == [f"/{pinned.wheel.name}"]


def test_a_wheel_unlike_the_pin_installs_nothing_and_keeps_the_folder(tmp_path, index):
    folder = tmp_path / "editor"
    (folder / "app").mkdir(parents=True)
    (folder / "app" / "main.js").write_text("an earlier release's editor")
    (folder / "release.json").write_text('{"release": "1.22.0"}\n')
    before = _snapshot(folder)

    refused = _fetch(folder)

    assert refused.exit_code == 1 and refused.output.count("\n") == 1
    assert f"{DISTRIBUTION} {PINNED} with its pinned sha256" in refused.output
    assert "nothing was installed" in refused.output
    assert _snapshot(folder) == before
    assert sorted(path.name for path in tmp_path.iterdir()) == ["editor", "index"]


def test_a_folder_holding_other_files_is_refused_and_kept_as_it_was(tmp_path, pinned):
    folder = tmp_path / "work"
    folder.mkdir()
    (folder / "thesis.tex").write_text("months of work")
    (folder / "release.json").write_text('{"release": "1.22.0"}\n')

    refused = _fetch(folder)

    assert refused.exit_code == 1 and "holds files this command does not write" in refused.output
    assert _snapshot(folder) == {"thesis.tex": b"months of work",
                                 "release.json": b'{"release": "1.22.0"}\n'}
    assert pinned.wheel_requests() == []


@pytest.mark.server
def test_a_gateway_whose_editor_lacks_its_chunk_refuses_to_start_naming_it(
    tmp_path, label_studio: LocalServer
):
    folder = tmp_path / "editor"
    for part, source, names in (("app", APP, APP_FILES - {EDITOR_CHUNK}),
                                ("fonts", FONTS, FONT_FILES)):
        (folder / part).mkdir(parents=True)
        for name in names:
            shutil.copy(_installed(f"{source}/{name}"), folder / part)
    (folder / "release.json").write_text(json.dumps({"release": PINNED}))
    (tmp_path / "study.json").write_text(make_study(tmp_path, 1).model_dump_json())

    with pytest.raises(StudyError, match=f"the editor's chunks not found; run `{FETCH_COMMAND}`"):
        read_loader(folder / "app")
    refused = CliRunner().invoke(main, ["study", "serve", "--study", str(tmp_path / "study.json")],
                                 env={"LABEL_STUDIO_URL": label_studio.url,
                                      "LABEL_STUDIO_API_KEY": label_studio.credentials.api_key,
                                      SECRET_ENV: secrets.token_urlsafe(32),
                                      EDITOR_DIR_ENV: str(folder)})

    assert refused.exit_code == 1 and isinstance(refused.exception, SystemExit)  # no traceback
    assert refused.output.splitlines()[-1].startswith("Error: ")
    assert "the editor's chunks not found" in refused.output.splitlines()[-1]


def test_the_release_notice_warns_only_when_the_server_runs_another_release():
    same = release_notice(INSTALLED, INSTALLED.release)
    other = release_notice(INSTALLED, "1.20.0")

    assert "WARNING" not in same
    assert "WARNING" in other and "1.20.0" in other and INSTALLED.release in other
