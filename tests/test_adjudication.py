"""Adjudication: episodes whose raters disagree go to an adjudicator in Label Studio, whose
ratings come back in a file of their own.

The story (issue 22's acceptance): an episode rated 2 and 8 on goal lands in the adjudication
project with both rationales visible, under pseudonyms only; the adjudicated score appears in
adjudicated_scores.csv; the raw scores are unchanged. An episode whose raters agree is not
sent, and a rerun sends nothing twice.
"""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path

import httpx
import pandas as pd
import pytest
from click.testing import CliRunner
from conftest import flat_of, invoke, results_of

from sotopia_ls.adjudication.disputes import EpisodeRatings, episode_ratings
from sotopia_ls.adjudication.project import adjudicate
from sotopia_ls.adjudication.reading import with_adjudicated
from sotopia_ls.adjudication.screen import (
    ADJUDICATION_CONFIG_FILE,
    adjudication_config,
    adjudication_config_is_current,
    block_class,
    note_name,
    options_field,
    raters_table,
    rating_name,
    ratings_field,
    verdict_field,
)
from sotopia_ls.cli import main
from sotopia_ls.dimensions import AGENTS, DIMENSIONS, RUBRIC
from sotopia_ls.importer import load_episodes
from sotopia_ls.labelstudio.client import (
    Client,
    episode_tasks,
    task_records,
    update_task_meta,
)
from sotopia_ls.labelstudio.interface import sdk_config
from sotopia_ls.labelstudio.push import import_episodes
from sotopia_ls.labelstudio.tasks import GOLD
from sotopia_ls.scores import DISAGREEMENT_THRESHOLD, scores_disagree
from sotopia_ls.study.settings import Adaptive
from sotopia_ls.study.slots import leases

REPO = Path(__file__).resolve().parents[1]
GOAL = "goal"


# --- the screen, offline --------------------------------------------------------------------


def test_the_repository_holds_the_adjudication_config_the_rubric_generates(monkeypatch):
    assert adjudication_config_is_current(REPO / ADJUDICATION_CONFIG_FILE), (
        f"{REPO / ADJUDICATION_CONFIG_FILE} is stale: regenerate it with `sotopia-ls config` "
        "in the repository's folder")
    monkeypatch.chdir(REPO)
    checked = CliRunner().invoke(main, ["config", "--check"])
    assert checked.exit_code == 0, checked.output
    assert "adjudication_config.xml is up to date" in checked.output
    tracked = subprocess.run(["git", "ls-files", f"*{ADJUDICATION_CONFIG_FILE}"], cwd=REPO,
                             capture_output=True, text=True, check=True).stdout.split()
    assert tracked == [ADJUDICATION_CONFIG_FILE]


def test_the_screen_asks_for_a_rating_and_a_note_on_every_dimension_and_agent_it_may_dispute():
    controls = sdk_config(adjudication_config()).controls
    for dimension in DIMENSIONS:
        for agent in AGENTS:
            rating = controls[rating_name(dimension.key, agent)]
            assert rating.tag == "Choices" and not rating.required
            # Its options come from the task: a disputed rating's range, an agreed one's none.
            assert rating.attrs["value"] == f"${options_field(dimension.key, agent)}"
            assert controls[note_name(dimension.key, agent)].tag == "TextArea"


def test_a_rationale_is_shown_as_the_text_it_is():
    table = raters_table({"A": (2, "<script>alert(1)</script> & <b>bold</b>"), "B": (8, "ok")})
    assert "<script>" not in table and "<b>" not in table
    assert "&lt;script&gt;alert(1)&lt;/script&gt; &amp; &lt;b&gt;bold&lt;/b&gt;" in table
    assert "<th>Rater A</th><th>Rater B</th>" in table


def _long(scores: dict[str, list[int]]) -> pd.DataFrame:
    """scores_long of one episode's goal ratings for agent 1, one annotation per score."""
    rows = [{"episode_id": episode, "task_id": 1, "annotation_id": 10 * n + k,
             "annotator_id": f"annotator-{k}", "agent": 1, "dimension": GOAL, "score": score,
             "rationale": f"r{k}", "ground_truth": False}
            for n, (episode, given) in enumerate(scores.items()) for k, score in enumerate(given)]
    return pd.DataFrame(rows)


