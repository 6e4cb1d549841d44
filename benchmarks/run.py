"""One command, one table: import, export, live export, pre-annotation and the study gateway.

Example:

    .venv/bin/python -m benchmarks.run --quick               # small sizes, a few minutes
    .venv/bin/python -m benchmarks.run --only study --study-paced --study-gateways 2

See docs/benchmarks.md for every run, the recorded figures and what dominates each.
"""

from __future__ import annotations

import os
import platform
import re
import statistics
import subprocess
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path

import click
import pandas as pd

from . import exporting, importing, live_export, load, screen, servers, study_burst
from .study_pace import Pace

REPO = Path(__file__).resolve().parents[1]
WORK = REPO / "var" / "benchmarks"
BACKEND_BENCH = Path(__file__).with_name("backend_bench.py")
PARTS = ("import", "export", "live-export", "backend", "study", "screen")
COLUMNS = ("benchmark", "size", "seconds", "rate", "figures", "target", "met", "peak RSS MB")

IMPORT_TARGET = 1.05
EXPORT_SECONDS_TARGET = 10.0
EXPORT_MEMORY_TARGET_MB = 1536.0


def machine() -> str:
    cpu = next(
        (line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
         if line.startswith("model name")),
        platform.processor() or "unknown CPU",
    )
    memory_kib = int(Path("/proc/meminfo").read_text().split()[1])
    return (
        f"{cpu}, {os.cpu_count()} cores, {memory_kib / 2**20:.0f} GiB; "
        f"Python {platform.python_version()}, label-studio {version('label-studio')}, "
        f"label-studio-sdk {version('label-studio-sdk')}"
    )


def seconds(value: float) -> str:
    return f"{value:,.2f}"


def import_rows(episodes: int, batch_size: int, rounds: int, database: str) -> list[dict]:
    seeds = load.seed_episodes()
    work = load.episodes(seeds, episodes)
    click.echo(f"import: {len(work):,} episodes made from {len(seeds)} sample ones; "
               f"starting Label Studio on {database}", err=True)
    with servers.label_studio(database) as running:
        figures = importing.measure_import(running.client, work, batch_size=batch_size, rounds=rounds)
    size = f"{episodes:,} episodes, batches of {batch_size}, {database}, best of {rounds}"
    ours, plain = min(figures.importer_seconds), min(figures.baseline_seconds)
    cpu, plain_cpu = min(figures.importer_cpu_seconds), min(figures.baseline_cpu_seconds)
    rerun = min(figures.rerun_seconds)
    return [
        {
            "benchmark": "import: importer (push_episodes)",
            "size": size,
            "seconds": seconds(ours),
            "rate": f"{episodes / ours:,.0f} tasks/s",
            "figures": f"{figures.ratio:.3f}x the plain SDK, best rounds "
                       f"(median of per-round ratios {figures.median_ratio:.3f}x)",
            "target": f"<= {IMPORT_TARGET}x",
            "met": figures.ratio <= IMPORT_TARGET,
        },
        {
            "benchmark": "import: plain SDK import_tasks per batch",
            "size": size,
            "seconds": seconds(plain),
            "rate": f"{episodes / plain:,.0f} tasks/s",
        },
        {
            "benchmark": "import: client CPU, importer / plain SDK",
            "size": size,
            "seconds": f"{seconds(cpu)} / {seconds(plain_cpu)}",
            "figures": f"{cpu / ours:.1%} / {plain_cpu / plain:.1%} of wall time",
        },
        {
            "benchmark": "import: rerun, every episode present",
            "size": size,
            "seconds": seconds(rerun),
            "rate": f"{episodes / rerun:,.0f} tasks/s",
        },
    ]


