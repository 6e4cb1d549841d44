"""The benchmarks still run: every part at its quick sizes, from the repository alone.

Speed is not judged here (targets live in ``docs/benchmarks.md``); a part that no longer runs
against today's code is, because its figures would otherwise go stale unnoticed.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.run import PARTS

REPO = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow


def test_every_benchmark_runs_at_quick_sizes(ml_python: Path) -> None:
    # The backend part serves from REPO/.venv-ml: ml_python has made it, under the lock that
    # keeps a parallel worker from building it at the same time.
    run = subprocess.run([sys.executable, "-m", "benchmarks.run", "--quick"], cwd=REPO,
                         capture_output=True, text=True, timeout=1200)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "FAILED" not in run.stdout
    for part in PARTS:
        shown = {"live-export": "live export"}.get(part, part)
        assert f"{shown}: " in run.stdout, f"no row for {part}"