@pytest.mark.parametrize(("scores", "disputed"), [
    ([2, 8], True), ([5, 7], False), ([5, 8], True), ([6, 6, 2], True), ([7], False),
])
def test_ratings_more_than_the_threshold_apart_are_disputed(scores, disputed):
    (episode,) = episode_ratings(_long({"ep": scores}))
    assert (episode.disputed(2) == [(1, GOAL)]) is disputed
    assert scores_disagree(scores, 2) is disputed


@pytest.mark.parametrize("apart", range(6))
def test_a_study_adds_a_rater_exactly_where_adjudication_would_dispute(apart):
    """One rule and one default threshold: the study's adaptive extra raters and adjudication
    read two raters' goal ratings, ``apart`` points apart, the same way."""
    first, second = flat_of(_scores("A", 2)), flat_of(_scores("B", 2 + apart))  # as stored
    long = _long({"ep": [2, 2 + apart]})
    disputed = bool(episode_ratings(long)[0].disputed(DISAGREEMENT_THRESHOLD))
    assert leases.disagree([first, second], DISAGREEMENT_THRESHOLD) is disputed
    assert disputed is (apart > DISAGREEMENT_THRESHOLD)
    assert Adaptive(max_raters=3).threshold == DISAGREEMENT_THRESHOLD
    (threshold,) = [p for p in main.commands["adjudicate"].params if p.name == "threshold"]
    assert threshold.default == DISAGREEMENT_THRESHOLD


def test_raters_are_named_a_b_c_in_the_order_of_their_annotations():
    (episode,) = episode_ratings(_long({"ep": [3, 9, 4]}).iloc[::-1])
    assert isinstance(episode, EpisodeRatings)
    assert episode.raters == {"A": 0, "B": 1, "C": 2}
    assert list(episode.ratings[(1, GOAL)].items()) == [("A", (3, "r0")), ("B", (9, "r1")),
                                                        ("C", (4, "r2"))]


def test_a_report_on_adjudicated_scores_needs_an_export_that_wrote_them(export_file, tmp_path):
    out = tmp_path / "out"
    assert invoke(main, "export", "--from-file", str(export_file), "-o", str(out)).exit_code == 0
    report = ["report", "--bootstrap", "0", "--scores", "adjudicated", "-o", str(tmp_path / "r")]
    refused = invoke(main, *report, "--from-file", str(export_file))
    assert refused.exit_code == 2 and "give --from-export" in refused.output
    missing = invoke(main, *report, "--from-export", str(out))
    assert missing.exit_code == 1
    assert "no adjudicated_scores.csv: export with --adjudication-project" in missing.output


@pytest.mark.parametrize(("edit", "where", "reason"), [
    ({"adjudicated_score": 11}, " [row 1]: adjudicated_score:", "goal score 11 is outside 0 to 10"),
    ({"dimension": "charm"}, " [row 1]: dimension:", "unknown dimension 'charm'"),
    ({"agent": 3}, " [row 1]: agent:", "3 is not one of [1, 2]"),
    ({"raw_annotation_ids": "[11, 12]"}, " [row 1]: raw_annotation_ids:",
     "'[11, 12]' is not an object of rater → annotation id"),
    ({"raw_annotation_ids": None}, ":",
     "not an adjudicated_scores.csv (no raw_annotation_ids column)"),
])
def test_an_edited_adjudicated_score_is_refused_in_one_line_naming_its_field(
        export_file, tmp_path, edit, where, reason):
    out = tmp_path / "out"
    assert invoke(main, "export", "--from-file", str(export_file), "-o", str(out)).exit_code == 0
    episode = pd.read_csv(out / "scores_long.csv", dtype={"episode_id": str})["episode_id"][0]
    row = {"episode_id": episode, "agent": 1, "dimension": GOAL, "adjudicated_score": 5,
           "note": "n", "raw_annotation_ids": '{"A": 11, "B": 12}', **edit}
    pd.DataFrame([{name: value for name, value in row.items() if value is not None}]).to_csv(
        out / "adjudicated_scores.csv", index=False)
    refused = invoke(main, "report", "--from-export", str(out), "--scores", "adjudicated",
                     "--bootstrap", "0", "-o", str(tmp_path / "r"))
    assert refused.exit_code == 1 and "Traceback" not in refused.output
    assert f"{out / 'adjudicated_scores.csv'}{where} {reason}" in refused.output
    assert "row 0" not in refused.output


