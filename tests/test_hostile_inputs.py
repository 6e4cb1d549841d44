"""A careless or hostile user's inputs: one line saying what is wrong, a non-zero exit, and
nothing written.

Each case prepares its input in an empty folder, runs one command there, and checks the
exit code, that the message names the file, record or field, that no traceback reached the
user, and that the folder holds exactly what it held before (no output, no staging folder,
no half-written file). Annotation-level hostility in an export file is the other kind: the
export succeeds and each bad annotation lands in errors.jsonl with its field.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from click.testing import CliRunner

from conftest import results_of
from sotopia_ls.cli import main
from sotopia_ls.dimensions import AGENTS, DIMENSIONS
from sotopia_ls.samples import DUMP, EPISODELOG, HUMAN_EVAL, OTREE_EPISODES, SAMPLES

OTREE = next(OTREE_EPISODES.rglob("*.json"))
DEEP = "[" * 200_000
HUGE = "9" * 5001


def otree(**changes: Any) -> dict[str, Any]:
    return json.loads(OTREE.read_text(encoding="utf-8")) | changes


def dump(**changes: Any) -> dict[str, Any]:
    return json.loads(DUMP.read_text(encoding="utf-8")) | changes


def text(content: str, name: str = "input.json") -> Callable[[Path], list[str]]:
    def make(folder: Path) -> list[str]:
        (folder / name).write_text(content, encoding="utf-8")
        return [name]
    return make


def record(content: dict[str, Any] | list[Any], name: str = "input.json") -> Callable[[Path], list[str]]:
    return text(json.dumps(content), name)


def raw(content: bytes, name: str = "input.json") -> Callable[[Path], list[str]]:
    def make(folder: Path) -> list[str]:
        (folder / name).write_bytes(content)
        return [name]
    return make


def empty_folder(folder: Path) -> list[str]:
    (folder / "episodes").mkdir()
    return ["episodes"]


def fifo(name: str = "pipe.json") -> Callable[[Path], list[str]]:
    """A named pipe, made in the case's folder: nothing should ever open it."""
    def make(folder: Path) -> list[str]:
        os.mkfifo(folder / name)
        return [name]
    return make


def unix_socket(folder: Path) -> list[str]:
    """A special file that is neither a pipe nor a regular file: a Unix socket's name."""
    with socket.socket(socket.AF_UNIX) as listener:
        listener.bind("socket.json")  # relative: the case runs in its folder, and the name is short
    return ["socket.json"]


def in_the_way(make: Callable[[Path], list[str]]) -> Callable[[Path], list[str]]:
    """``make``'s file made where the command will write, not handed to it as an input."""
    def prepare(folder: Path) -> list[str]:
        make(folder)
        return []
    return prepare


# A folder name the file system refuses (ENAMETOOLONG): the system, not the command, says no,
# as it would under /proc, without pointing a command at a system path.
TOO_LONG = "x" * 300


def symlink_loop(folder: Path) -> list[str]:
    (folder / "episodes").mkdir()
    (folder / "episodes" / "good.json").write_text(OTREE.read_text(encoding="utf-8"))
    (folder / "episodes" / "loop.json").symlink_to("loop.json")
    return ["episodes"]


def csv_row(data: str) -> Callable[[Path], list[str]]:
    def make(folder: Path) -> list[str]:
        rows = pd.read_csv(next(HUMAN_EVAL.glob("*.csv"))).head(1).assign(data=data)
        rows.to_csv(folder / "ratings.csv", index=False)
        return ["ratings.csv"]
    return make


def two_files(first: dict[str, Any], second: dict[str, Any]) -> Callable[[Path], list[str]]:
    def make(folder: Path) -> list[str]:
        (folder / "a.json").write_text(json.dumps(first))
        (folder / "b.json").write_text(json.dumps(second))
        return ["a.json", "b.json"]
    return make


def a_file(folder: Path) -> list[str]:
    (folder / "occupied").write_text("not a folder")
    return []


@dataclass(frozen=True)
class Case:
    name: str
    prepare: Callable[[Path], list[str]]
    command: Callable[[list[str]], list[str]]
    message: str
    exit_code: int = 1


