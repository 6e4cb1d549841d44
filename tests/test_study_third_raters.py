"""A researcher who wants to test whether the judge can replace a person asks for a third rater
on a share of the episodes (``study init --third-rater-share``): that share of the episodes gets
three slots from the start, served like any other, and the export holds three ratings of each.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from pydantic import ValidationError

from conftest import invoke
from study_support import make_study, study_project
from test_study_adaptive import Gateway, slot_numbers
from test_study_leases import TASKS, rate, setup, visitor
from sotopia_ls.cli import main
from sotopia_ls.exporter.commands import export_command
from sotopia_ls.labelstudio.client import Client
from sotopia_ls.labelstudio.server import LocalServer
from sotopia_ls.study.settings import read_study
from sotopia_ls.study.slots import leases
from sotopia_ls.study.store import added_ratings


def test_the_share_holds_as_episodes_arrive_in_batches_and_their_third_slot_is_no_added_one(
        tmp_path):
    engine, study = setup(f"sqlite:///{tmp_path / 'gateway.sqlite3'}", tmp_path,
                          third_rater_share=0.3)
    # setup added three episodes (TASKS) with k slots each (it passes no share): the later
    # batches bring the study's share to 30% of all its episodes, spread evenly.
    first = leases.add_episodes(engine, study.name, {task: {} for task in range(20, 24)}, 2,
                                third_rater_share=0.3)
    assert (first.ordinary, first.slots) == (4, 4 * 2 + 2)  # 2 of 7 episodes
    second = leases.add_episodes(engine, study.name, {task: {} for task in range(24, 30)}, 2,
                                 third_rater_share=0.3)
    assert (second.ordinary, second.slots) == (6, 6 * 2 + 2)  # 4 of 13 (30% is 3.9)
    tasks = [*TASKS, *range(20, 30)]
    three = [task for task in tasks if slot_numbers(engine, task) == [1, 2, 3]]
    assert three == [20, 21, 25, 28]
    assert all(slot_numbers(engine, task) == [1, 2] for task in tasks if task not in three)

    # Every slot rated: the third raters' ratings are planned, not adaptive extras.
    while rate(engine, study, visitor(engine, study)) is not None:
        pass
    with engine.connect() as conn:
        assert conn.execute(added_ratings.select()).all() == []
    assert leases.added_slots(engine, study.name, 2) == leases.AddedSlots(0, 0)


def test_the_study_file_refuses_a_share_that_does_nothing(tmp_path):
    with pytest.raises(ValidationError, match="third_rater_share does nothing when every "
                       "episode has 3 raters"):
        make_study(tmp_path, 1, raters_per_episode=3, third_rater_share=0.5)
    with pytest.raises(ValidationError, match="less than or equal to 1"):
        make_study(tmp_path, 1, third_rater_share=1.5)


@pytest.mark.server
def test_half_the_episodes_are_rated_by_three_participants_end_to_end(
        label_studio: LocalServer, ls_client: Client, project_title: str, tmp_path: Path):
    project = study_project(ls_client, project_title, episodes=6)
    path = tmp_path / "study.json"
    written = invoke(main, "study", "init", "--name", "pilot", "--project", str(project),
                     "--completion-code", "C1A2B3", "--episodes-per-participant", "1",
                     "--third-rater-share", "0.5", "--database",
                     f"sqlite:///{tmp_path / 'gateway.sqlite3'}", "--url", label_studio.url,
                     "--api-key", label_studio.credentials.api_key, "-o", str(path))
    assert written.exit_code == 0, written.output
    assert "50% of the episodes get a third rater." in written.output
    study = read_study(path)
    assert study.third_rater_share == 0.5

    gateway = Gateway(ls_client, study)
    for goal in range(6 * 2 + 3):  # every slot: 3 episodes × 2, 3 episodes × 3
        gateway.rates(goal % 10)

    out = tmp_path / "out"
    exported = invoke(export_command, "--project", str(project), "--url", label_studio.url,
                      "--api-key", label_studio.credentials.api_key, "-o", str(out),
                      "--study", str(path))
    assert exported.exit_code == 0, exported.output
    long = pd.read_csv(out / "scores_long.csv")
    raters = long.groupby("episode_id")["annotator_id"].nunique()
    assert sorted(raters) == [2, 2, 2, 3, 3, 3]
    assert not long["added_slot"].any()
