"""Export: a Label Studio JSON export file → every output format, in a process of its own.

The parent starts ``python -m benchmarks.exporting STAGE FILE OUT_DIR`` and reads one JSON line
back, so the peak RSS (``VmHWM``) is that of the export alone, plus the interpreter and its
imports, which the ``baseline`` stage measures. Stages:

- ``export``   ``sotopia_ls.exporter.export_file(FILE, OUT_DIR)``: validate, build the tables,
               write every output file;
- ``parse``    only stream the tasks out of the file, as the exporter reads them: the floor
               under ``export``;
- ``baseline`` import the exporter and stop: the memory that is not the export's.

The exporter's imports (pandas, pyarrow …) are timed apart, as ``import_seconds``.
"""

from __future__ import annotations

import cProfile
import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

STAGES = ("export", "parse", "baseline")


@dataclass(frozen=True)
class ExportFigures:
    stage: str
    annotations: int
    tasks: int
    seconds: float
    import_seconds: float
    peak_rss_mb: float
    outputs: int

    @property
    def per_second(self) -> float:
        return self.annotations / self.seconds if self.seconds else float("nan")


def measure(stage: str, path: Path, out_dir: Path, *, profile: Path | None = None) -> ExportFigures:
    """Run ``stage`` on ``path`` in a child process and return what it measured."""
    command = [sys.executable, "-m", "benchmarks.exporting", stage, str(path), str(out_dir)]
    if profile is not None:
        command.append(str(profile))
    run = subprocess.run(
        command, cwd=Path(__file__).resolve().parents[1], check=True, capture_output=True, text=True
    )
    return ExportFigures(**json.loads(run.stdout.strip().splitlines()[-1]))


def _export(path: Path, out_dir: Path) -> dict[str, Any]:
    from sotopia_ls.exporter import export_file

    out_dir.mkdir(parents=True, exist_ok=True)
    result = export_file(path, out_dir)
    tally = result.tally
    return {
        "annotations": tally.total,
        "tasks": tally.tasks,
        "outputs": sum(1 for _ in out_dir.iterdir() if _.is_file()),
    }


def _parse(path: Path, out_dir: Path) -> dict[str, Any]:
    from sotopia_ls.exporter.source import file_tasks

    tasks = annotations = 0
    for task in file_tasks(path):
        tasks += 1
        annotations += len(task.annotations)
    return {"annotations": annotations, "tasks": tasks, "outputs": 0}


def _baseline(path: Path, out_dir: Path) -> dict[str, Any]:
    return {"annotations": 0, "tasks": 0, "outputs": 0}


def _peak_rss_kib() -> int:
    """This process's own peak RSS. Not ``ru_maxrss``: Linux carries the parent's peak into a
    child across fork and exec, so a child of a large parent would report the parent's."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise RuntimeError("no VmHWM in /proc/self/status")


def _child(stage: str, path: Path, out_dir: Path, profile: Path | None) -> None:
    action = {"export": _export, "parse": _parse, "baseline": _baseline}[stage]
    profiler = cProfile.Profile() if profile else None
    start = time.perf_counter()
    import sotopia_ls.exporter  # noqa: F401  (the imports every stage pays; timed apart)

    imported = time.perf_counter()
    if profiler:
        counts = profiler.runcall(action, path, out_dir)
        profiler.dump_stats(profile)
    else:
        counts = action(path, out_dir)
    seconds = time.perf_counter() - imported
    peak_kib = _peak_rss_kib()
    figures = {"stage": stage, "seconds": seconds, "import_seconds": imported - start}
    print(json.dumps(figures | {"peak_rss_mb": peak_kib / 1024} | counts))


if __name__ == "__main__":
    stage, file, out = sys.argv[1:4]
    if stage not in STAGES:
        sys.exit(f"stage must be one of {', '.join(STAGES)}")
    _child(stage, Path(file), Path(out), Path(sys.argv[4]) if len(sys.argv) > 4 else None)