def dry_run(paths: list[str]) -> list[str]:
    return ["import", *paths, "--dry-run", "-o", "tasks.json"]


def export_to(out: str) -> Callable[[list[str]], list[str]]:
    return lambda paths: ["export", "--from-file", *paths, "-o", out]


def report_to(out: str) -> Callable[[list[str]], list[str]]:
    return lambda paths: ["report", "--from-file", *paths, "-o", out, "--bootstrap", "0"]


def with_fixture(*args: str) -> Callable[[list[str]], list[str]]:
    """A command on the EpisodeLog fixture, whatever was prepared (an output path, say)."""
    return lambda paths: [arg.replace("{sample}", str(EPISODELOG)) for arg in args]


VALID_TASKS = [{"id": 1, "data": {"episode_id": "e1"}, "annotations": [], "drafts": [],
                "predictions": []}]

IMPORT_CASES = [
    Case("deep JSON", text(DEEP), dry_run, "input.json: invalid JSON: nested too deeply"),
    Case("deep JSON line", text(DEEP, "input.jsonl"), dry_run,
         "input.jsonl [line 1]: invalid JSON: nested too deeply"),
    Case("a number of 5,001 digits", text('{"pk": "x", "rewards_prompt": ' + HUGE + "}"),
         dry_run, "input.json: invalid JSON: Exceeds the limit (4300 digits)"),
    Case("empty .json", text(""), dry_run, "input.json: invalid JSON at line 1, column 1"),
    Case("empty .jsonl", text("\n\n", "input.jsonl"), dry_run,
         "input.jsonl: empty: holds no record"),
    Case("empty .csv", text("", "input.csv"), dry_run, "input.csv [row 2]: cannot read the CSV"),
    Case("empty folder", empty_folder, dry_run, "episodes: holds no .json, .jsonl, .ndjson, .csv"),
    Case("a Unix socket", unix_socket, dry_run, "socket.json: not a regular file or folder"),
    Case("a named pipe", fifo(), dry_run, "pipe.json: not a regular file or folder"),
    Case("a symbolic link loop", symlink_loop, dry_run,
         "loop.json: a symbolic link that leads nowhere or in a loop"),
    Case("a list of numbers", record([1, 2]), dry_run, "[item 0]: expected a JSON object, got a number"),
    Case("a JSON string", record(["x"]), dry_run, "expected a JSON object, got a string"),
    Case("JSON null", text("null"), dry_run, "input.json: expected a JSON object, got null"),
    Case("a .txt file", text("hello", "notes.txt"), dry_run, "unsupported file type '.txt'"),
    Case("invalid UTF-8", raw(b'{"pk": "\xff\xfe"}'), dry_run, "input.json: cannot read the file"),
    Case("truncated JSON", text('{"pk": "x", "rewards_prompt": "Scenario'), dry_run,
         "the text ends too early: truncated?"),
    Case("unknown keys", record({"hello": 1}), dry_run, "cannot tell the format from its keys"),
    Case("a stored score written as text", record(dump(rewards=[[1.0, {"goal": "7"}],
                                                                  [1.0, {"goal": 7}]])),
         dry_run, "rewards"),
    Case("a stored score that is true", record(dump(rewards=[[1.0, {"goal": True}],
                                                              [1.0, {"goal": 7}]])),
         dry_run, "rewards"),
    Case("a stored score of 1e400", text(json.dumps(dump()).replace('"goal": 8.0', '"goal": 1e400')),
         dry_run, "rewards"),
    Case("a stored score out of range", record(dump(rewards=[[1.0, {"goal": 11.0}],
                                                              [1.0, {"goal": 7.0}]])),
         dry_run, "agent 1: goal score 11 is outside 0 to 10"),
    Case("three agents", record(dump(agents_background={"A": "a", "B": "b", "C": "c"})),
         dry_run, "agents_background: 3 agent(s)"),
    Case("goals of other people", record(dump(social_goals={"X": "x", "Y": "y"})), dry_run,
         "social_goals: names X, Y differ"),
    Case("messages that are no list", record({"pk": "x", "messages": "hi", "agents": []}),
         dry_run, "messages"),
    Case("no participants", record(otree(rewards_prompt="Scenario: nothing\nTurn #1\nA said: hi")),
         dry_run, "rewards_prompt: missing participants"),
    Case("one participant", record(otree(rewards_prompt=re.sub(
        r"Participants: .*", "Participants: Sophia James", otree()["rewards_prompt"], count=1))),
        dry_run, "rewards_prompt: only one participant (Sophia James)"),
    Case("an empty episode id", record(otree(pk="")), dry_run, "pk"),
    Case("a CSV data cell nested too deeply", csv_row(DEEP), dry_run,
         "ratings.csv [row 2, id"),
    Case("a CSV data cell that is not JSON", csv_row("{oops"), dry_run, "data: not valid JSON"),
    Case("one id, two contents", two_files(otree(), otree(rewards_prompt=otree()[
        "rewards_prompt"].replace("Scenario:", "Scenario: changed", 1))), dry_run,
         "conflict: episode"),
    Case("an unknown --format", text("{}"), lambda p: [*dry_run(p), "--format", "yaml"],
         "Invalid value for '--format'", exit_code=2),
    Case("output under a file", a_file,
         with_fixture("import", "{sample}", "--dry-run", "-o", "occupied/tasks.json"),
         "occupied is a file, not a folder"),
    Case("output onto a named pipe", in_the_way(fifo()),
         with_fixture("import", "{sample}", "--dry-run", "-o", "pipe.json"),
         "pipe.json is not a regular file"),
    Case("output under a name too long", lambda folder: [],
         with_fixture("import", "{sample}", "--dry-run", "-o", f"{TOO_LONG}/tasks.json"),
         "File name too long"),
    Case("rejects under a file", lambda folder: a_file(folder) + text("{}")(folder),
         lambda p: ["import", str(EPISODELOG), *p, "--skip-invalid", "--rejects",
                    "occupied/rejects.jsonl", "--dry-run", "-o", "tasks.json"],
         "occupied is a file, not a folder"),
]

