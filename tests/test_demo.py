"""A newcomer clones the repository and runs the README's demo command."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from conftest import uv_on_path

from sotopia_ls.labelstudio.server import free_port

REPO = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow


def test_the_demo_runs_from_a_fresh_clone(tmp_path):
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "--quiet", str(REPO), str(clone)], check=True)
    port = free_port()
    # The newcomer has uv; without it scripts/setup makes the environment with venv and pip,
    # as in every fresh clone's scripts/test.
    env = uv_on_path({k: v for k, v in os.environ.items() if k not in ("VENV", "VIRTUAL_ENV")})
    demo = subprocess.run(
        ["scripts/demo", "--no-serve", "--port", str(port)],
        cwd=clone, env=env, capture_output=True, text=True, timeout=1800,
    )
    assert demo.returncode == 0, demo.stdout + demo.stderr
    assert f"Label Studio is ready: http://127.0.0.1:{port}" in demo.stdout
    assert "login:" in demo.stdout and "password:" in demo.stdout
    assert "imported 3 task(s)" in demo.stdout
    assert (clone / "var" / "label-studio" / "label_studio.sqlite3").exists()
