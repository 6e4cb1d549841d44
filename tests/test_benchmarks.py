"""The benchmarks still run: every part at its quick sizes, from the repository alone; and
the study benchmark says what failed and paces its participants as documented.

Speed is not judged here (targets live in ``docs/benchmarks.md``); a part that no longer runs
against today's code is, because its figures would otherwise go stale unnoticed.
"""

from __future__ import annotations

import math
import random
import statistics
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from benchmarks import load
from benchmarks.run import PARTS
from benchmarks.study_burst import counted
from benchmarks.study_client import Refused, kind
from benchmarks.study_pace import (
    RETURN_SHARE,
    SPREAD,
    WORDS_READ_PER_MINUTE,
    Leaving,
    Pace,
    estimate_minutes,
    words,
)
from sotopia_ls.config import labeling_config
from sotopia_ls.labelstudio.tasks import episode_to_task
from sotopia_ls.study.serving.shown import ShownFields

REPO = Path(__file__).resolve().parents[1]
GATEWAY = "http://127.0.0.1:8000"


def test_failed_requests_are_counted_by_kind_whatever_the_participant() -> None:
    # Two participants' submits refused alike, and two connections dropped on different
    # studies' rate pages: two kinds, each counted, with no study name or id in them.
    refused = [kind(Refused(httpx.Response(503, request=httpx.Request(
        "POST", f"{GATEWAY}/s/{study}/submit")))) for study in ("burst", "burst")]
    dropped = [kind(httpx.RemoteProtocolError(
        "Server disconnected without sending a response.",
        request=httpx.Request("GET", f"{GATEWAY}/s/{study}/rate"))) for study in ("a", "b")]
    assert counted(dropped + refused) == {
        "HTTP 503 POST /s/<name>/submit": 2,
        "RemoteProtocolError on GET /s/<name>/rate: Server disconnected without sending a "
        "response.": 2}


def test_an_error_without_a_request_is_named_by_its_class_and_first_words() -> None:
    error = KeyError("assignment")
    assert kind(error) == "KeyError: 'assignment'"
    long = ValueError("one two three four five six seven eight nine ten")
    assert kind(long) == "ValueError: one two three four five six seven eight"


def test_minutes_on_an_episode_are_drawn_around_its_reading_and_writing_time() -> None:
    shown = ShownFields.of(labeling_config()).shown(
        episode_to_task(load.seed_episodes()[0]))
    answer = load.real_ratings()[0]
    estimate = estimate_minutes(shown, answer)
    assert estimate > words(shown) / WORDS_READ_PER_MINUTE  # writing takes time too
    people = Pace().people(2000, 1, random.Random(7))
    drawn = [person.episode_minutes(0, shown, answer) for person in people]
    assert statistics.median(drawn) == pytest.approx(estimate, rel=0.05)
    spread = statistics.stdev(math.log(minutes / estimate) for minutes in drawn)
    assert spread == pytest.approx(SPREAD, rel=0.1)
    again = Pace().people(2000, 1, random.Random(7))
    assert [p.episode_minutes(0, shown, answer) for p in again] == drawn  # the seed decides


def test_a_few_participants_leave_in_the_middle_and_a_scaled_run_keeps_the_shape() -> None:
    people = Pace(scale=0.05).people(1000, 2, random.Random(0))
    leaving = [person.leaving for person in people]
    assert leaving.count(Leaving.RETURN) == round(RETURN_SHARE * 1000)
    assert {leaving.count(kind_) for kind_ in Leaving} == {30}
    assert all(person.leaves_at in (0, 1) for person in people)
    one = people[0]
    assert one.seconds(10) == pytest.approx(10 * 60 * 0.05)
    # Even a handful of participants has one of each kind of leaving.
    few = Pace().people(5, 2, random.Random(0))
    assert {person.leaving for person in few} >= set(Leaving)


@pytest.mark.slow
@pytest.mark.parametrize("part", PARTS)
def test_every_benchmark_runs_at_quick_sizes(part: str, request: pytest.FixtureRequest) -> None:
    # One run per part, so that the parts run on several workers (scripts/test).
    if part == "backend":
        # It serves from REPO/.venv-ml: ml_python makes it, under the lock that keeps a
        # parallel worker from building it at the same time.
        request.getfixturevalue("ml_python")
    run = subprocess.run([sys.executable, "-m", "benchmarks.run", "--quick", "--only", part],
                         cwd=REPO, capture_output=True, text=True, timeout=1200)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "FAILED" not in run.stdout
    shown = {"live-export": "live export"}.get(part, part)
    assert f"{shown}: " in run.stdout, f"no row for {part}"
    if part == "screen":  # the quick look at the viewport: a sixteenth of the hit tests
        assert "points 40 px apart: " in run.stdout


@pytest.mark.slow
def test_the_paced_study_runs_scaled_on_two_gateways_and_counts_errors_by_kind() -> None:
    run = subprocess.run([sys.executable, "-m", "benchmarks.run", "--only", "study",
                          "--study-paced", "--quick", "--study-gateways", "2"], cwd=REPO,
                         check=False, capture_output=True, text=True, timeout=1200)
    assert run.returncode == 0, run.stderr[-3000:]
    for row in ("study: paced, submit", "study: paced, minutes per episode",
                "study: paced, errors by kind", "study: paced, busy answers waited out",
                "study: paced, outcome"):
        assert row in run.stdout, f"no row {row!r}"
    assert "left in the middle: nobody" not in run.stdout
