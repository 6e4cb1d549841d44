"""Export: a Label Studio JSON export file → every output format, in a process of its own, so
its peak memory is the export's alone.

The parent starts ``python -m benchmarks.exporting STAGE FILE OUT_DIR`` (``export``,
``export-1``, ``parse`` or ``baseline``) and reads one JSON line back; docs/benchmarks.md,
"What is measured", says how memory is sampled.
"""

from __future__ import annotations

import cProfile
import json
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

STAGES = ("export", "export-1", "parse", "baseline")


@dataclass(frozen=True)
class ExportFigures:
    stage: str
    annotations: int
    tasks: int
    seconds: float
    import_seconds: float
    peak_rss_mb: float
    outputs: int
    workers: int = 0
    workers_peak_rss_mb: float = 0.0
    peak_pss_mb: float = 0.0
    calibration_seconds: float = 0.0

    @property
    def total_peak_rss_mb(self) -> float:
        """This process's peak plus each worker's: what the export holds at most."""
        return self.peak_rss_mb + self.workers_peak_rss_mb

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


def _export(path: Path, out_dir: Path, workers: int | None = None) -> dict[str, Any]:
    from sotopia_ls.exporter import Reading, export_file

    out_dir.mkdir(parents=True, exist_ok=True)
    result = export_file(path, out_dir, reading=Reading() if workers is None else Reading(workers))
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


def _status_kib(pid: int | str, field: str, file: str = "status") -> int:
    for line in Path(f"/proc/{pid}/{file}").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/{pid}/{file}")


def _peak_rss_kib() -> int:
    """This process's own peak RSS. Not ``ru_maxrss``: Linux carries the parent's peak into a
    child across fork and exec, so a child of a large parent would report the parent's."""
    return _status_kib("self", "VmHWM")


class _TreeSampler(threading.Thread):
    """Samples the export's worker processes (this process's children) every 200 ms."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.done = threading.Event()
        self.worker_peaks: dict[int, int] = {}
        self.peak_pss_kib = 0

    def _children(self) -> list[int]:
        pids = []
        for children in Path("/proc/self/task").glob("*/children"):
            pids += [int(pid) for pid in children.read_text().split()]
        return pids

    def run(self) -> None:
        while not self.done.wait(0.2):
            total = 0
            for pid in ["self", *self._children()]:
                try:
                    total += _status_kib(pid, "Pss", "smaps_rollup")
                    if pid != "self":
                        hwm = _status_kib(pid, "VmHWM")
                        self.worker_peaks[pid] = max(self.worker_peaks.get(pid, 0), hwm)
                except (OSError, RuntimeError):  # the worker just ended
                    continue
            self.peak_pss_kib = max(self.peak_pss_kib, total)


def calibration() -> float:
    """CPU seconds of a fixed pure-Python workload (dicts and strings, like the export's):
    how fast the shared host is right now. Run before each stage; lower is faster."""
    start = time.process_time()
    for number in range(30_000):
        {str(key): [key, f"{key}-{number}"] for key in range(20)}
    return time.process_time() - start


def _child(stage: str, path: Path, out_dir: Path, profile: Path | None) -> None:
    action = {"export": _export, "export-1": lambda p, o: _export(p, o, workers=1),
              "parse": _parse, "baseline": _baseline}[stage]
    profiler = cProfile.Profile() if profile else None
    start = time.perf_counter()
    import sotopia_ls.exporter  # noqa: F401  (the imports every stage pays; timed apart)

    imported = time.perf_counter()
    calibrated = calibration()
    begun = time.perf_counter()
    sampler = _TreeSampler()
    sampler.start()
    if profiler:
        counts = profiler.runcall(action, path, out_dir)
        profiler.dump_stats(profile)
    else:
        counts = action(path, out_dir)
    seconds = time.perf_counter() - begun
    sampler.done.set()
    sampler.join()
    peak_kib = _peak_rss_kib()
    figures = {"stage": stage, "seconds": seconds, "import_seconds": imported - start,
               "calibration_seconds": calibrated,
               "workers": len(sampler.worker_peaks),
               "workers_peak_rss_mb": sum(sampler.worker_peaks.values()) / 1024,
               "peak_pss_mb": max(sampler.peak_pss_kib, peak_kib) / 1024}
    print(json.dumps(figures | {"peak_rss_mb": peak_kib / 1024} | counts))


if __name__ == "__main__":
    stage, file, out = sys.argv[1:4]
    if stage not in STAGES:
        sys.exit(f"stage must be one of {', '.join(STAGES)}")
    _child(stage, Path(file), Path(out), Path(sys.argv[4]) if len(sys.argv) > 4 else None)