def export_rows(annotations: int, annotators: int, rounds: int, profile: Path | None) -> list[dict]:
    path = WORK / f"export-{annotations}x{annotators}.json"
    click.echo(f"export: writing or reusing {path.relative_to(REPO)}", err=True)
    load.write_export_file(path, annotations=annotations, annotators=annotators)
    size_mb = path.stat().st_size / 2**20
    rows = []
    for stage in exporting.STAGES:
        profile_path = profile / f"export-{stage}.prof" if profile else None
        # This machine's speed drifts by up to 1.6x between minutes (other work shares the
        # host), so each stage runs `rounds` times: best and median, and the best run's figures.
        runs = sorted((exporting.measure(stage, path, WORK / "export-out", profile=profile_path)
                       for _ in range(rounds)), key=lambda f: f.seconds)
        figures = runs[0]
        median = statistics.median(f.seconds for f in runs)
        row = {
            "benchmark": f"export: {stage}",
            "size": f"{figures.annotations:,} annotations, {figures.tasks:,} tasks, {size_mb:,.0f} MB",
            "seconds": f"{seconds(figures.seconds)} (median {seconds(median)}, {rounds} runs)",
            "peak RSS MB": f"{max(f.total_peak_rss_mb for f in runs):,.0f}",
        }
        if stage in ("export", "export-1"):
            row |= {
                "benchmark": f"export: {figures.workers or 1} process(es)",
                "rate": f"{figures.per_second:,.0f} annotations/s",
                "figures": f"{figures.outputs} files; peak RSS {figures.peak_rss_mb:,.0f} MB "
                           f"parent + {figures.workers_peak_rss_mb:,.0f} MB workers; "
                           f"peak PSS {figures.peak_pss_mb:,.0f} MB; host calibration "
                           + "/".join(f"{f.calibration_seconds:.2f}" for f in runs) + " s",
                "target": f"<= {EXPORT_SECONDS_TARGET:.0f} s, <= {EXPORT_MEMORY_TARGET_MB:.0f} MB",
                # Memory is judged on PSS: the RSS sum counts each page the parent and its
                # workers share (the fork's, and the shared-memory slots) once per process.
                "met": f"best {'yes' if figures.seconds <= EXPORT_SECONDS_TARGET else 'NO'}, "
                       f"median {'yes' if median <= EXPORT_SECONDS_TARGET else 'NO'}; memory "
                       f"{'yes' if max(f.peak_pss_mb for f in runs) <= EXPORT_MEMORY_TARGET_MB else 'NO'}",
            }
        elif stage == "parse":
            row |= {
                "benchmark": "export: cut and decode only, 1 process",
                "rate": f"{figures.per_second:,.0f} annotations/s",
                "figures": f"{size_mb / figures.seconds:,.0f} MB/s",
            }
        else:
            row |= {
                "benchmark": "export: interpreter + imports",
                "size": "",
                "seconds": seconds(figures.import_seconds),
                "figures": "not included above",
            }
        rows.append(row)
    return rows


def live_export_rows(tasks: int, annotators: int, database: str) -> list[dict]:
    click.echo(f"live export: a project of {tasks:,} tasks x {annotators} annotations; "
               f"starting Label Studio on {database}", err=True)
    # A server of its own: Python keeps freed memory, so a server that had run the import
    # benchmark would absorb the export's growth unseen.
    with servers.label_studio(database) as running:
        measured = live_export.measure_live_export(
            running.client, running.pid, tasks=tasks, annotators=annotators
        )
    return [
        {
            "benchmark": f"live export: {figures.method}",
            "size": f"{figures.annotations:,} annotations, {figures.tasks:,} tasks, {database}",
            "seconds": seconds(figures.seconds),
            "rate": f"{figures.annotations / figures.seconds:,.0f} annotations/s",
            "figures": f"server RSS +{figures.growth_mb:,.0f} MB "
                       f"(peak {figures.server_rss_peak_mb:,.0f} MB)",
        }
        for figures in measured
    ]


def backend_rows(tasks: int) -> list[dict]:
    """The ml-backend helper's benchmark (``benchmarks/backend_bench.py``), summarized."""
    name = "backend: stored provider, /predict"
    if not BACKEND_BENCH.exists():
        return [{"benchmark": name, "size": "benchmarks/backend_bench.py is missing"}]
    click.echo(f"backend: {BACKEND_BENCH.name} --tasks {tasks}", err=True)
    run = subprocess.run(
        [sys.executable, str(BACKEND_BENCH), "--tasks", str(tasks)],
        cwd=REPO, check=True, capture_output=True, text=True,
    )
    summary = re.search(r"p50 ([\d.]+) ms, p95 ([\d.]+) ms \(([\d,]+) tasks/s\)", run.stdout)
    if summary is None:
        return [{"benchmark": name, "size": run.stdout.strip().splitlines()[-1]}]
    p50, p95, per_second = summary.groups()
    return [{
        "benchmark": name,
        "size": f"{tasks:,} tasks in batches of 100",
        "rate": f"{per_second} tasks/s",
        "figures": f"per task p50 {p50} ms, p95 {p95} ms",
    }]


@click.command()
@click.option("--episodes", default=10_000, show_default=True, help="Episodes to import.")
@click.option("--annotations", default=100_000, show_default=True, help="Annotations to export.")
@click.option("--annotators", default=2, show_default=True, help="Annotations per task (export, live export).")
@click.option("--batch-size", default=500, show_default=True, help="Tasks per import request (both sides).")
@click.option("--rounds", default=3, show_default=True,
              help="Import rounds (the order alternates), runs of each export stage, and "
              "participants of the screen benchmark.")
@click.option("--live-tasks", default=5_000, show_default=True,
              help="Tasks in the project of the live-export benchmark.")
@click.option("--backend-tasks", default=1000, show_default=True, help="Tasks for the backend benchmark.")
@click.option("--database", type=click.Choice(servers.migrated.DATABASES), default="sqlite", show_default=True,
              help="Label Studio's database for the import and live-export benchmarks.")
@click.option("--study-participants", type=click.IntRange(min=1),
              help="Participants of the study gateway's burst or paced scenario  [default: 200 "
              "for the burst, 1,000 paced; --quick: 10]")
@click.option("--study-window", type=click.FloatRange(min=0, min_open=True),
              help="Seconds the participants arrive within, at people's pace  [default: 60 for "
              "the burst, 300 paced]")
