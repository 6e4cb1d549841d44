"""A large export is read a chunk of whole tasks at a time, by several worker processes.

The story: a lab exports a project with real Sotopia episodes and real human ratings, written
the ways Label Studio writes JSON (one line, or indented), with rationales that quote JSON and
one task longer than the cutter's search window. Read in tiny chunks by two workers, every
output file must be exactly what one process reading it whole writes; a broken file must be
refused, naming it, with nothing written.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import msgspec
import pandas as pd
import pytest

from conftest import results_of
from sotopia_ls.dimensions import AGENTS, DIMENSIONS
from sotopia_ls.errors import InvalidInput, SotopiaLSError
from sotopia_ls.exporter import OUTPUT_FILES, Reading, export_file
from sotopia_ls.exporter.chunks import _TAIL, task_chunks
from sotopia_ls.exporter.wire import Task
from sotopia_ls.importer import load_episodes
from sotopia_ls.labelstudio.tasks import episode_to_task
from sotopia_ls.scores import Evaluation

# Rationales a cutter that ignored strings or escapes would split inside.
TRICKY = [
    'She said "}, {\\"id\\": 1" and left',
    "a brace { and } and a backslash at the end \\",
    '"]}, {"annotations": [',
    "plain words",
]


def human_ratings(sample_data: Path) -> list[dict[int, dict[str, tuple[str, int]]]]:
    """The 85 rows of the sample oTree human evaluation, as (rationale, score) per agent."""
    rows = pd.concat(pd.read_csv(path) for path in
                     sorted((sample_data / "human_eval").glob("*_final.csv")))
    evaluations = [Evaluation.from_flat(row) for row in rows.to_dict("records")]
    return [{agent: {d.key: evaluation.pair(agent, d.key) for d in DIMENSIONS}
             for agent in AGENTS} for evaluation in evaluations]


@pytest.fixture(scope="module")
def tasks(sample_data) -> list[dict]:
    episodes = load_episodes([sample_data / "otree_episodes"]).episodes
    ratings = human_ratings(sample_data)
    tasks = []
    for number, episode in enumerate(episodes, start=1):
        annotations = []
        for k in (0, 1):
            rating = {a: dict(scores) for a, scores in
                      ratings[(2 * number + k) % len(ratings)].items()}
            agent, key = AGENTS[k], DIMENSIONS[number % len(DIMENSIONS)].key
            rating[agent][key] = (TRICKY[number % len(TRICKY)], rating[agent][key][1])
            annotations.append({
                "id": 10 * number + k, "completed_by": k + 1,
                "result": results_of(rating), "was_cancelled": False,
                "ground_truth": False, "lead_time": 30.5 + k,
                "created_at": "2026-11-01T10:00:00Z", "prediction": {},
            })
        tasks.append({"id": number, "data": episode_to_task(episode), "annotations": annotations,
                      "drafts": [], "predictions": []})
    # One task longer than the window searched for a cut.
    tasks[5]["annotations"][0]["result"][1]["value"]["text"] = ["long " * (_TAIL // 4)]
    return tasks


@pytest.fixture(params=["one line", "indented"])
def export(request, tasks, tmp_path) -> Path:
    path = tmp_path / "export.json"
    indent = None if request.param == "one line" else 2
    path.write_text(json.dumps(tasks, indent=indent, ensure_ascii=False))
    return path


def in_reads(path: Path, size: int):
    data = path.read_bytes()
    return (data[start : start + size] for start in range(0, len(data), size))


def test_chunks_hold_every_task_whole_however_the_bytes_arrive(export):
    whole = msgspec.json.decode(export.read_bytes(), type=list[Task])
    for piece, chunk in [(1000, 4096), (65536, 20000), (7, 50000)]:
        chunks = list(task_chunks(in_reads(export, piece), origin="x", size=chunk))
        assert len(chunks) > 3
        decoded = [task for c in chunks for task in msgspec.json.decode(c, type=list[Task])]
        assert decoded == whole


def test_two_workers_on_small_chunks_write_what_one_process_writes(export, tmp_path):
    one = export_file(export, tmp_path / "one", reading=Reading(workers=1))
    many = export_file(export, tmp_path / "many", reading=Reading(workers=2, chunk_bytes=30000))
    assert one.tally == many.tally and one.tally.exported == 2 * 42
    for name in OUTPUT_FILES:
        if name.endswith(".parquet"):
            pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "one" / name),
                                          pd.read_parquet(tmp_path / "many" / name))
        else:
            assert (tmp_path / "one" / name).read_bytes() == \
                   (tmp_path / "many" / name).read_bytes(), name
    pd.testing.assert_frame_equal(one.scores_long, many.scores_long)
    rationales = set(pd.read_csv(tmp_path / "many" / "scores_long.csv")["rationale"])
    assert set(TRICKY) <= rationales


def _first_episode_again_last(tasks: list[dict], path: Path, annotators: tuple[int, int]) -> str:
    split = [dict(task) for task in tasks]
    split[-1] = split[-1] | {"data": split[0]["data"], "annotations": [
        annotation | {"completed_by": who}
        for annotation, who in zip(split[-1]["annotations"], annotators)
    ]}
    path.write_text(json.dumps(split))
    return split[0]["data"]["episode_id"]


def test_an_episode_in_two_far_apart_tasks_is_aggregated_whole(tasks, tmp_path):
    path = tmp_path / "export.json"
    episode = _first_episode_again_last(tasks, path, annotators=(3, 4))
    many = export_file(path, tmp_path / "many", reading=Reading(workers=2, chunk_bytes=30000))
    export_file(path, tmp_path / "one", reading=Reading(workers=1))
    episodes = {record["episode"]: record for record in
                map(json.loads, (tmp_path / "many" / "episodes.jsonl").open())}
    assert episodes[episode]["annotator_count"] == 4 and len(episodes) == 41
    assert many.several_tasks == {episode: [1, len(tasks)]}
    assert (tmp_path / "one" / "episodes.jsonl").read_bytes() == \
           (tmp_path / "many" / "episodes.jsonl").read_bytes()


def test_an_annotator_who_rated_an_episode_in_two_tasks_counts_once(tasks, tmp_path):
    path = tmp_path / "export.json"
    episode = _first_episode_again_last(tasks, path, annotators=(1, 2))
    result = export_file(path, tmp_path / "out", reading=Reading(workers=2, chunk_bytes=30000))
    episodes = {record["episode"]: record for record in
                map(json.loads, (tmp_path / "out" / "episodes.jsonl").open())}
    assert episodes[episode]["annotator_count"] == 2
    assert result.tally.duplicates == 2 and result.tally.balanced
    refused = result.errors.set_index("annotation_id")["reason"]
    assert set(refused.index) == {10, 11}
    assert refused[10].startswith(f"duplicate: the same annotator also annotated episode {episode}")
    # Both its ratings in task 1 were replaced; the episode is still in two tasks.
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["episodes_in_several_tasks"] == {episode: [1, len(tasks)]}
    assert summary["audit"]["episode_in_several_tasks"] == 1


class _OneTimePipe(threading.Thread):
    """A named pipe that gives ``content`` to its first reader and an empty read to any later
    one, counting the readers."""

    def __init__(self, path: Path, content: bytes) -> None:
        super().__init__(daemon=True)
        os.mkfifo(path)
        self.path, self.content, self.readers = path, content, 0
        self.closing = threading.Event()

    def run(self) -> None:
        while not self.closing.is_set():
            try:
                with self.path.open("wb", buffering=0) as pipe:  # waits for a reader
                    if self.closing.is_set():
                        return
                    self.readers += 1
                    if self.readers == 1:
                        pipe.write(self.content)
            except BrokenPipeError:  # the reader left without reading it all
                pass
            self._reader_gone()

    def _reader_gone(self) -> None:
        """Wait until no reader holds the pipe open: opening it to write without waiting
        fails exactly then."""
        while not self.closing.is_set():
            try:
                os.close(os.open(self.path, os.O_WRONLY | os.O_NONBLOCK))
            except OSError:
                return
            time.sleep(0.01)

    def close(self) -> None:
        self.closing.set()
        os.close(os.open(self.path, os.O_RDONLY | os.O_NONBLOCK))  # lets the waiting open return
        self.join()


@contextmanager
def one_time_pipe(path: Path, content: bytes) -> Iterator[_OneTimePipe]:
    pipe = _OneTimePipe(path, content)
    pipe.start()
    try:
        yield pipe
    finally:
        pipe.close()


def test_an_export_piped_in_is_read_once_even_with_an_episode_in_two_tasks(tasks, tmp_path):
    source = tmp_path / "export.json"
    episode = _first_episode_again_last(tasks, source, annotators=(1, 2))
    reading = Reading(workers=2, chunk_bytes=30000)
    with one_time_pipe(tmp_path / "export.pipe", source.read_bytes()) as pipe:
        piped = export_file(pipe.path, tmp_path / "piped", reading=reading)
    assert pipe.readers == 1
    assert piped.several_tasks == {episode: [1, len(tasks)]} and piped.tally.duplicates == 2
    export_file(source, tmp_path / "from_file", reading=reading)
    for name in OUTPUT_FILES:
        if name.endswith(".parquet"):  # row groups follow the chunks, cut differently
            pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "piped" / name),
                                          pd.read_parquet(tmp_path / "from_file" / name))
        else:
            assert (tmp_path / "piped" / name).read_bytes() == \
                   (tmp_path / "from_file" / name).read_bytes(), name


@pytest.mark.parametrize(
    ("mangle", "reason"),
    [
        (lambda text: "{" + text[1:-1] + "}", "expected a list of tasks"),
        (lambda text: text[: len(text) // 2], "invalid JSON"),
        (lambda text: text[:-1] + ", ]", "a comma after the last task"),
        (lambda text: text + " trailing", "invalid JSON"),
        (lambda text: text.replace('"annotations": [{"id": 300,', '"annotations": 7, "x": [{'),
         "annotations is not a list"),
    ],
)
def test_a_broken_export_is_refused_naming_the_file_and_nothing_is_written(
    tasks, tmp_path, mangle, reason
):
    path = tmp_path / "broken.json"
    path.write_text(mangle(json.dumps(tasks)))
    out = tmp_path / "out"
    with pytest.raises(InvalidInput) as error:
        export_file(path, out, reading=Reading(workers=2, chunk_bytes=30000))
    assert reason in str(error.value) and str(path) in str(error.value)
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["broken.json"]


def test_tasks_without_a_comma_between_them_are_refused(tasks, tmp_path):
    path = tmp_path / "broken.json"
    path.write_text(json.dumps(tasks).replace('}, {"id": 30,', '} {"id": 30,'))
    with pytest.raises(InvalidInput, match="tasks must be separated by commas"):
        list(task_chunks(in_reads(path, 1000), origin=str(path), size=1000))


def test_a_task_longer_than_the_search_window_is_cut_by_counting_from_the_start(tasks):
    text = json.dumps([tasks[0], tasks[5]]).encode()
    long_start = text.index(b'{"id": 6,')
    first = text[: long_start + _TAIL + 1000]  # ends deep inside the long task
    chunks = list(task_chunks([first, text[len(first):]], origin="x", size=1))
    assert [[task.id for task in msgspec.json.decode(chunk, type=list[Task])]
            for chunk in chunks] == [[1], [6], []]


def test_odd_result_shapes_cost_only_their_annotation(tasks, tmp_path):
    odd = json.loads(json.dumps(tasks[:3]))
    odd[1]["annotations"][0]["result"][0]["value"] = "8"  # believability_1, not an object
    odd[1]["annotations"][1]["result"] = {"not": "a list"}
    odd[2]["annotations"][0]["result"].append("junk")  # ignored: not a result object
    path = tmp_path / "export.json"
    path.write_text(json.dumps(odd))
    result = export_file(path, tmp_path / "out", reading=Reading(workers=1))
    assert result.tally.reconciliation() == \
        "6 annotations = 4 exported + 2 rejected + 0 cancelled/skipped"
    errors = result.errors.set_index(["annotation_id", "field"])["reason"]
    assert errors[(20, "believability_1")] == \
        "no rating value (expected choices, number or rating)"
    assert errors[(21, "believability_1")] == "missing rating" and len(errors.loc[21]) == 28


def test_text_that_looks_like_task_ends_cannot_misplace_a_cut(tasks, tmp_path):
    """Workers guess their cuts from a window of the file; a rationale made of ``}, {`` can
    fool the guess, and then the export is read again with exact cuts."""
    fooling = json.loads(json.dumps(tasks[:4]))
    fooling[1]["annotations"][1]["result"][3]["value"]["text"] = ["} , {} , {" * 60000]
    path = tmp_path / "export.json"
    path.write_text(json.dumps(fooling))
    one = export_file(path, tmp_path / "one", reading=Reading(workers=1))
    many = export_file(path, tmp_path / "many", reading=Reading(workers=2, chunk_bytes=30000))
    assert one.tally == many.tally and one.tally.exported == 8
    for name in ("annotations.jsonl", "scores_wide.csv", "episodes.jsonl"):
        assert (tmp_path / "one" / name).read_bytes() == (tmp_path / "many" / name).read_bytes()


def test_a_worker_that_dies_is_reported_with_a_fix(export, tmp_path, monkeypatch):
    def killed(chunk, settings):
        os._exit(9)  # as the kernel's out-of-memory killer would

    monkeypatch.setattr("sotopia_ls.exporter.parallel.validate_chunk", killed)
    with pytest.raises(SotopiaLSError, match="--workers"):
        export_file(export, tmp_path / "out", reading=Reading(workers=2, chunk_bytes=30000))
    assert not (tmp_path / "out").exists()