EXPORT_CASES = [
    Case("deep nesting", text(DEEP), export_to("out"), "input.json: not a Label Studio JSON export"),
    Case("not JSON", text("hello"), export_to("out"), "input.json: not a Label Studio JSON export"),
    Case("an object, not a list", record({"id": 1}), export_to("out"), "expected a list of tasks"),
    Case("an empty file", text(""), export_to("out"), "the input is empty"),
    Case("annotations that are no list", record([VALID_TASKS[0] | {"annotations": {}}]),
         export_to("out"), "annotations is not a list"),
    Case("data that is no object", record([VALID_TASKS[0] | {"data": []}]), export_to("out"),
         "data is not an object"),
    Case("an annotation that is no object", record([VALID_TASKS[0] | {"annotations": [7]}]),
         export_to("out"), "not an annotation object"),
    Case("a comma after the last task", text(json.dumps(VALID_TASKS)[:-1] + ",]"),
         export_to("out"), "a comma after the last task"),
    Case("tasks without a comma", text("[" + json.dumps(VALID_TASKS[0]) * 2 + "]"),
         export_to("out"), "input.json: not a Label Studio JSON export: invalid JSON"),
    Case("output under a file", lambda folder: a_file(folder) + record(VALID_TASKS)(folder),
         export_to("occupied/out"), "occupied is a file, not a folder"),
    Case("output onto a named pipe",
         lambda folder: record(VALID_TASKS)(folder) + in_the_way(fifo("pipe"))(folder),
         export_to("pipe"), "pipe is a file, not a folder"),
    Case("output under a name too long", record(VALID_TASKS), export_to(f"{TOO_LONG}/out"),
         "File name too long"),
    Case("output into a folder of someone else's files",
         lambda folder: record(VALID_TASKS)(folder) + text("mine", "notes.md")(folder),
         lambda p: export_to(".")(p[:1]),
         "holds files this command does not write (input.json, notes.md)"),
    Case("--overlap of 0", record(VALID_TASKS), lambda p: [*export_to("out")(p), "--overlap", "0"],
         "Invalid value for '--overlap'", exit_code=2),
]