def test_an_adjudicated_score_replaces_only_the_ratings_it_settled():
    """Raters A and B rated goal 2 and 8 and were adjudicated 5; a third rater, added by the
    study after the episode was sent, rated 7 and keeps it."""
    long = _long({"ep": [2, 8, 7]})  # annotations 0, 1, 2
    adjudicated = pd.DataFrame([{
        "episode_id": "ep", "agent": 1, "dimension": GOAL, "adjudicated_score": 5,
        "raw_annotation_ids": '{"A": 0, "B": 1}', "adjudication_annotation_id": 900}])
    replaced = with_adjudicated(long, adjudicated)
    assert dict(zip(replaced["annotation_id"], replaced["score"])) == {0: 5, 1: 5, 2: 7}
    assert list(long["score"]) == [2, 8, 7]  # the raw scores are untouched


# --- the story, with a real Label Studio -----------------------------------------------------


def _scores(rater: str, goal: int) -> dict[int, dict[str, tuple[str, int]]]:
    """A complete annotation: every dimension rated at its midpoint, goal for agent 1 as
    given; each rationale says whose it is."""
    given = {agent: {d.key: (f"{rater} on {d.key} of agent {agent}",
                             (d.range_low + d.range_high) // 2) for d in DIMENSIONS}
             for agent in AGENTS}
    given[1][GOAL] = (f"{rater}: <b>goal</b> {goal}, because the deal fell through", goal)
    return given


def _ratings(rater: str, goal: int) -> list[dict]:
    """``_scores`` as Label Studio's results."""
    return results_of(_scores(rater, goal))


def _study(ls_client, sample_data, title: str) -> dict:
    """A study project of two episodes, each rated by two crowd raters: on the first they
    rate goal 2 and 8, on the second they agree."""
    episodes = load_episodes([sample_data / "otree_episodes" / "GPT3.5-GPT3.5"]).episodes[:2]
    project, _, _ = import_episodes(ls_client, episodes, title=title, progress=False)
    run = uuid.uuid4().hex[:8]
    raters = [ls_client.users.create(email=f"prolific-{k}-{run}@crowd.test",
                                     username=f"5f1e2d{k}{run}") for k in (1, 2)]
    tasks = {episode: copies[0].id for episode, copies in episode_tasks(ls_client, project.id).items()}
    disputed, agreed = episodes[0].id, episodes[1].id
    for rater, goal in zip(raters, (2, 8)):
        ls_client.annotations.create(id=tasks[disputed], completed_by=rater.id, lead_time=60,
                                     result=_ratings(f"rater {rater.id}", goal))
    for rater, goal in zip(raters, (7, 8)):
        ls_client.annotations.create(id=tasks[agreed], completed_by=rater.id, lead_time=60,
                                     result=_ratings(f"rater {rater.id}", goal))
    return {"project": project, "raters": raters, "disputed": disputed, "agreed": agreed,
            "tasks": tasks}


@pytest.fixture
def study(ls_client, sample_data, project_title):
    return _study(ls_client, sample_data, project_title)


@pytest.mark.server
def test_adjudicating_looks_the_study_project_up_once(label_studio, study):
    sent: list[str] = []
    counted = Client(base_url=label_studio.url, api_key=label_studio.credentials.api_key,
                     httpx_client=httpx.Client(timeout=60, event_hooks={
                         "request": [lambda request: sent.append(
                             f"{request.method} {request.url.path}")]}))
    report = adjudicate(counted, study["project"].id)
    assert report.added == [study["disputed"]]
    assert sent.count(f"GET /api/projects/{study['project'].id}/") == 1


def _adjudicator(ls_client):
    return ls_client.users.create(email=f"adj-{uuid.uuid4().hex[:8]}@lab.test",
                                  username=f"adj-{uuid.uuid4().hex[:8]}")


def _settle(ls_client, task: int, adjudicator, score: int):
    """The adjudicator's annotation: goal of agent 1 rated ``score``, with a note."""
    return ls_client.annotations.create(id=task, completed_by=adjudicator.id, result=[
        {"from_name": rating_name(GOAL, 1), "to_name": "dialogue", "type": "choices",
         "value": {"choices": [str(score)]}},
        {"from_name": note_name(GOAL, 1), "to_name": "dialogue", "type": "textarea",
         "value": {"text": ["Half the goal was reached."]}}])


def _run(label_studio, *args: str):
    return CliRunner().invoke(main, [*args, "--url", label_studio.url,
                                     "--api-key", label_studio.credentials.api_key])


@pytest.mark.server
def test_a_goal_rated_2_and_8_is_adjudicated_into_its_own_file(label_studio, ls_client, study,
                                                                 tmp_path):
    into = f"{study['project'].title} adjudication"
    sent = _run(label_studio, "adjudicate", "--project", str(study["project"].id))
    assert sent.exit_code == 0, sent.output
    assert "2 rated episode(s), 1 disputed" in sent.output and "added 1" in sent.output
    (adjudication,) = [p for p in ls_client.projects.list(title=into) if p.title == into]

    # The disputed episode, and only it, is in the adjudication project.
    (task,) = task_records(ls_client, adjudication.id)
    assert task.data["episode_id"] == study["disputed"]
    raters = study["raters"]
    table = task.data[ratings_field(GOAL, 1)]
    for rater in raters:
        assert f"rater {rater.id}: &lt;b&gt;goal&lt;/b&gt;" in table  # both rationales, as text
    assert "<th>Rater A</th><th>Rater B</th>" in table
    assert task.data[verdict_field(GOAL, 1)].startswith("Disputed: the ratings differ by 6")
    assert [o["value"] for o in task.data[options_field(GOAL, 1)]] == list(RUBRIC[GOAL].choices)
    assert task.data[options_field(GOAL, 2)] == []  # agreed: nothing asked
    assert task.data[verdict_field(GOAL, 2)].startswith("Agreed")
    # Pseudonyms only: no email, username or Label Studio user id reaches the project.
    shown = json.dumps([task.data, task.meta])
    for rater in raters:
        assert rater.email not in shown and rater.username not in shown
        assert f"annotator-{rater.id}" not in shown
    assert task.meta["sotopia_adjudication"]["disputed"] == [
        {"agent": 1, "dimension": GOAL, "scores": {"A": 2, "B": 8}}]

    # A rerun adds nothing twice.
    again = _run(label_studio, "adjudicate", "--project", str(study["project"].id))
    assert again.exit_code == 0, again.output
    assert "added 0" in again.output and "1 already there" in again.output
    assert len(task_records(ls_client, adjudication.id)) == 1

    # The adjudicator settles it; a second, broken adjudication is refused in one line.
    adjudicator = _adjudicator(ls_client)
    settled = _settle(ls_client, task.id, adjudicator, 5)
    broken = ls_client.annotations.create(id=task.id, completed_by=adjudicator.id, result=[
        {"from_name": rating_name(GOAL, 1), "to_name": "dialogue", "type": "choices",
         "value": {"choices": ["99"]}}])

    raw = tmp_path / "raw"
    assert _run(label_studio, "export", "--project", str(study["project"].id),
                "-o", str(raw)).exit_code == 0
    out = tmp_path / "with-adjudication"
    exported = _run(label_studio, "export", "--project", str(study["project"].id),
                    "--adjudication-project", str(adjudication.id), "-o", str(out))
    assert exported.exit_code == 0, exported.output
    assert "1 adjudicated rating(s) (adjudicated_scores.csv), 2 refused" in exported.output
    assert (f"refused adjudication: project {adjudication.id} [task {task.id}, annotation "
            f"{broken.id}]: adjudicated_{GOAL}_1: {GOAL} score 99 is outside 0 to 10"
            ) in exported.output
    assert f"annotation {broken.id}]: adjudication_note_{GOAL}_1: missing note" in exported.output

    adjudicated = pd.read_csv(out / "adjudicated_scores.csv", dtype={"episode_id": str})
    assert adjudicated[["episode_id", "agent", "dimension", "adjudicated_score", "note"]
                       ].to_dict("records") == [
        {"episode_id": study["disputed"], "agent": 1, "dimension": GOAL,
         "adjudicated_score": 5, "note": "Half the goal was reached."}]
    assert json.loads(adjudicated.loc[0, "raw_scores"]) == {"A": 2, "B": 8}
    assert adjudicated.loc[0, "adjudication_annotation_id"] == settled.id

    # Raw scores are unchanged: the same files as without adjudication, 2 and 8 still there.
    assert {p.name for p in out.iterdir()} == {p.name for p in raw.iterdir()} | {
        "adjudicated_scores.csv", "adjudication_errors.jsonl"}
    for written in raw.iterdir():
        assert (out / written.name).read_bytes() == written.read_bytes(), written.name
    long = pd.read_csv(out / "scores_long.csv", dtype={"episode_id": str})
    goal = long[(long["episode_id"] == study["disputed"]) & (long["agent"] == 1)
                & (long["dimension"] == GOAL)]
    assert sorted(goal["score"]) == [2, 8]
    ids = json.loads(adjudicated.loc[0, "raw_annotation_ids"])
    assert sorted(ids.values()) == sorted(goal["annotation_id"])

    # The report uses either and says which.
    report = _run(label_studio, "report", "--from-export", str(out), "--bootstrap", "0",
                  "-o", str(tmp_path / "report-raw"))
    assert report.exit_code == 0, report.output
    assert "Scores: raw" in report.output
    report = CliRunner().invoke(main, ["report", "--from-export", str(out), "--bootstrap", "0",
                                       "--scores", "adjudicated", "-o",
                                       str(tmp_path / "report-adjudicated")])
    assert report.exit_code == 0, report.output
    assert "Scores: adjudicated. 1 adjudicated rating (adjudicated_scores.csv)" in report.output
    page = (tmp_path / "report-adjudicated" / "report.html").read_text()
    assert "Scores: adjudicated." in page


@pytest.mark.server
def test_the_study_project_itself_is_never_taken_for_the_adjudication_project(
        label_studio, study):
    refused = _run(label_studio, "adjudicate", "--project", str(study["project"].id),
                   "--into", str(study["project"].id))
    assert refused.exit_code == 1
    assert "is not an adjudication project" in refused.output
    assert "Traceback" not in refused.output


@pytest.mark.server
def test_a_gold_episode_is_never_sent_to_adjudication(label_studio, ls_client, study):
    """The disputed episode is one of the study's hidden gold checks: its raters are compared
    with the reference, not adjudicated."""
    project = study["project"].id
    update_task_meta(ls_client, project, study["tasks"][study["disputed"]],
                     {GOLD: {"pilot": True}})
    sent = _run(label_studio, "adjudicate", "--project", str(project))
    assert sent.exit_code == 0, sent.output
    assert "1 rated episode(s), 0 disputed" in sent.output and "added 0" in sent.output


@pytest.mark.server
def test_two_studies_share_an_adjudication_project_and_each_export_reads_its_own(
        label_studio, ls_client, sample_data, study, tmp_path):
    """Two study projects of the same episodes send their disputes to one adjudication
    project: each gets its own task there, and each study's export reads only its own."""
    other = _study(ls_client, sample_data, f"{study['project'].title} again")
    shared = f"{study['project'].title} shared adjudication"
    for each in (study, other):
        sent = _run(label_studio, "adjudicate", "--project", str(each["project"].id),
                    "--into", shared)
        assert sent.exit_code == 0, sent.output
        assert "added 1" in sent.output and "0 already there" in sent.output
    (adjudication,) = [p for p in ls_client.projects.list(title=shared) if p.title == shared]
    tasks = task_records(ls_client, adjudication.id)
    assert [task.meta["sotopia_adjudication"]["study_project"] for task in tasks] == [
        study["project"].id, other["project"].id]
    adjudicator = _adjudicator(ls_client)
    for task, score in zip(tasks, (5, 6)):
        _settle(ls_client, task.id, adjudicator, score)

    out = tmp_path / "out"
    exported = _run(label_studio, "export", "--project", str(study["project"].id),
                    "--adjudication-project", str(adjudication.id), "-o", str(out))
    assert exported.exit_code == 0, exported.output
    assert "1 adjudicated rating(s)" in exported.output
    assert "1 adjudication task(s) sent from other study projects left out" in exported.output
    adjudicated = pd.read_csv(out / "adjudicated_scores.csv")
    assert list(adjudicated["adjudicated_score"]) == [5]
    assert list(adjudicated["adjudication_task_id"]) == [tasks[0].id]

    # The study project itself is no adjudication project: one line, nothing written.
    itself = _run(label_studio, "export", "--project", str(study["project"].id),
                  "--adjudication-project", str(study["project"].id), "-o", str(tmp_path / "x"))
    assert itself.exit_code == 1 and "Traceback" not in itself.output
    assert "is not an adjudication project" in itself.output
    assert not (tmp_path / "x").exists()


@pytest.mark.server
def test_a_rerun_names_the_episodes_rated_again_since_they_were_sent(label_studio, ls_client,
                                                                      study):
    """The study added a third rater to the disputed episode after it was sent (adaptive
    extra raters): the rerun sends nothing twice and says which episode changed."""
    project = str(study["project"].id)
    assert _run(label_studio, "adjudicate", "--project", project).exit_code == 0
    third = ls_client.users.create(email=f"prolific-3-{uuid.uuid4().hex[:8]}@crowd.test",
                                   username=f"5f1e2d3{uuid.uuid4().hex[:8]}")
    ls_client.annotations.create(id=study["tasks"][study["disputed"]], completed_by=third.id,
                                 lead_time=60, result=_ratings("rater 3", 7))
    again = _run(label_studio, "adjudicate", "--project", project)
    assert again.exit_code == 0, again.output
    assert "added 0" in again.output and "1 already there" in again.output
    assert (f"rated again since sent (their adjudication tasks show the ratings as sent): "
            f"{study['disputed']}") in again.output


@pytest.mark.browser
@pytest.mark.server
def test_the_adjudicator_sees_both_rationales_and_is_asked_only_about_the_dispute(
        label_studio, ls_client, browser, logged_in, study, tmp_path):
    from browser import fresh_page
    from playwright.sync_api import expect
    from test_browser import wait_for_annotations

    assert _run(label_studio, "adjudicate", "--project", str(study["project"].id)).exit_code == 0
    into = f"{study['project'].title} adjudication"
    (adjudication,) = [p for p in ls_client.projects.list(title=into) if p.title == into]
    (task,) = task_records(ls_client, adjudication.id)
    with fresh_page(browser, storage_state=logged_in) as page:
        page.goto(f"{label_studio.url}/projects/{adjudication.id}/data?task={task.id}")
        disputed = page.locator(f".{block_class(GOAL, 1)}")
        disputed.wait_for(timeout=60_000)
        for rater in study["raters"]:
            expect(disputed.get_by_text(f"rater {rater.id}: <b>goal</b> 2")
                   .or_(disputed.get_by_text(f"rater {rater.id}: <b>goal</b> 8"))).to_be_visible()
        expect(disputed.get_by_text("Rater A")).to_be_visible()
        expect(disputed.get_by_text("Rater B")).to_be_visible()
        expect(disputed.locator("input[type=radio]")).to_have_count(len(RUBRIC[GOAL].values))
        agreed = page.locator(f".{block_class(GOAL, 2)}")
        expect(agreed.get_by_text("Agreed: the ratings differ by 0")).to_be_visible()
        expect(agreed.locator("input[type=radio]")).to_have_count(0)
        expect(disputed.locator("textarea")).to_be_hidden()  # the note comes with a rating
        disputed.locator('input[type=radio][name="5"]').check()
        expect(disputed.locator("textarea")).to_be_visible()
        disputed.locator("textarea").fill("Half the goal was reached.")
        page.get_by_role("button", name="Submit current annotation").click()
        assert wait_for_annotations(ls_client, task.id), "the adjudication was not saved"
    out = tmp_path / "out"
    exported = _run(label_studio, "export", "--project", str(study["project"].id),
                    "--adjudication-project", str(adjudication.id), "-o", str(out))
    assert exported.exit_code == 0, exported.output
    adjudicated = pd.read_csv(out / "adjudicated_scores.csv")
    assert adjudicated[["dimension", "adjudicated_score", "note"]].to_dict("records") == [
        {"dimension": GOAL, "adjudicated_score": 5, "note": "Half the goal was reached."}]
