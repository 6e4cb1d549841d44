"""A study that pre-fills the model's judgement learns, per dimension, where annotators changed it.

The EpisodeLog fixture goes in with its stored gpt-4 evaluation as a prediction. One annotator
rates with pre-filling off; then pre-filling is switched on and a second annotator keeps the
draft except for two scores. The export says which scores moved away from what was shown.
"""

from __future__ import annotations

import uuid

import pandas as pd
import pytest

from conftest import results_of, task_ids
from sotopia_ls.dimensions import AGENTS, DIMENSION_KEYS
from sotopia_ls.exporter import export_project
from sotopia_ls.importer import load_episodes
from sotopia_ls.labelstudio.client import create_project
from sotopia_ls.labelstudio.push import push_episodes

pytestmark = pytest.mark.server

CHANGED = {(1, "believability"): 7, (2, "secret"): -2}


def new_annotator(ls_client, role: str):
    name = f"{role}-{uuid.uuid4().hex[:8]}"
    return ls_client.users.create(email=f"{name}@example.com", username=name)


def test_the_export_marks_scores_changed_from_the_prefilled_prediction(
    ls_client, sample_data, project_title
):
    (episode,) = load_episodes([sample_data / "episodelog"]).episodes
    project = create_project(ls_client, project_title)
    push_episodes(ls_client, project.id, [episode], with_predictions=True, progress=False)
    task_id = task_ids(ls_client, project.id)[episode.id]
    stored = {
        agent: {key: episode.evaluation.pair(agent, key) for key in DIMENSION_KEYS}
        for agent in AGENTS
    }
    edited = {
        agent: {
            key: ("my own reading", CHANGED.get((agent, key), score))
            for key, (_, score) in scores.items()
        }
        for agent, scores in stored.items()
    }

    unprompted = new_annotator(ls_client, "blind")
    ls_client.annotations.create(
        id=task_id, result=results_of(stored), completed_by=unprompted.id
    )
    ls_client.projects.update(id=project.id, show_collab_predictions=True, model_version="gpt-4")
    prompted = new_annotator(ls_client, "prefilled")
    ls_client.annotations.create(
        id=task_id, result=results_of(edited), completed_by=prompted.id
    )

    long = export_project(ls_client, str(project.id)).scores_long
    blind = long[long.annotator_id == f"annotator-{unprompted.id}"]
    assert blind.prediction_model_version.eq("").all()
    assert blind.predicted_score.isna().all() and blind.changed_from_prediction.isna().all()

    shown = long[long.annotator_id == f"annotator-{prompted.id}"].set_index(["agent", "dimension"])
    assert shown.prediction_model_version.eq("gpt-4").all()
    for (agent, key), row in shown.iterrows():
        assert row.predicted_score == stored[agent][key][1]
        assert row.changed_from_prediction == ((agent, key) in CHANGED)
    assert shown.changed_from_prediction.sum() == len(CHANGED)
    assert not pd.isna(shown.changed_from_prediction).any()