def an_export(folder: Path) -> list[str]:
    (folder / "export").mkdir()
    for name in ("summary.json", "audit.jsonl", "scores_long.parquet", "model_scores.csv"):
        (folder / "export" / name).write_text("")
    return []


REPORT_CASES = [
    Case("deep nesting", text(DEEP), report_to("report"), "input.json: not a Label Studio JSON"),
    Case("a reference that is not Parquet",
         lambda folder: record(VALID_TASKS)(folder) + text("nope", "gold.parquet")(folder),
         lambda p: [*report_to("report")(p[:1]), "--reference", "gold.parquet"],
         "gold.parquet: cannot read it as a table"),
    Case("a reference without scores",
         lambda folder: record(VALID_TASKS)(folder) + text("a,b\n1,2\n", "gold.csv")(folder),
         lambda p: [*report_to("report")(p[:1]), "--reference", "gold.csv"],
         "gold.csv: not a scores_long table (no agent, dimension, episode_id, score)"),
    Case("a folder that is no export", empty_folder,
         lambda p: ["report", "--from-export", "episodes", "-o", "report"],
         "episodes: no summary.json: not a sotopia-ls export folder"),
    Case("an export folder with broken files", an_export,
         lambda p: ["report", "--from-export", "export", "-o", "report"],
         "summary.json: cannot read it"),
    Case("output under a file", lambda folder: a_file(folder) + record(VALID_TASKS)(folder),
         report_to("occupied/report"), "occupied is a file, not a folder"),
]


def corrupt_login(folder: Path) -> list[str]:
    (folder / "var" / "label-studio").mkdir(parents=True)
    (folder / "var" / "label-studio" / "credentials.json").write_text("{broken")
    return []


OTHER_CASES = [
    Case("a corrupt demo login", corrupt_login, lambda p: ["up", "--no-serve", "--port", "1"],
         "credentials.json is not a login file"),
    Case("a demo data folder under a file", a_file,
         lambda p: ["up", "--no-serve", "--data-dir", "occupied/ls", "--port", "1"],
         "Not a directory"),
    Case("config output under a file", a_file,
         lambda p: ["config", "-o", "occupied/config.xml"], "occupied is a file, not a folder"),
    Case("config output onto a named pipe", in_the_way(fifo()),
         lambda p: ["config", "-o", "pipe.json"], "pipe.json is not a regular file"),
    Case("samples into someone else's folder", lambda folder: text("mine", "notes.md")(folder),
         lambda p: ["samples", "."], "holds files this command does not write (notes.md)"),
    Case("samples under a name too long", lambda folder: [],
         lambda p: ["samples", f"{TOO_LONG}/samples"], "File name too long"),
]

CASES = [
    *(pytest.param(case, id=f"import: {case.name}") for case in IMPORT_CASES),
    *(pytest.param(case, id=f"export: {case.name}") for case in EXPORT_CASES),
    *(pytest.param(case, id=f"report: {case.name}") for case in REPORT_CASES),
    *(pytest.param(case, id=case.name) for case in OTHER_CASES),
]


def listing(folder: Path) -> dict[str, tuple[int, int]]:
    return {str(path.relative_to(folder)): (path.lstat().st_size, path.lstat().st_mtime_ns)
            for path in folder.rglob("*")}