@click.option("--study-paced", is_flag=True,
              help="The paced scenario instead of the burst: each participant spends the "
              "minutes a person would on the instructions and each episode, a few leave in "
              "the middle (abandon, reload, come back later), see docs/benchmarks.md.")
@click.option("--study-pace-scale", type=click.FloatRange(min=0, min_open=True),
              help="Multiply every time of the paced scenario by this (the arrival window and "
              "the study's lease too), e.g. 0.05 for a quick check  [default: 1, people's pace; "
              "--quick: 0.01]")
@click.option("--study-gateways", default=1, show_default=True,
              help="Gateway processes sharing the burst (and one PostgreSQL database).")
@click.option("--study-gold-share", default=0.0, show_default=True,
              type=click.FloatRange(0, 0.5),
              help="Share of each participant's episodes that are hidden gold in the burst.")
@click.option("--study-adaptive", is_flag=True,
              help="The burst's study adds an extra rater to each episode whose ratings disagree.")
@click.option("--study-dashboard", is_flag=True,
              help="The researcher dashboard open during the burst (its figures read every 3 s).")
@click.option("--only", type=click.Choice(PARTS), multiple=True, help="Run only these parts (repeatable).")
@click.option("--quick", is_flag=True,
              help="Small sizes: 100 episodes in batches of 50, 2,500 annotations, 50 live tasks, "
              "200 backend tasks, 10 study participants (the burst's within 3 s; paced: every "
              "time x 0.01), 2 screen episodes (the viewport used read on a 40 px grid), 1 round.")
@click.option("--profile", type=click.Path(file_okay=False, path_type=Path),
              help="Write cProfile stats of each export stage into this folder.")
def main(
    episodes: int, annotations: int, annotators: int, batch_size: int, rounds: int,
    live_tasks: int, backend_tasks: int, study_participants: int | None,
    study_window: float | None, study_paced: bool, study_pace_scale: float | None,
    study_gateways: int, study_gold_share: float, study_adaptive: bool, study_dashboard: bool,
    database: str, only: tuple[str, ...], quick: bool, profile: Path | None,
) -> None:
    """Measure import, export, live export, the stored backend, the study gateway's burst and
    its rating screen; print one table."""
    screen_episodes, screen_grid = 3, screen.GRID_PX
    if quick:
        # Each part's every code path at the least work: the import in two batches, the
        # export file in two 16 MB regions (one a worker), the screen's Start and Submit.
        episodes, batch_size, annotations, live_tasks, backend_tasks, rounds = (
            100, 50, 2_500, 50, 200, 1)
        screen_episodes, screen_grid = 2, screen.QUICK_GRID_PX
        # Ten participants still draw one of each kind of leaving, and one recruited after
        # the abandoned lease expires.
        study_participants = study_participants or 10
        study_pace_scale = study_pace_scale or 0.01
        # The burst's 10 arrive at the full burst's rate (200 within 60 s), not over a minute.
        study_window = study_window or (None if study_paced else 3.0)
    if profile:
        profile.mkdir(parents=True, exist_ok=True)
    parts = only or PARTS
    rows: list[dict] = []

    def run_part(part: str, measure: Callable[[], list[dict]]) -> None:
        """Add the part's rows; a part that fails becomes a row saying why, and the rest runs."""
        try:
            measured = measure()
        except Exception as exc:  # noqa: BLE001  (one broken part must not hide the others)
            measured = [{"benchmark": f"{part}: FAILED", "size": f"{type(exc).__name__}: {exc}"[:200]}]
        for row in measured:
            click.echo(f"  {row}", err=True)
        rows.extend(measured)

    if "import" in parts:
        run_part("import", lambda: import_rows(episodes, batch_size, rounds, database))
    if "live-export" in parts:
        run_part("live-export", lambda: live_export_rows(live_tasks, annotators, database))
    if "export" in parts:
        run_part("export", lambda: export_rows(annotations, annotators, rounds, profile))
    if "backend" in parts:
        run_part("backend", lambda: backend_rows(backend_tasks))
    if "study" in parts:
        run_part("study", lambda: study_burst.rows(
            study_burst.measure_burst(
                study_participants or (1000 if study_paced else 200),
                window=study_window or (300.0 if study_paced else 60.0),
                gateways=study_gateways, gold_share=study_gold_share, adaptive=study_adaptive,
                dashboard=study_dashboard,
                pace=Pace(study_pace_scale or 1.0) if study_paced else None)))
    if "screen" in parts:
        run_part("screen", lambda: screen.rows(screen.measure_screen(rounds, screen_episodes, screen_grid)))
    table = pd.DataFrame(rows, columns=list(COLUMNS)).astype(object).fillna("")
    table["met"] = table["met"].map(lambda met: {True: "yes", False: "NO"}.get(met, met))
    click.echo(f"\n{datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {machine()}")
    with pd.option_context("display.width", 250, "display.max_colwidth", 80):
        click.echo(table.to_string(index=False))
    failed = [row["benchmark"] for row in rows if row["benchmark"].endswith(": FAILED")]
    if failed:
        raise click.ClickException(f"{len(failed)} part(s) failed: {', '.join(failed)}")


if __name__ == "__main__":
    main()
