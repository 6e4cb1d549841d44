"""Import: the importer's wall time against plain SDK bulk calls carrying the same JSON, each
into a fresh project; rounds alternate which side goes first, so a server slowing as its
database grows penalizes both alike (docs/benchmarks.md, "What is measured").
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from statistics import median


from sotopia_ls.labelstudio.client import Client, create_project
from sotopia_ls.episode import Episode
from sotopia_ls.labelstudio.push import push_episodes, task_payload


@dataclass
class ImportFigures:
    """Seconds per round of each side.

    Interference from other work on the machine only ever adds time, so ``ratio`` compares the
    best round of each side (as ``timeit`` does); ``median_ratio`` is the median of the per-round
    ratios, for comparison.
    """

    episodes: int
    batch_size: int
    importer_seconds: list[float] = field(default_factory=list)
    baseline_seconds: list[float] = field(default_factory=list)
    importer_cpu_seconds: list[float] = field(default_factory=list)
    baseline_cpu_seconds: list[float] = field(default_factory=list)
    rerun_seconds: list[float] = field(default_factory=list)

    @property
    def ratio(self) -> float:
        return min(self.importer_seconds) / min(self.baseline_seconds)

    @property
    def median_ratio(self) -> float:
        return median(ours / plain for ours, plain in zip(self.importer_seconds, self.baseline_seconds))


def _fresh_project(client: Client) -> int:
    return create_project(client, f"bench_{uuid.uuid4().hex[:10]}").id


def _timed(action: Callable[[], object]) -> tuple[float, float]:
    """Wall and CPU seconds of ``action`` (CPU: this process only, i.e. the client side)."""
    wall, cpu = time.perf_counter(), time.process_time()
    action()
    return time.perf_counter() - wall, time.process_time() - cpu


def _check_task_count(client: Client, project_id: int, expected: int) -> None:
    found = client.projects.get(id=project_id).task_number
    if found != expected:
        raise RuntimeError(f"project {project_id} holds {found} tasks, expected {expected}")


def measure_import(
    client: Client, episodes: list[Episode], *, batch_size: int, rounds: int = 1
) -> ImportFigures:
    payloads = [task_payload(episode) for episode in episodes]
    batches = [payloads[start : start + batch_size] for start in range(0, len(payloads), batch_size)]
    figures = ImportFigures(len(episodes), batch_size)
    for round_number in range(rounds):
        ours, plain = _fresh_project(client), _fresh_project(client)

        def run_importer() -> None:
            push_episodes(client, ours, episodes, batch_size=batch_size, progress=False)

        def run_baseline() -> None:
            for batch in batches:
                client.projects.import_tasks(id=plain, request=batch, return_task_ids=True)

        sides = [run_importer, run_baseline]
        for action in sides[:: -1 if round_number % 2 else 1]:
            wall, cpu = _timed(action)
            if action is run_importer:
                figures.importer_seconds.append(wall)
                figures.importer_cpu_seconds.append(cpu)
            else:
                figures.baseline_seconds.append(wall)
                figures.baseline_cpu_seconds.append(cpu)
        # A rerun finds every episode present and imports nothing: the cost of idempotence.
        figures.rerun_seconds.append(_timed(run_importer)[0])
        for project in (ours, plain):
            _check_task_count(client, project, len(episodes))
        for project in (ours, plain):
            client.projects.delete(id=project)
    return figures
