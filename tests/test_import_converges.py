"""However an import is interrupted or doubled, the project ends with one task per episode.

A real HTTP proxy on 127.0.0.1 stands between `sotopia-ls import` and the session's Label
Studio. It can lose the answer to an import that Label Studio saved (it answers 504, as a
gateway that timed out does), and it can hold imports back until two importers have both
listed the project, so that two imports of the same episodes really run at once.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest
from click.testing import CliRunner

from sotopia_ls.cli import main
from sotopia_ls.errors import LabelStudioError
from sotopia_ls.importer import load_episodes
from sotopia_ls.labelstudio import client as ls
from sotopia_ls.labelstudio.client import create_project, episode_tasks, import_batch
from sotopia_ls.labelstudio.push import task_payload
from sotopia_ls.labelstudio.server import free_port

pytestmark = pytest.mark.server

IMPORT = "/import"


@dataclass
class Behaviour:
    """What the proxy does: lose the answer to the first ``lose`` imports, and hold every
    import until ``listings_before_imports`` task listings have passed."""

    lose: int = 0
    listings_before_imports: int = 0
    listings: int = 0
    lost: int = 0
    passed: threading.Condition = field(default_factory=threading.Condition)


def proxy_handler(upstream: str, behaviour: Behaviour) -> type[BaseHTTPRequestHandler]:
    class Forward(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:  # keep the test output clean
            pass

        def _forward(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            is_import = self.command == "POST" and self.path.split("?")[0].endswith(IMPORT)
            if is_import:
                with behaviour.passed:
                    behaviour.passed.wait_for(
                        lambda: behaviour.listings >= behaviour.listings_before_imports,
                        timeout=60)
            headers = {k: v for k, v in self.headers.items()
                       if k.lower() not in ("host", "content-length", "connection")}
            answer = httpx.request(self.command, upstream + self.path, content=body,
                                   headers=headers, timeout=120)
            if self.command == "GET" and self.path.startswith("/api/tasks"):
                with behaviour.passed:
                    behaviour.listings += 1
                    behaviour.passed.notify_all()
            if is_import and behaviour.lost < behaviour.lose:
                behaviour.lost += 1  # Label Studio saved the batch; its answer never arrives
                self.send_response(504)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            content = answer.content
            self.send_response(answer.status_code)
            for name, value in answer.headers.items():
                if name.lower() not in ("content-length", "transfer-encoding", "connection",
                                        "content-encoding"):
                    self.send_header(name, value)
            self.send_header("Content-Length", str(len(content)))
            self.end_headers()
            self.wfile.write(content)

        do_GET = do_POST = do_PATCH = do_DELETE = do_PUT = _forward

    return Forward


@pytest.fixture
def proxy(label_studio) -> Iterator[tuple[str, Behaviour]]:
    behaviour = Behaviour()
    server = ThreadingHTTPServer(("127.0.0.1", free_port()),
                                 proxy_handler(label_studio.url, behaviour))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", behaviour
    server.shutdown()


@pytest.fixture(scope="module")
def episodes_file(tmp_path_factory, sample_data) -> Path:
    """120 oTree episode files: the sample ones again under new episode ids."""
    folder = tmp_path_factory.mktemp("episodes")
    originals = sorted((sample_data / "otree_episodes").rglob("*.json"))
    for number in range(120):
        record = json.loads(originals[number % len(originals)].read_text(encoding="utf-8"))
        record["pk"] = f"copy-{number:03d}-{record['pk']}"
        (folder / f"{record['pk']}.json").write_text(json.dumps(record), encoding="utf-8")
    return folder


def copies_per_episode(ls_client, project_id: int) -> set[int]:
    return {len(tasks) for tasks in episode_tasks(ls_client, project_id).values()}


def test_a_lost_answer_to_a_saved_import_does_not_duplicate_tasks(
    ls_client, label_studio, proxy, episodes_file, project_title
):
    url, behaviour = proxy
    behaviour.lose = 1
    project = create_project(ls_client, project_title)
    result = CliRunner().invoke(
        main, ["import", str(episodes_file), "--project", str(project.id), "--batch-size", "50"],
        env={"LABEL_STUDIO_URL": url, "LABEL_STUDIO_API_KEY": label_studio.credentials.api_key},
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    assert behaviour.lost == 1
    assert "imported 120 task(s)" in result.output
    assert ("1 request(s) failed after the server may have saved them: checked what was saved "
            "and sent only the rest") in result.output
    assert copies_per_episode(ls_client, project.id) == {1}
    assert len(episode_tasks(ls_client, project.id)) == 120


def test_two_imports_of_the_same_episodes_at_once_end_with_one_task_each(
    ls_client, label_studio, proxy, episodes_file, project_title
):
    url, behaviour = proxy
    behaviour.listings_before_imports = 2  # both importers see an empty project first
    project = create_project(ls_client, project_title)
    command = [sys.executable, "-m", "sotopia_ls", "import", str(episodes_file),
               "--project", str(project.id), "--batch-size", "40"]
    env = {"LABEL_STUDIO_URL": url, "LABEL_STUDIO_API_KEY": label_studio.credentials.api_key,
           "PATH": "/usr/bin:/bin"}
    running = [subprocess.Popen(command, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True) for _ in range(2)]
    outputs = [process.communicate(timeout=600)[0] for process in running]
    assert [process.returncode for process in running] == [0, 0], outputs
    assert all("imported 120 task(s)" in output for output in outputs)
    assert any("repaired: removed" in output for output in outputs), outputs
    assert copies_per_episode(ls_client, project.id) == {1}
    assert len(episode_tasks(ls_client, project.id)) == 120


def test_check_repairs_copies_nobody_worked_on_and_keeps_the_others(
    ls_client, label_studio, sample_data, project_title
):
    episodes = load_episodes([sample_data / "otree_episodes" / "GPT3.5-GPT3.5"]).episodes[:3]
    project = create_project(ls_client, project_title)
    first = import_batch(ls_client, project.id, [task_payload(e) for e in episodes])
    second = import_batch(ls_client, project.id, [task_payload(e) for e in episodes])
    user = ls_client.users.create(username=f"{project_title}-a", email=f"{project_title}@a.test")
    for task in (first[0], second[0]):  # episode 0 was rated in both of its copies
        ls_client.annotations.create(id=task, result=[], completed_by=user.id)
    env = {"LABEL_STUDIO_URL": label_studio.url,
           "LABEL_STUDIO_API_KEY": label_studio.credentials.api_key}

    report = CliRunner().invoke(main, ["check", "--project", str(project.id), "--no-repair"],
                                env=env, catch_exceptions=False)
    assert report.exit_code == 0, report.output
    assert "2 surplus task(s) that repeat an episode and hold no annotation found" in report.output
    assert copies_per_episode(ls_client, project.id) == {2}

    repaired = CliRunner().invoke(main, ["check", "--project", str(project.id)], env=env,
                                  catch_exceptions=False)
    assert repaired.exit_code == 0, repaired.output
    assert f"hold no annotation removed: task ids {second[1]}, {second[2]}" in repaired.output
    assert (f"warning: episode {episodes[0].id} is in 2 annotated tasks ({first[0]}, "
            f"{second[0]})") in repaired.output
    tasks = episode_tasks(ls_client, project.id)
    assert {len(copies) for episode, copies in tasks.items() if episode != episodes[0].id} == {1}
    assert len(tasks[episodes[0].id]) == 2


def test_a_listing_asks_for_each_page_once_and_never_past_the_last(
    label_studio, ls_client, sample_data, project_title, monkeypatch
):
    """With two tasks a page, projects of 0, 1, 2 and 3 tasks are listed whole in 1, 1, 1 and
    2 requests, none answered 404, each asking for task fields only where it reads no more."""
    monkeypatch.setattr(ls, "_PAGE_SIZE", 2)
    sent: list[httpx.Request] = []
    answers: list[int] = []
    counted = ls.Client(base_url=label_studio.url, api_key=label_studio.credentials.api_key,
                        httpx_client=httpx.Client(timeout=60, event_hooks={
                            "request": [sent.append],
                            "response": [lambda response: answers.append(response.status_code)]}))
    episodes = load_episodes([sample_data / "otree_episodes" / "GPT3.5-GPT3.5"]).episodes[:3]
    project = create_project(ls_client, project_title)
    listings = {  # what each lists, and the fields it asks for
        "task_only": [lambda: ls.task_records(counted, project.id),
                      lambda: ls.project_task_data(counted, project.id),
                      lambda: ls.merge_task_meta(counted, project.id, "k", {}),
                      # the client's own list, as a test uses it
                      lambda: list(counted.tasks.list(project=project.id, include="id",
                                                      page_size=ls._PAGE_SIZE))],
        # draft_exists, and a task's annotations, come with fields="all" only
        "all": [lambda: episode_tasks(counted, project.id),
                lambda: ls.ground_truth_results(counted, project.id)],
    }
    for held, requests in [(0, 1), (1, 1), (2, 1), (3, 2)]:
        if held:
            import_batch(ls_client, project.id, [task_payload(episodes[held - 1])])
        for fields, calls in listings.items():
            for listing in calls:
                sent.clear()
                listing()
                # no fields asked: the server's default, "task_only"
                assert [r.url.params.get("fields", "task_only") for r in sent
                        ] == [fields] * requests, held
        assert len(ls.task_records(counted, project.id)) == held
        assert len(ls.project_task_data(counted, project.id)) == held
        assert len(episode_tasks(counted, project.id)) == held
    assert ls.find_project(counted, project_title).id == project.id
    assert set(answers) == {200}


def test_a_project_read_has_label_studio_count_only_what_it_reads(
    label_studio, ls_client, sample_data, project_title
):
    """Label Studio counts all eight of a project's counters at each read or update unless told
    which fields to send: finding a project (by id or title), counting its tasks or its
    predictions and switching pre-fill on and off each ask for the fields read, and work."""
    sent: list[httpx.Request] = []
    counted = ls.Client(base_url=label_studio.url, api_key=label_studio.credentials.api_key,
                        httpx_client=httpx.Client(timeout=60, event_hooks={"request": [sent.append]}))
    episodes = load_episodes([sample_data / "otree_episodes" / "GPT3.5-GPT3.5",
                              sample_data / "episodelog"]).episodes[-3:]  # the last one rated
    project = create_project(ls_client, project_title)
    import_batch(ls_client, project.id, [task_payload(e, with_predictions=True) for e in episodes])
    assert ls.find_project(counted, project.id) == project
    assert ls.find_project(counted, project_title) == project
    assert ls.task_count(counted, project.id) == 3
    assert ls.prediction_count(counted, project.id) == 1
    assert ls.set_prefill(counted, project.id, True)  # the one prediction's model version
    assert ls_client.projects.get(id=project.id).show_collab_predictions is True
    ls.set_prefill(counted, project.id, False)
    assert ls_client.projects.get(id=project.id).show_collab_predictions is False
    read = "id,title,label_config,maximum_annotations,expert_instruction,show_instruction"
    assert [(r.method, r.url.params.get("include")) for r in sent] == [
        ("GET", read), ("GET", read), ("GET", "task_number"), ("GET", "total_predictions_number"),
        ("GET", None), ("PATCH", "id"), ("PATCH", "id")]


def test_a_listing_page_that_gives_no_count_is_refused_rather_than_cut_short():
    """A server (or a proxy before it) whose page omits the total: the listing cannot know it
    has every task, so it stops with Label Studio's error, never a partial list."""
    page = SimpleNamespace(items=[SimpleNamespace(id=1)], response=SimpleNamespace(total=None))
    with pytest.raises(LabelStudioError, match="gave no total of its items"):
        list(ls._pages(lambda number: page, "total"))
