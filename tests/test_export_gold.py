"""A main study hides a gold episode among the ordinary ones: the gateway marks its task in
Label Studio as it loads the references, and the export counts the gold episode's ratings
apart, out of the raters per episode and of agreement, saying so in the protocol and the
report.

The study's gateway starts on the session's real Label Studio; five participants rate the gold
episode and two rate each ordinary one (annotations made through the SDK, as the gateway's
writer makes them), then the project is exported.
"""

from __future__ import annotations

import html
import json
import uuid

import pandas as pd
import pytest

from conftest import results_of, task_ids
from study_support import answers, make_study, prolific_id, study_project
from test_study_gold import reference_of
from sotopia_ls.errors import InvalidInput
from sotopia_ls.exporter import export_file as export_json
from sotopia_ls.exporter import export_project
from sotopia_ls.labelstudio.client import Client
from sotopia_ls.labelstudio.tasks import GOLD
from sotopia_ls.report.build import build_report
from sotopia_ls.study.serving.gateway import prepare_gateway
from sotopia_ls.study.store import open_store

GOLD_RATERS = 5
RATERS = 2


def meta_of(client: Client, task: int) -> dict:
    return dict(client.tasks.get(id=str(task)).meta or {})


@pytest.fixture(scope="module")
def rated(ls_client: Client, tmp_path_factory) -> dict:
    """The study started twice (a restart) and its project rated: the gold episode by five
    participants, each ordinary one by two."""
    tmp = tmp_path_factory.mktemp("gold_export")
    project = study_project(ls_client, f"test_export_gold_{prolific_id()[:8]}", episodes=3)
    episodes = sorted(task_ids(ls_client, project).items(), key=lambda pair: pair[1])
    (gold_episode, gold_task), ordinary = episodes[0], [task for _, task in episodes[1:]]
    references = tmp / "gold.csv"
    pd.DataFrame([{"pk": gold_episode, **reference_of(0)}]).to_csv(
        references, index=False)
    study = make_study(tmp, project, gold_share=0.2, raters_per_episode=RATERS,
                       gold_references=str(references))
    engine = open_store(study.database)
    prepare_gateway(study, ls_client, engine)
    first = meta_of(ls_client, gold_task)
    prepare_gateway(study, ls_client, engine)  # a restart marks nothing again
    run = uuid.uuid4().hex[:8]
    people = [ls_client.users.create(email=f"{prolific_id()}@prolific.invalid",
                                     username=f"p{k}{run}") for k in range(GOLD_RATERS)]
    for seed, person in enumerate(people):
        ls_client.annotations.create(id=gold_task, completed_by=person.id, lead_time=60,
                                     result=results_of(answers(seed)))
    for task in ordinary:
        for seed, person in enumerate(people[:RATERS]):
            ls_client.annotations.create(id=task, completed_by=person.id, lead_time=60,
                                         result=results_of(answers(seed)))
    exported = export_project(ls_client, project, tmp / "export")
    return {"client": ls_client, "gold_task": gold_task, "ordinary": ordinary, "first": first,
            "exported": exported, "out": tmp / "export"}


@pytest.mark.server
def test_the_gateway_marks_the_gold_task_in_label_studio_once(rated):
    client = rated["client"]

    assert rated["first"][GOLD] == {"pilot": True}
    assert meta_of(client, rated["gold_task"]) == rated["first"]
    assert all(GOLD not in meta_of(client, task) for task in rated["ordinary"])


@pytest.mark.server
def test_every_rating_is_exported_with_the_gold_column(rated):
    long = rated["exported"].scores_long

    per_task = long.groupby("task_id")["gold"].agg(["all", "any"])
    assert per_task.loc[rated["gold_task"]].tolist() == [True, True]
    assert not per_task.loc[rated["ordinary"], "any"].any()
    assert long.loc[long["gold"], "annotation_id"].nunique() == GOLD_RATERS


@pytest.mark.server
def test_the_protocol_counts_the_gold_episode_apart_from_the_raters_per_episode(rated):
    record = json.loads((rated["out"] / "protocol.json").read_text())
    prose = (rated["out"] / "protocol.md").read_text()

    assert record["episodes"] == 2
    assert record["raters_per_episode"] == {"min": RATERS, "median": RATERS, "max": RATERS}
    assert record["gold"] == {"episodes": 1, "annotations": GOLD_RATERS}
    assert f"Each episode was rated by {RATERS} annotators." in prose
    assert "9 annotations of 2 episodes and 1 gold episode were exported." in prose
    assert (f"The {GOLD_RATERS} annotations of gold episodes (hidden checks with reference "
            "ratings, each rated by any number of participants) are counted apart") in prose


@pytest.mark.server
def test_agreement_is_measured_on_the_ordinary_episodes_only_and_the_report_says_so(rated):
    exported = rated["exported"]

    report = build_report(exported.scores_long, exported.model_scores, exported.tally,
                          bootstrap=0)

    # Episode × agent units: the two ordinary episodes' four, never the gold episode's two.
    assert set(report.agreement["units"]) == {4}
    assert set(report.agreement["max_raters"]) == {RATERS}
    assert (f"{GOLD_RATERS} annotations of 1 gold episode (a study's hidden checks with "
            "reference ratings") in html.unescape(report.html())


def test_a_malformed_gold_mark_is_refused_naming_the_task_and_field(export_file):
    tasks = json.loads(export_file.read_text())
    tasks[1]["meta"] = {GOLD: "yes"}
    export_file.write_text(json.dumps(tasks))

    with pytest.raises(InvalidInput) as refused:
        export_json(export_file)

    assert "task 2" in str(refused.value) and f"meta.{GOLD}" in str(refused.value)
