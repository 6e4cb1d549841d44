"""The stored provider's latency: the real backend process answering /predict in 100-task batches,
every task a full prediction; one unmeasured batch warms the server first.

Example:

    .venv/bin/python benchmarks/backend_bench.py --tasks 1000
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import click
import httpx

from sotopia_ls.config import labeling_config
from sotopia_ls.importer import load_episodes
from sotopia_ls.labelstudio import server
from sotopia_ls.labelstudio.tasks import EPISODE_ID, episode_meta, episode_to_task
from sotopia_ls.ml_backend.commands import backend_env, ensure_ml_environment
from sotopia_ls.samples import EPISODELOG


def fixture_task() -> dict[str, Any]:
    """The fixture as a task: its data, and its stored evaluation in the task's meta."""
    loaded = load_episodes([EPISODELOG])
    loaded.raise_on_problems()
    episode = loaded.episodes[0]
    return {"data": episode_to_task(episode), "meta": episode_meta(episode)}


def batch(task: dict[str, Any], start: int, size: int) -> list[dict[str, Any]]:
    return [{"id": n, "data": {**task["data"], EPISODE_ID: f"bench-{n}"}, "meta": task["meta"]}
            for n in range(start, start + size)]


def wait_for_health(url: str, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise click.ClickException(f"the backend exited with code {process.returncode}")
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            time.sleep(0.3)
    raise click.ClickException("the backend did not answer /health within 120 s")


def percentile(values: list[float], p: int) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[p - 1]


@click.command()
@click.option("--tasks", default=1000, show_default=True, help="Measured tasks in all.")
@click.option("--batch-size", default=100, show_default=True, help="Tasks per /predict request.")
@click.option(
    "--python", type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Python of the backend's environment; default: .venv-ml, made if missing.",
)
def main(tasks: int, batch_size: int, python: Path | None) -> None:
    """Time the stored provider over /predict and print p50/p95 latency per task."""
    interpreter = python or ensure_ml_environment()
    port = server.free_port()
    url = f"http://127.0.0.1:{port}"
    process = subprocess.Popen(
        [str(interpreter), "-m", "sotopia_ls.ml_backend._wsgi"],
        env={**backend_env("127.0.0.1", port, "stored", threads=4), "LOG_LEVEL": "WARNING"},
        stdin=subprocess.DEVNULL,
    )
    config, task = labeling_config(), fixture_task()
    batches = max(1, tasks // batch_size)
    seconds: list[float] = []
    try:
        wait_for_health(url, process)
        with httpx.Client(timeout=120) as client:
            for index in range(batches + 1):
                body = {"tasks": batch(task, index * batch_size, batch_size), "project": "1.1", "label_config": config}
                started = time.perf_counter()
                answer = client.post(f"{url}/predict", json=body)
                results = answer.raise_for_status().json()["results"]
                elapsed = time.perf_counter() - started
                if sum(len(r) for r in results) != batch_size:
                    raise click.ClickException("a task of the batch got no prediction")
                if index:  # the first batch only warms the server up
                    seconds.append(elapsed)
    finally:
        process.terminate()
        process.wait(timeout=20)
    per_task_ms = [s * 1000 / batch_size for s in seconds]
    click.echo(
        f"stored provider: {batches} batches of {batch_size} tasks, each task a 28-result prediction"
    )
    if len(seconds) > 1:
        click.echo(
            f"batch    p50 {percentile(seconds, 50) * 1000:.1f} ms   p95 {percentile(seconds, 95) * 1000:.1f} ms"
        )
        click.echo(
            f"per task p50 {percentile(per_task_ms, 50):.2f} ms, p95 {percentile(per_task_ms, 95):.2f} ms "
            f"({batches * batch_size / sum(seconds):,.0f} tasks/s)"
        )
    else:
        click.echo(f"per task {per_task_ms[0]:.2f} ms (one batch: no percentiles)")


if __name__ == "__main__":
    sys.exit(main())
