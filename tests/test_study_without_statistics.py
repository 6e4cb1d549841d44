"""A gateway host without the statistics libraries still runs a study.

irrCAC goes in by hand after the study extra (``pip install --no-deps``), and krippendorff,
scipy, matplotlib and pingouin serve the report, not the participants: ``study init``,
``serve`` and ``status`` run here in an interpreter that cannot import any of them, and in
which no module of the package may import pandas or pyarrow either (label-studio-sdk, through
which the gateway reaches Label Studio, imports pandas itself: the SDK's import, not ours). A
participant's rating is saved; the dashboard's worker process, an interpreter of its own,
still lists the participant; and the running agreement, which needs the missing libraries,
says on the dashboard and in ``study status`` which install brings them.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from study_support import one_rating_served, study_project
from sotopia_ls.labelstudio.client import Client
from sotopia_ls.labelstudio.server import LocalServer

pytestmark = pytest.mark.server

ABSENT = ["scipy", "matplotlib", "krippendorff", "irrCAC", "pingouin"]
TABLES = ["pandas", "pyarrow"]
# `sotopia-ls study ARGS` in an interpreter where ABSENT cannot be imported, as if not
# installed (``importlib.util.find_spec`` finds none of them), and where a module of the
# package importing one of TABLES is an ImportError.
WITHOUT_STATISTICS = f"""
import builtins, sys
for name in {ABSENT!r}:
    sys.modules[name] = None
_import = builtins.__import__

def refusing(name, globals=None, locals=None, fromlist=(), level=0):
    importer = (globals or {{}}).get("__name__") or ""
    if level == 0 and name.partition(".")[0] in {TABLES!r} and importer.startswith("sotopia_ls"):
        raise ImportError(f"{{importer}} imports {{name}} on the gateway's serving path")
    return _import(name, globals, locals, fromlist, level)

builtins.__import__ = refusing
from sotopia_ls.study.commands import study_command
study_command(sys.argv[2:], prog_name="sotopia-ls study")
"""


def test_a_gateway_without_the_statistics_libraries_serves_and_names_their_install(
        ls_client: Client, label_studio: LocalServer, project_title: str, tmp_path: Path):
    project = study_project(ls_client, project_title, episodes=2)
    env = {**os.environ, "LABEL_STUDIO_URL": label_studio.url,
           "LABEL_STUDIO_API_KEY": label_studio.credentials.api_key}

    seen = one_rating_served([sys.executable, "-c", WITHOUT_STATISTICS], env, tmp_path, project)

    missing = ("running agreement not computed: scipy, krippendorff, pingouin, matplotlib, "
               "irrCAC not installed here: pip install 'sotopia-label-studio[export]' && "
               "pip install --no-deps 'irrCAC==0.4.4'")
    assert seen.figures["agreement"] is None
    assert seen.figures["agreement_unavailable"] == missing
    assert [row["episodes"] for row in seen.figures["participants"]] == [1]
    assert seen.figures["progress"]["slots_saved"] == 1
    assert seen.status.splitlines()[-1] == f"  {missing}"
