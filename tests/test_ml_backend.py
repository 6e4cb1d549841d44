"""The pre-annotation backend, run as a real process from its own environment (.venv-ml).

- A researcher connects the backend to a project and asks Label Studio for predictions: the
  episode with a stored Sotopia evaluation gets it as a 28-result prediction, the oTree
  episode (no evaluation) gets none, and asking again adds nothing.
- With the llm provider, the backend asks a chat-completions endpoint (a stub listening on
  127.0.0.1 in this test process): usable answers become predictions, unusable ones are
  asked once more and then skipped with the reason in the backend's log.
- Behind basic auth, Label Studio still reaches every route it calls (/health, /setup,
  /predict, /train, /versions), and its event webhook to the backend is switched off.
- A Label Studio that blocks local addresses gets a backend on 127.0.0.1 refused with the fix:
  tests/test_up.py, on the demo's server as `up` starts it by default.
- Label Studio's /health and /setup calls get what it expects. Bad requests of every kind, on
  every route: tests/test_ml_backend_inputs.py.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner
from packaging.version import Version

from sotopia_ls.cli import main
from sotopia_ls.config import labeling_config
from sotopia_ls.dimensions import AGENTS, DIMENSIONS, DIMENSION_KEYS, rating_name, reasoning_name
from sotopia_ls.episode import Episode
from sotopia_ls.importer import load_episodes
from sotopia_ls.labelstudio import server
from sotopia_ls.labelstudio.client import create_project, prediction_count, request_predictions
from sotopia_ls.labelstudio.push import push_episodes, task_payload
from sotopia_ls.labelstudio.tasks import episode_to_task
from sotopia_ls.ml_backend.commands import unmet_requirements

from ml_backend_support import AUTH, AUTH_SETTINGS, Backend, serve, start_backend

FIXTURE_EPISODE = "episodelog/fixture_episode.json"
OTREE_EPISODE = "otree_episodes/GPT3.5-GPT3.5"


@pytest.fixture(scope="module")
def stored_backend(ml_python: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Backend]:
    """`sotopia-ls ml-backend` itself, on a free loopback port."""
    port = server.free_port()
    command = "from sotopia_ls.ml_backend.commands import ml_backend_command; ml_backend_command()"
    backend = start_backend(
        [sys.executable, "-c", command, "--port", str(port), "--python", str(ml_python)],
        port, {}, tmp_path_factory.mktemp("ml") / "stored.log",
    )
    yield backend
    backend.stop()


@pytest.fixture(scope="module")
def episodes(sample_data: Path) -> list[Episode]:
    """The EpisodeLog fixture (with an evaluation) and one oTree episode (without)."""
    otree = sorted((sample_data / OTREE_EPISODE).glob("*.json"))[0]
    loaded = load_episodes([sample_data / FIXTURE_EPISODE, otree])
    loaded.raise_on_problems()
    evaluated, plain = sorted(loaded.episodes, key=lambda e: e.evaluation is None)
    assert evaluated.evaluation is not None and plain.evaluation is None
    return [evaluated, plain]


def stored_choices(episode: Episode) -> dict[str, str]:
    assert episode.evaluation is not None
    return {
        rating_name(key, agent): str(episode.evaluation.pair(agent, key)[1])
        for agent in AGENTS
        for key in DIMENSION_KEYS
    }


def predicted_choices(result: list[dict[str, Any]]) -> dict[str, str]:
    return {r["from_name"]: r["value"]["choices"][0] for r in result if r["type"] == "choices"}


# --- Acceptance 1: end to end through Label Studio ------------------------------------------


@pytest.mark.server
def test_label_studio_gets_the_stored_evaluation_as_a_prediction(
    label_studio, ls_client, stored_backend, episodes, project_title
):
    evaluated, plain = episodes
    project = create_project(ls_client, project_title)
    push_episodes(ls_client, project.id, episodes)
    env = {"LABEL_STUDIO_URL": label_studio.url, "LABEL_STUDIO_API_KEY": label_studio.credentials.api_key}

    connected = CliRunner().invoke(
        main,
        ["connect", "--project", str(project.id), "--backend-url", stored_backend.url, "--retrieve"],
        env=env, catch_exceptions=False,
    )
    assert connected.exit_code == 0, connected.output
    assert "1 prediction(s) made" in connected.output
    assert "predictions are hidden from annotators" in connected.output
    assert label_studio.credentials.api_key not in connected.output

    def predictions_by_episode() -> dict[str, list[Any]]:
        tasks = {t.id: t.data["episode_id"] for t in ls_client.tasks.list(project=project.id, include="id,data")}
        found: dict[str, list[Any]] = {episode_id: [] for episode_id in tasks.values()}
        for p in ls_client.predictions.list(project=project.id):
            found[tasks[p.task]].append(p)
        return found

    found = predictions_by_episode()
    assert found[plain.id] == []
    (stored,) = found[evaluated.id]
    # Label Studio 1.23 keeps the project's prediction count: the count "made" is read from it.
    assert prediction_count(ls_client, project.id) == 1
    assert len(stored.result) == 28
    assert predicted_choices(stored.result) == stored_choices(evaluated)
    assert {r["from_name"] for r in stored.result} == {
        name(key, agent) for agent in AGENTS for key in DIMENSION_KEYS for name in (rating_name, reasoning_name)
    }
    assert stored.model_version == evaluated.evaluation.evaluator == "gpt-4"
    # Label Studio shows a prediction's score as a confidence in percent: a Sotopia score is none.
    assert stored.score is None

    # Asking again adds nothing, and says why; in batches of one task, each task is asked once.
    again = CliRunner().invoke(
        main, ["connect", "--project", str(project.id), "--backend-url", stored_backend.url, "--retrieve"],
        env=env, catch_exceptions=False,
    )
    assert again.exit_code == 0, again.output
    assert ("no prediction made: 1 of 2 task(s) carry no model evaluation in their meta" in again.output
            and "run `sotopia-ls evaluate` first, or serve the backend with --provider llm" in again.output)
    assert request_predictions(ls_client, project.id, batch_size=1) == 0
    assert {episode: len(p) for episode, p in predictions_by_episode().items()} == {evaluated.id: 1, plain.id: 0}

    prefilled = CliRunner().invoke(
        main, ["connect", "--project", project_title, "--backend-url", stored_backend.url, "--prefill"],
        env=env, catch_exceptions=False,
    )
    assert prefilled.exit_code == 0, prefilled.output
    assert "annotators see predictions of gpt-4 pre-filled" in prefilled.output
    settings = ls_client.projects.get(id=project.id)
    assert settings.show_collab_predictions and settings.model_version == "gpt-4"
    assert len(ls_client.ml.list(project=project.id)) == 1  # reconnecting updates, never duplicates

    # What the exporter compares with: the prediction shown is kept with each annotation.
    ls_client.annotations.create(id=stored.task, result=stored.result, lead_time=12.5)
    exported = json.loads(b"".join(
        ls_client.projects.exports.download_sync(project.id, export_type="JSON", download_all_tasks=True)
    ))
    (annotation,) = next(task for task in exported if task["id"] == stored.task)["annotations"]
    assert annotation["prediction"]["id"] == stored.id
    assert annotation["prediction"]["model_version"] == "gpt-4"


@pytest.mark.server
def test_connecting_a_backend_that_is_not_running_says_why(label_studio, ls_client, project_title):
    project = create_project(ls_client, project_title)
    nobody = f"http://127.0.0.1:{server.free_port()}"
    env = {"LABEL_STUDIO_URL": label_studio.url, "LABEL_STUDIO_API_KEY": label_studio.credentials.api_key}
    result = CliRunner().invoke(main, ["connect", "--project", str(project.id), "--backend-url", nobody], env=env)
    assert result.exit_code == 1
    assert "registering the ML backend failed: HTTP 400" in result.output
    assert ls_client.ml.list(project=project.id) == []


@pytest.mark.server
def test_label_studio_reaches_a_backend_behind_basic_auth(
    label_studio, ls_client, ml_python, episodes, project_title, tmp_path
):
    backend = serve(ml_python, tmp_path / "auth.log", "stored", **AUTH_SETTINGS)
    project = create_project(ls_client, project_title)
    push_episodes(ls_client, project.id, episodes[:1])
    env = {"LABEL_STUDIO_URL": label_studio.url, "LABEL_STUDIO_API_KEY": label_studio.credentials.api_key}
    try:
        arguments = ["connect", "--project", str(project.id), "--backend-url", backend.url]
        refused = CliRunner().invoke(main, arguments, env=env)
        assert refused.exit_code == 1
        connected = CliRunner().invoke(main, [*arguments, "--retrieve"], env={**env, **AUTH_SETTINGS})
        assert connected.exit_code == 0, connected.output
        (registered,) = ls_client.ml.list(project=project.id)
        # The other calls Label Studio makes: "Start training" (/train or /webhook) and the
        # model versions (/versions), both with the backend's credentials.
        ls_client.ml.train(id=registered.id)
        assert ls_client.ml.list_model_versions(id=registered.id).versions == []
        # Its event webhook is off: an annotation sends the backend nothing.
        (webhook,) = [w for w in ls_client.webhooks.list(project=str(project.id)) if w.url == f"{backend.url}/webhook"]
        assert webhook.is_active is False
        (prediction,) = ls_client.predictions.list(project=project.id)
        ls_client.annotations.create(id=prediction.task, result=prediction.result, lead_time=3.0)
    finally:
        backend.stop()
    assert AUTH[1] not in connected.output
    assert predicted_choices(prediction.result) == stored_choices(episodes[0])
    log = backend.log()
    assert "ignored a training request" in log or "ignored event 'START_TRAINING'" in log, log
    assert [line for line in log.splitlines() if "refused" in line] == [
        line for line in log.splitlines() if "refused GET '/health': no valid basic auth" in line
    ], log  # only the first connect, without credentials, was refused
    assert AUTH[1] not in log


def test_the_backend_runs_on_maintained_flask_and_werkzeug(ml_python: Path) -> None:
    assert unmet_requirements(ml_python) == []
    versions = subprocess.run(
        [str(ml_python), "-c", "from importlib.metadata import version as v; "
         "print(v('flask'), v('werkzeug'), v('jinja2'), v('label-studio-ml'))"],
        capture_output=True, text=True, check=True,
    ).stdout.split()
    flask, werkzeug, jinja2, library = map(Version, versions)
    assert library == Version("1.0.9")
    assert flask >= Version("3.1.3") and werkzeug >= Version("3.1.6") and jinja2 >= Version("3.1.6")


# --- Acceptance 3: what Label Studio calls ------------------------------------------------


def test_health_and_setup_answer_as_label_studio_expects(stored_backend):
    health = httpx.get(f"{stored_backend.url}/health")
    assert health.status_code == 200 and health.json()["status"] == "UP"
    setup = httpx.post(
        f"{stored_backend.url}/setup",
        json={"project": "1.1700000000", "schema": labeling_config(), "hostname": "http://127.0.0.1:8080",
              "access_token": "owner-token-123", "extra_params": None},
    )
    assert setup.status_code == 200 and isinstance(setup.json()["model_version"], str)
    assert "owner-token-123" not in stored_backend.log()


def test_predict_answers_in_task_order_and_skips_what_is_already_there(stored_backend, episodes):
    evaluated, plain = episodes
    tasks = [{"id": 1, **task_payload(plain)}, {"id": 2, **task_payload(evaluated)}]
    body = {"tasks": tasks, "project": "1.1700000000", "label_config": labeling_config(), "params": {}}
    answer = httpx.post(f"{stored_backend.url}/predict", json=body, timeout=30)
    assert answer.status_code == 200
    nothing, (prediction,) = answer.json()["results"]
    assert nothing == []
    assert predicted_choices(prediction["result"]) == stored_choices(evaluated)
    assert prediction["model_version"] == "gpt-4" and "score" not in prediction

    tasks[1]["predictions"] = [{"model_version": "gpt-4", "result": prediction["result"]}]
    again = httpx.post(f"{stored_backend.url}/predict", json=body, timeout=30)
    assert again.json()["results"] == [[], []]


# --- Acceptance 2: the llm provider against a local chat-completions endpoint --------------

API_KEY = "sk-test-not-a-real-key"
MODEL = "judge-model-1"


def ideal_answer() -> dict[str, Any]:
    """Agent 1 gets the top of every range, agent 2 the bottom (negatives included)."""
    return {
        f"agent_{agent}": {
            d.key: {"reasoning": f"{d.label} for agent {agent}.", "score": d.range_high if agent == 1 else d.range_low}
            for d in DIMENSIONS
        }
        for agent in AGENTS
    }


def expected_choices() -> dict[str, str]:
    answer = ideal_answer()
    return {
        rating_name(key, agent): str(answer[f"agent_{agent}"][key]["score"])
        for agent in AGENTS for key in DIMENSION_KEYS
    }


def sloppy_answer() -> str:
    """Fenced, wrapped in prose, trailing commas, scores as strings."""
    answer = ideal_answer()
    for ratings in answer.values():
        for rating in ratings.values():
            rating["score"] = str(rating["score"])
    body = json.dumps(answer, indent=1).replace('"\n', '",\n').replace("}\n", "},\n")
    return f"Sure! Here is my evaluation:\n```json\n{body}\n```\nLet me know if you need more."


def out_of_range_answer() -> str:
    answer = ideal_answer()
    answer["agent_1"]["believability"]["score"] = 12
    return json.dumps(answer)


# Each case is an episode whose scenario names it; the stub answers attempt n with replies[n].
REPLIES: dict[str, list[str]] = {
    "valid": [json.dumps(ideal_answer())],
    "sloppy": [sloppy_answer()],
    "fixed-on-retry": ["I would rather not say.", json.dumps(ideal_answer())],
    "out-of-range": [out_of_range_answer(), out_of_range_answer()],
    "garbage": ["<html>502 Bad Gateway</html>", "{'agent_1': nonsense}"],
    "slow": ["SLEEP"],  # a request that got no answer is not sent again
}
EXPECTED_REASON = {
    "out-of-range": "agent_1: believability score 12 is outside 0 to 10",
    "garbage": "attempt 2: the answer is not valid JSON",
    "slow": "attempt 1: no complete answer within 1 s",
}


class ChatStub(ThreadingHTTPServer):
    """A chat-completions endpoint on 127.0.0.1 answering from ``REPLIES``."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _ChatHandler)
        self.calls: Counter[str] = Counter()
        self.requests: list[dict[str, Any]] = []
        self.lock = threading.Lock()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"


