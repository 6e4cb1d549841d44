"""`study fetch-editor` installs the pinned editor into its folder and never empties a folder
that holds anything else.

The release is served by a real local HTTP server: a tarball with the pinned members' exact
bytes (taken from the editor the test setup fetched), so only its sha512 pin differs from the
registry's.
"""

from __future__ import annotations

import base64
import hashlib
import io
import tarfile
import threading
from collections.abc import Iterator
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from study_support import EDITOR
from sotopia_ls.errors import SotopiaLSError
from sotopia_ls.study import editor
from sotopia_ls.study.editor import FILES, SERVED, fetch_editor, problems


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def release(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The URL of a tarball holding the editor's four pinned members, pinned in its place."""
    served = tmp_path / "registry"
    served.mkdir()
    with tarfile.open(served / "editor.tgz", "w:gz") as archive:
        for member, (name, _) in FILES.items():
            data = (EDITOR / name).read_bytes()
            info = tarfile.TarInfo(member)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    digest = hashlib.sha512((served / "editor.tgz").read_bytes()).digest()
    monkeypatch.setattr(editor, "INTEGRITY", "sha512-" + base64.b64encode(digest).decode())
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(_Quiet, directory=str(served)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/editor.tgz"
    finally:
        server.shutdown()
        server.server_close()


def test_a_folder_holding_other_files_is_refused_and_kept_as_it_was(tmp_path, release):
    folder = tmp_path / "work"
    folder.mkdir()
    (folder / "thesis.tex").write_text("months of work")
    (folder / "main.js").write_text("an outdated editor")

    with pytest.raises(SotopiaLSError, match="holds files this command does not write"):
        fetch_editor(folder, url=release)

    assert (folder / "thesis.tex").read_text() == "months of work"
    assert (folder / "main.js").read_text() == "an outdated editor"


def test_an_outdated_editor_folder_is_replaced_whole_by_the_verified_files(tmp_path, release):
    folder = tmp_path / "editor"
    folder.mkdir()
    (folder / "main.js").write_text("an outdated editor")

    assert fetch_editor(folder, url=release) == folder

    assert problems(folder) == []
    assert {path.name for path in folder.iterdir()} == SERVED
    assert sorted(path.name for path in tmp_path.iterdir()) == [
        "editor", "registry"]  # no staging folder left behind
