"""A researcher hands the export to Sotopia: its own models load the records and its own
aggregation averages the annotators, on its local storage backend (no Redis)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from conftest import invoke, results_of, sotopia_python
from sotopia_ls.dimensions import AGENTS, DIMENSIONS
from sotopia_ls.exporter.commands import export_command
from sotopia_ls.samples import EPISODELOG

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "into_sotopia.py"


def test_sotopia_aggregates_the_exported_annotations_as_the_export_does(tmp_path):
    episode = json.loads(EPISODELOG.read_text(encoding="utf-8"))
    annotations = [
        {"id": k, "completed_by": k,
         "result": results_of({agent: {d.key: (f"rater {k}", d.range_low + k) for d in DIMENSIONS}
                               for agent in AGENTS})}
        for k in (1, 2)
    ]
    export_file = tmp_path / "export.json"
    export_file.write_text(json.dumps([{"id": 1, "data": {"episode_id": episode["pk"]},
                                        "annotations": annotations}]))
    assert invoke(export_command, "--from-file", str(export_file), "-o",
                  str(tmp_path / "results")).exit_code == 0

    done = subprocess.run(
        [str(sotopia_python()), str(EXAMPLE), str(tmp_path / "results"), str(EPISODELOG)],
        env={**os.environ, "SOTOPIA_STORAGE_BACKEND": "local", "HOME": str(tmp_path)},
        capture_output=True, text=True,
    )
    assert done.returncode == 0, done.stderr
    (aggregated,) = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    (ours,) = [json.loads(line) for line in (tmp_path / "results" / "episodes.jsonl").open()]
    assert aggregated["episode"] == ours["episode"] == episode["pk"]
    for theirs, mine in zip(aggregated["rewards"], ours["rewards"]):
        assert theirs[1] == mine[1] and abs(theirs[0] - mine[0]) < 1e-9
