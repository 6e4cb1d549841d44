"""A researcher installs the package from a wheel, far from any checkout, and it works.

The wheel is built from a copy of the working tree, installed into a new virtual environment,
and run from an empty folder: the labeling config, the sample episodes and the demo all come
from the installed package, every file the commands write lands in that folder, and nothing
but the interpreter's byte code is written into site-packages. The wheel holds Label Studio's
migrated database; since this environment runs the checkout's label-studio rather than one of
its own, the demo's is restored beforehand where `up` keeps it (`up` restores it itself where
label-studio is installed beside the package: the demo's own test).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import migrated

from study_support import EDITOR, one_rating_served, study_project
from sotopia_ls.config import labeling_config
from sotopia_ls.extras import installer, new_environment, uv
from sotopia_ls.labelstudio import migrated as migrated_database
from sotopia_ls.labelstudio.client import Client
from sotopia_ls.labelstudio.server import LocalServer, free_port
from sotopia_ls.study.serving.editor import EDITOR_DIR_ENV, RELEASE_FILE

REPO = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow


def working_tree(destination: Path) -> Path:
    """The repository's files as they are now (tracked and new, not ignored), copied."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO, check=True, capture_output=True,
    ).stdout.decode().split("\0")
    for name in filter(None, listed):
        source = REPO / name
        if source.is_file():
            (destination / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, destination / name)
    return destination


def snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    """Every file in ``folder`` but a module's byte code beside it, which is the interpreter's,
    not ours: written once by the first command, read by the others (uv compiles none)."""
    return {
        str(path.relative_to(folder)): (path.stat().st_size, path.stat().st_mtime_ns)
        for path in folder.rglob("*") if path.is_file() and not byte_code(path)
    }


def byte_code(path: Path) -> bool:
    return (path.parent.name == "__pycache__" and path.suffix == ".pyc"
            and path.parent.with_name(f"{path.name.split('.')[0]}.py").exists())


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The package's wheel, built from a copy of the working tree."""
    root = tmp_path_factory.mktemp("wheel")
    source = working_tree(root / "source")
    # uv builds it in a third of pip's time, in the same isolated build environment.
    found = uv()
    build = ([found, "build", "--quiet", "--wheel", "--out-dir"] if found else
             [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w"])
    subprocess.run([*build, str(root / "dist"), str(source)], check=True)
    (built,) = (root / "dist").glob("sotopia_label_studio-*.whl")
    return built


def environment(root: Path, requirement: str) -> Path:
    """The ``bin`` folder of a new environment in ``root`` holding only ``requirement`` and
    its dependencies, made and installed by uv where the suite has it (scripts/setup), else
    venv and pip."""
    subprocess.run([*installer(new_environment(root)), requirement], check=True)
    return root / "bin"


def environment_variables(installed: Path, **more: str) -> dict[str, str]:
    """This process's environment for a command of the new environment ``installed``: its
    ``bin`` first on PATH, then this environment's (the Label Studio server is a separate
    program: the test suite's own is used), nothing of this environment's Python."""
    return {
        **{k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")},
        "PATH": f"{installed}:{Path(sys.executable).parent}:{os.environ.get('PATH', '')}",
        **more,
    }


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The ``bin`` folder of a new environment holding only the wheel and its dependencies."""
    return environment(tmp_path_factory.mktemp("venv") / "venv", str(wheel))


def test_the_installed_package_runs_from_an_empty_folder(installed, tmp_path):
    site_packages = next((installed.parent / "lib").glob("python3*/site-packages"))
    before = snapshot(site_packages)
    work = tmp_path / "study"
    work.mkdir()
    env = environment_variables(installed)

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run([str(installed / "sotopia-ls"), *args], cwd=work, env=env,
                              capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, done.stdout + done.stderr
        return done

    run("config", "-o", "x.xml")
    assert (work / "x.xml").read_text(encoding="utf-8") == labeling_config()

    run("samples", "samples")
    dry_run = run("import", "samples", "--dry-run", "-o", "tasks.json")
    assert "parsed 43 episode(s), 0 invalid record(s)" in dry_run.stdout
    assert (work / "tasks.json").stat().st_size > 0

    port = free_port()
    shipped = site_packages / "sotopia_ls" / "labelstudio" / "databases"
    assert [path.name for path in shipped.iterdir()] == [
        migrated_database.dump_path(migrated_database.DUMPS, "sqlite").name]
    demo_data = migrated(work / "var" / "label-studio")
    demo = run("up", "--no-serve", "--port", str(port))
    assert f"Label Studio is ready: http://127.0.0.1:{port}" in demo.stdout
    assert "imported 3 task(s)" in demo.stdout
    assert {"label_studio.sqlite3", "credentials.json"} <= {p.name for p in demo_data.iterdir()}

    # The wheel alone lacks the export extra and irrCAC, which goes in after it without its
    # dependencies: report names both commands, in one line.
    (tmp_path / "export.json").write_text('[{"id": 1, "data": {}, "annotations": []}]')
    report = subprocess.run([str(installed / "sotopia-ls"), "report", "--from-file",
                             str(tmp_path / "export.json"), "-o", "report"],
                            cwd=work, env=env, capture_output=True, text=True, timeout=300)
    assert report.returncode == 1 and report.stderr.startswith(
        "Error: sotopia-ls report needs the export extra ("), report.stderr
    assert report.stderr.endswith(": pip install 'sotopia-label-studio[export]' && "
                                  "pip install --no-deps 'irrCAC==0.4.4'\n")

    written = {path.relative_to(work).parts[0] for path in work.iterdir()}
    # `config` writes the adjudicators' config beside the raters'.
    assert written == {"x.xml", "adjudication_config.xml", "samples", "tasks.json", "var"}
    assert snapshot(site_packages) == before


@pytest.mark.server
def test_a_gateway_installed_with_the_study_extra_alone_serves_without_irrcac(
        wheel: Path, ls_client: Client, label_studio: LocalServer, project_title: str,
        tmp_path: Path):
    """``[study]`` is installed; irrCAC, which goes in after it by hand, is left out."""
    installed = environment(tmp_path / "venv", f"{wheel}[study]")
    python = installed / "python"
    found = subprocess.run([str(python), "-c", "import importlib.util as u; "
                            "print(u.find_spec('irrCAC'), u.find_spec('krippendorff') is None)"],
                           capture_output=True, text=True, check=True)
    assert found.stdout == "None False\n"
    # No label-studio there: the participants' editor is the one `study fetch-editor` keeps,
    # made of this environment's.
    editor = tmp_path / "editor"
    editor.mkdir()
    (editor / "app").symlink_to(EDITOR.folder)
    (editor / "fonts").symlink_to(EDITOR.fonts)
    (editor / RELEASE_FILE).write_text(json.dumps({"release": EDITOR.release}))
    work = tmp_path / "work"
    work.mkdir()
    env = environment_variables(installed, LABEL_STUDIO_URL=label_studio.url,
                                LABEL_STUDIO_API_KEY=label_studio.credentials.api_key,
                                **{EDITOR_DIR_ENV: str(editor)})

    seen = one_rating_served([str(installed / "sotopia-ls")], env, work,
                             study_project(ls_client, project_title, episodes=2))

    missing = ("running agreement not computed: irrCAC not installed here: "
               "pip install --no-deps 'irrCAC==0.4.4'")
    assert seen.figures["agreement_unavailable"] == missing
    assert [row["episodes"] for row in seen.figures["participants"]] == [1]
    assert seen.status.splitlines()[-1] == f"  {missing}"