class _ChatHandler(BaseHTTPRequestHandler):
    server: ChatStub

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        prompt = body["messages"][0]["content"]
        case = re.search(r"Scenario: case (\S+)", prompt).group(1)
        with self.server.lock:
            attempt = self.server.calls[case]
            self.server.calls[case] += 1
            self.server.requests.append(
                {"path": self.path, "auth": self.headers.get("Authorization"), "body": body}
            )
        reply = REPLIES[case][attempt]
        if reply == "SLEEP":
            time.sleep(1.5)
            reply = json.dumps(ideal_answer())
        payload = json.dumps(
            {"id": "x", "object": "chat.completion", "model": body["model"],
             "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": reply}}]}
        ).encode()
        try:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the backend stopped waiting: that is the point of the slow case

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def chat_stub() -> Iterator[ChatStub]:
    stub = ChatStub()
    thread = threading.Thread(target=stub.serve_forever, daemon=True)
    thread.start()
    yield stub
    stub.shutdown()
    stub.server_close()


def test_llm_answers_become_predictions_or_are_retried_once_then_skipped(
    ml_python, chat_stub, episodes, tmp_path
):
    backend = serve(
        ml_python, tmp_path / "llm.log", "llm",
        SOTOPIA_LS_LLM_BASE_URL=chat_stub.base_url, SOTOPIA_LS_LLM_MODEL=MODEL,
        SOTOPIA_LS_LLM_API_KEY=API_KEY, SOTOPIA_LS_LLM_TIMEOUT="1",
    )
    base = episode_to_task(episodes[1])
    cases = list(REPLIES)
    tasks = [{"id": n, "data": {**base, "scenario": f"case {case}"}} for n, case in enumerate(cases, start=1)]
    try:
        answer = httpx.post(
            f"{backend.url}/predict",
            json={"tasks": tasks, "project": "1.1", "label_config": labeling_config()},
            timeout=60,
        )
    finally:
        backend.stop()
    assert answer.status_code == 200
    results = dict(zip(cases, answer.json()["results"], strict=True))
    log = backend.log()

    for case in ("valid", "sloppy", "fixed-on-retry"):
        (prediction,) = results[case]
        assert prediction["model_version"] == MODEL
        assert predicted_choices(prediction["result"]) == expected_choices(), case
    for case, reason in EXPECTED_REASON.items():
        assert results[case] == [], case
        task_id = cases.index(case) + 1
        assert re.search(rf"task {task_id}: no prediction: .*{re.escape(reason)}", log), (case, log)
    assert chat_stub.calls == {case: len(replies) for case, replies in REPLIES.items()}

    first = chat_stub.requests[0]
    assert first["path"] == "/v1/chat/completions" and first["body"]["model"] == MODEL
    assert first["auth"] == f"Bearer {API_KEY}"
    (message,) = first["body"]["messages"]  # one message, as Sotopia's evaluator sends
    prompt = message["content"]
    assert episodes[1].agents[0].goal in prompt and episodes[1].agents[1].secret in prompt
    assert "Based on previous interactions, evaluate how well participants achieve their goals." in prompt
    for d in DIMENSIONS:
        assert f'"minimum": {d.range_low}, "maximum": {d.range_high}' in prompt
        assert d.guidance in prompt
    assert API_KEY not in log
