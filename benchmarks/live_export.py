"""Live-project export: how much memory the Label Studio server needs to hand a project over,
by an export snapshot or by ``/api/projects/{id}/export``, sampled from ``/proc``.

The snapshot runs first: Python seldom returns freed memory, so what the other way needs on
top of it shows as growth (docs/benchmarks.md, "Live export of a project too large for one
JSON document").
"""

from __future__ import annotations

import random
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path


from sotopia_ls.labelstudio.client import Client, create_project
from sotopia_ls.exporter.source import project_tasks, tasks_of
from sotopia_ls.exporter.wire import Task
from sotopia_ls.labelstudio.push import task_payload

from . import load

IMPORT_BATCH = 250


@dataclass(frozen=True)
class LiveFigures:
    method: str
    tasks: int
    annotations: int
    seconds: float
    server_rss_before_mb: float
    server_rss_peak_mb: float

    @property
    def growth_mb(self) -> float:
        return self.server_rss_peak_mb - self.server_rss_before_mb


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


@contextmanager
def _peak_rss(pid: int) -> Iterator[list[float]]:
    """Samples the process's RSS every 20 ms; the yielded list ends as [before, peak]."""
    figures = [_rss_mb(pid)] * 2
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.02):
            figures[1] = max(figures[1], _rss_mb(pid))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        yield figures
    finally:
        done.set()
        sampler.join()
        figures[1] = max(figures[1], _rss_mb(pid))


def annotated_project(
    client: Client, tasks: int, annotators: int, *, seed: int = 0
) -> int:
    """A project of ``tasks`` varied sample episodes, each with ``annotators`` real-looking answers."""
    rng = random.Random(seed)
    ratings = load.real_ratings()
    episodes = load.episodes(load.seed_episodes(), tasks, seed=seed)
    project = create_project(client, f"bench_live_{uuid.uuid4().hex[:8]}").id
    for start in range(0, len(episodes), IMPORT_BATCH):
        payloads = [
            task_payload(episode)
            | {"annotations": [{"result": rng.choice(ratings), "lead_time": 60.0}
                               for _ in range(annotators)]}
            for episode in episodes[start : start + IMPORT_BATCH]
        ]
        client.projects.import_tasks(id=project, request=payloads)
    return project


def endpoint_tasks(client: Client, project_id: int) -> Iterator[Task]:
    """Every task via ``/api/projects/{id}/export``, streamed on our side as the exporter did."""
    chunks = client.projects.exports.download_sync(
        project_id, export_type="JSON", download_all_tasks=True
    )
    yield from tasks_of(chunks, f"project {project_id}")


def _measure(
    method: str, pid: int, read: Callable[[], Iterator[Task]]
) -> LiveFigures:
    tasks = annotations = 0
    started = time.perf_counter()
    with _peak_rss(pid) as rss:
        for task in read():
            tasks += 1
            annotations += len(task.annotations)
    seconds = time.perf_counter() - started
    return LiveFigures(method, tasks, annotations, seconds, rss[0], rss[1])


def measure_live_export(
    client: Client, pid: int, *, tasks: int, annotators: int
) -> list[LiveFigures]:
    project = annotated_project(client, tasks, annotators)
    try:
        return [
            _measure("export snapshot (the exporter)", pid,
                     lambda: project_tasks(client, project)),
            _measure("/export", pid, lambda: endpoint_tasks(client, project)),
        ]
    finally:
        client.projects.delete(id=project)