@pytest.mark.parametrize("case", CASES)
def test_a_bad_input_is_one_line_a_non_zero_exit_and_nothing_written(
    case: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    paths = case.prepare(tmp_path)
    before = listing(tmp_path)
    result = CliRunner().invoke(main, case.command(paths),
                                env={"LABEL_STUDIO_URL": "", "LABEL_STUDIO_API_KEY": ""})
    assert result.exit_code == case.exit_code, result.output
    assert isinstance(result.exception, SystemExit), result.exception
    assert case.message in result.output, result.output
    assert "Traceback" not in result.output
    assert listing(tmp_path) == before


@pytest.mark.parametrize("case", CASES)
def test_a_case_points_its_command_at_its_own_folder_and_the_shipped_samples_only(
    case: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Hostile to the command, harmless to the machine: no system path (a device, /proc) is
    read or written; the pipes, sockets and files in the way are made in the case's folder."""
    monkeypatch.chdir(tmp_path)
    for argument in case.command(case.prepare(tmp_path)):
        where = (tmp_path / argument).resolve()  # an absolute argument stays as it is
        assert where.is_relative_to(tmp_path.resolve()) or where.is_relative_to(SAMPLES), argument


@dataclass(frozen=True)
class Hostile:
    """An annotation made hostile: fields of its own changed, or one control's value
    replaced by ``value`` (written into the JSON text as it stands)."""

    field: str
    reason: str
    changes: dict[str, Any] | None = None
    value: str = ""


ANNOTATION_CASES = {
    "completed_by as text": Hostile("completed_by", "not a user: 'alice'", {"completed_by": "alice"}),
    "completed_by as a list": Hostile("completed_by", "not a user: [1]", {"completed_by": [1]}),
    "an annotation id as text": Hostile("id", "not an annotation id: 'a1'", {"id": "a1"}),
    "ground_truth as text": Hostile("ground_truth", "not true or false: 'false'",
                                    {"ground_truth": "false"}),
    "was_cancelled as text": Hostile("was_cancelled", "not true or false: 'yes'",
                                     {"was_cancelled": "yes"}),
    "a result that is no list": Hostile("believability_1", "missing rating", {"result": {"x": 1}}),
    "a rating of 1e400": Hostile("believability_1", "not an integer: inf",
                                 value='{"number": 1e400}'),
    "a rating of 5,001 digits": Hostile("believability_1", "not an integer: '999",
                                        value='{"number": ' + HUGE + "}"),
    "a rating of 5,001 digit characters": Hostile("believability_1", "not an integer",
                                                  value='{"choices": ["' + HUGE + '"]}'),
    "two choices": Hostile("believability_1", "expected exactly one choice",
                           value='{"choices": ["1", "2"]}'),
    "a rationale of numbers": Hostile("believability_reasoning_1", "no rationale text",
                                      value='{"text": [1, 2]}'),
    "a value that is no object": Hostile("believability_1", "no rating value", value='"8"'),
}
PLACEHOLDER = "HOSTILE-VALUE"


def good_results() -> list[dict[str, Any]]:
    return results_of({agent: {d.key: ("why", d.range_low) for d in DIMENSIONS}
                       for agent in AGENTS})


@pytest.mark.parametrize("name", ANNOTATION_CASES)
def test_a_hostile_annotation_is_refused_naming_its_field_and_the_rest_exported(
    name: str, tmp_path: Path
) -> None:
    case = ANNOTATION_CASES[name]
    hostile: dict[str, Any] = {"id": 2, "completed_by": 2, "result": good_results()}
    hostile |= case.changes or {}
    if case.value:
        hostile["result"] = [r | {"value": PLACEHOLDER} if r["from_name"] == case.field else r
                             for r in good_results()]
    good = {"id": 1, "completed_by": 1, "result": good_results()}
    task = {"id": 1, "data": {"episode_id": "e1"}, "annotations": [good, hostile]}
    path = tmp_path / "export.json"
    path.write_text(f"[{json.dumps(task)}]".replace(f'"{PLACEHOLDER}"', case.value))
    result = CliRunner().invoke(main, ["export", "--from-file", str(path), "-o",
                                       str(tmp_path / "out")], env={"LABEL_STUDIO_URL": ""})
    assert result.exit_code == 0, result.output
    errors = [json.loads(line) for line in (tmp_path / "out" / "errors.jsonl").open()]
    assert errors[0]["field"] == case.field and case.reason in errors[0]["reason"], errors
    assert "2 annotations = 1 exported + 1 rejected" in result.output


def test_a_byte_order_mark_is_read_like_any_export(tmp_path: Path) -> None:
    path = tmp_path / "export.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(VALID_TASKS).encode())
    result = CliRunner().invoke(main, ["export", "--from-file", str(path), "-o",
                                       str(tmp_path / "out")], env={"LABEL_STUDIO_URL": ""})
    assert result.exit_code == 0, result.output
    assert "read 1 task(s)" in result.output


@pytest.mark.report
def test_a_dollar_sign_in_a_name_is_drawn_as_text(tmp_path: Path) -> None:
    """Matplotlib would read ``$x^2$`` in an annotator's name as a formula and fail."""
    annotations = [{"id": k, "completed_by": {"id": k, "email": f"$x^{k}$@lab.test"},
                    "result": good_results()} for k in (1, 2)]
    path = tmp_path / "export.json"
    path.write_text(json.dumps([{"id": 1, "data": {"episode_id": "e1"},
                                 "annotations": annotations}]))
    result = CliRunner().invoke(main, ["report", "--from-file", str(path), "-o",
                                       str(tmp_path / "report"), "--keep-identities",
                                       "--bootstrap", "0"], env={"LABEL_STUDIO_URL": ""})
    assert result.exit_code == 0, result.output
    assert "$x^1$@lab.test" in (tmp_path / "report" / "report.html").read_text()


@pytest.mark.parametrize(
    ("rubric", "message"),
    [
        (None, "cannot read it"),
        ('{"dimensions": [{"key": "goal", "label": "Goal", "range_low": 5, "range_high": 1, '
         '"guidance": "g"}], "worked_example": {"agents": []}}',
         "range_low must be below range_high"),
        ('{"dimensions": [], "worked_example": {"agents": []}}', "dimensions"),
    ],
)
def test_a_bad_rubric_file_is_one_line(tmp_path: Path, rubric: str | None, message: str) -> None:
    path = tmp_path / "rubric.json"
    if rubric is not None:
        path.write_text(rubric)
    done = subprocess.run([sys.executable, "-m", "sotopia_ls", "config", "-o", "x.xml"],
                          cwd=tmp_path, capture_output=True, text=True,
                          env={**os.environ, "SOTOPIA_LS_RUBRIC": str(path)})
    assert done.returncode == 1 and message in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "x.xml").exists()


# A full disk, made without one: the command runs with a file size limit (RLIMIT_FSIZE), so its
# writes past LIMIT bytes fail (EFBIG, "File too large") as they would fail with ENOSPC. The
# limit is set in a new interpreter, never in the one running the tests.
LIMIT = 1000
LIMITED = ("import resource, signal, sys\n"
           "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # fail the write, do not kill\n"
           f"resource.setrlimit(resource.RLIMIT_FSIZE, ({LIMIT}, {LIMIT}))\n"
           "sys.argv[0] = 'sotopia-ls'\n"
           "from sotopia_ls.__main__ import run\n"
           "run()\n")
FULL_DISK = {
    "import": (["import", str(EPISODELOG), "--dry-run", "-o", "tasks.json"], "tasks.json: "),
    "config": (["config", "-o", "labeling_config.xml"], "labeling_config.xml: "),
    "export": (["export", "--from-file", "export.json", "-o", "out"], ""),
    "report": (["report", "--from-file", "export.json", "-o", "report", "--bootstrap", "0"], ""),
    "samples": (["samples", "samples"], "cannot copy: "),
}


@pytest.mark.parametrize("command", [
    pytest.param(name, marks=pytest.mark.report) if name == "report" else name for name in FULL_DISK])
def test_a_write_the_disk_refuses_midway_is_one_line_and_leaves_nothing(
    command: str, tmp_path: Path
) -> None:
    args, names = FULL_DISK[command]
    (tmp_path / "export.json").write_text(json.dumps(VALID_TASKS))
    before = listing(tmp_path)
    done = subprocess.run(
        [sys.executable, "-c", LIMITED, *args], cwd=tmp_path, capture_output=True, text=True,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "LABEL_STUDIO_URL": ""},
        timeout=300,
    )
    error = done.stderr.splitlines()[-1]
    assert done.returncode == 1 and error.startswith("Error: "), done.stderr
    assert names in error and "File too large" in error, error
    assert "Traceback" not in done.stderr and len(error) < 500, error
    assert listing(tmp_path) == before
