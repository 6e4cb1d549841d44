"""A researcher follows the README's path from oTree episode files to a human-vs-model figure,
each agent model's scores, which judge can replace a person, and how many people to pay for.

The README's block is run line by line as written. Three things stand in for what a test cannot
have: the session's Label Studio for the demo's (tests/test_demo.py runs the demo itself), a
local chat-completions server for both judges (the only remote service), and, where the block
says to annotate, the three annotators it made an account for rating through Label Studio's API
with their own login.
"""

from __future__ import annotations

import html
import json
import os
import re
import shlex
import subprocess
from pathlib import Path

import httpx
import pandas as pd
import pytest
from click.testing import CliRunner

from chat_stub import chat_stub
from conftest import results_of, sotopia_python, task_ids
from sotopia_ls.cli import main
from sotopia_ls.dimensions import AGENTS, DIMENSIONS
from sotopia_ls.report.plots import MODEL_CHART_ALT
from sotopia_ls.statistics.comparison import PANELS

REPO = Path(__file__).resolve().parents[1]
SECTION = "## A study from oTree files to a human-vs-model figure"
RATED = 15  # episodes every annotator rates: 30 units, the alternative annotator test's least


def readme_block() -> list[str]:
    """The section's shell lines, comments and blank lines dropped, in order."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = text.split(SECTION, 1)[1]
    block = re.search(r"```bash\n(.*?)```", section, flags=re.S).group(1)
    return [line for line in block.splitlines() if line.strip()]


def command(line: str) -> list[str]:
    return shlex.split(line, comments=True)


def ratings(offset: int) -> dict[int, dict[str, tuple[str, int]]]:
    """Ratings that vary over episodes and dimensions, inside every range."""
    return {agent: {d.key: (f"rationale {offset}", d.range_low + (offset * (i + agent)) % 7)
                    for i, d in enumerate(DIMENSIONS)} for agent in AGENTS}


@pytest.mark.server
def test_the_readme_path_from_otree_files_to_a_human_vs_model_table(
    label_studio, ls_client, project_title, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    lines = readme_block()
    imported = shlex.split(next(line for line in lines if " import " in line))
    title = imported[imported.index("--title") + 1]
    env = {"LABEL_STUDIO_URL": label_studio.url,
           "LABEL_STUDIO_API_KEY": label_studio.credentials.api_key}
    judges: list[str] = []
    raters: list[str] = []
    ran: list[str] = []
    printed: dict[str, str] = {}
    with chat_stub() as stub:
        for line in lines:
            words = command(line)
            if not words:  # the comment that says to annotate
                assert "annotate" in line
                # Every second episode: GPT-3.5's and Mistral's, the folders imported in turn.
                annotate(label_studio.url, ls_client, project_title, raters,
                         env["SOTOPIA_LS_ANNOTATOR_PASSWORD"], every=2)
                ran.append("annotate")
            elif words[0] in ("scripts/demo", "source"):
                continue  # the session's Label Studio is running; sotopia_ls is importable
            elif words[0] == "scripts/sotopia-env":
                sotopia_python()  # runs the script, once for the whole session
                ran.append("sotopia-env")
            elif words[0] == "export":
                name, _ = words[1].split("=", 1)
                env[name] = "sk-stand-in-never-shown"
            elif words[0] == "sotopia-ls":
                args = [project_title if word == title else word for word in words[1:]]
                if args[0] == "evaluate":
                    judges.append(args[args.index("--model") + 1])
                    args = [word for word in args if not word.startswith("http")]
                    args = [word for word in args if word != "--base-url"]
                    args += ["--base-url", stub.base_url]
                result = CliRunner().invoke(main, args, env=env)
                assert result.exit_code == 0, f"{line}\n{result.output}"
                assert "sk-stand-in-never-shown" not in result.output
                # Every link printed is whole: it opens pasted into a browser.
                links = re.findall(r"(?:: |at )(\S*/(?:projects|user)/\S*)", result.output)
                assert all(link.startswith(label_studio.url) for link in links), result.output
                if args[0] in ("import", "annotators"):
                    assert links, result.output
                if args[0] == "annotators":
                    raters += [args[i + 1] for i, word in enumerate(args) if word == "--add"]
                ran.append(args[0])
                printed[args[0]] = result.output
            else:
                into_sotopia(words)
                ran.append("into sotopia")
    assert ran == ["samples", "import", "evaluate", "evaluate", "annotators", "annotate",
                   "export", "report", "plan", "sotopia-env", "into sotopia"]

    table = pd.read_csv(tmp_path / "report" / "human_vs_model.csv")
    assert list(zip(table["evaluator"], table["dimension"])) == [
        (judge, panel) for judge in judges for panel in PANELS]
    assert (table["n"] == RATED * len(AGENTS)).all()
    assert table[["pearson", "mse", "bias"]].notna().all().all()
    coverage = pd.read_csv(tmp_path / "report" / "model_coverage.csv")
    assert (coverage["episodes_with_model"] == RATED).all()
    models = {"gpt-3.5-turbo", "mistral-instruct"}  # custom_model named on import
    reads_the_answers(tmp_path / "report", judges, models, printed["plan"])


def reads_the_answers(report: Path, judges: list[str], models: set[str], plan: str) -> None:
    """The report says which judge passes on which dimension, and gives each agent model's
    scores three ways, table and plot; plan answers per judge, model and dimension."""
    tested = pd.read_csv(report / "alt_test.csv")
    pooled = tested[tested["agent"] == "all"]
    assert sorted(zip(pooled["evaluator"], pooled["dimension"])) == sorted(
        (judge, panel) for judge in judges for panel in PANELS)
    assert set(pooled["verdict"]) <= {"passes", "fails"} and (pooled["items"] == 30).all()
    page = (report / "report.html").read_text(encoding="utf-8")
    assert f'alt="{html.escape(MODEL_CHART_ALT)}"' in page
    scores = pd.read_csv(report / "agent_model_scores.csv")
    assert set(scores["agent_model"]) == models
    powered = scores[scores["estimate"] == "prediction-powered"]
    assert set(powered["evaluator"]) == set(judges) and powered["mean"].notna().all()
    rows = [line.split()[:3] for line in plan.split("\n- ", 1)[0].splitlines()[1:]]
    assert {(judge, model) for judge, model, _ in rows} == {
        (judge, model) for judge in judges for model in {"all", *models}}


def annotate(url: str, client, title: str, emails: list[str], password: str,
             every: int = 1) -> None:
    """Each annotator logs in with the password the researcher gave and rates ``RATED``
    episodes, one in ``every`` from the first, saving each rating as the editor does, through
    the API with their session."""
    assert len(emails) == 3
    (project,) = [p for p in client.projects.list() if p.title == title]
    ids = sorted(task_ids(client, project.id).values())
    for k, email in enumerate(emails, start=1):
        with httpx.Client(base_url=url) as browser:
            browser.get("/user/login/")
            entered = browser.post("/user/login/", headers={"Referer": f"{url}/user/login/"},
                                   data={"email": email, "password": password,
                                         "csrfmiddlewaretoken": browser.cookies["csrftoken"]})
            assert entered.is_redirect, f"{email} cannot log in"
            for number, task in enumerate(ids[::every][:RATED]):
                saved = browser.post(f"/api/tasks/{task}/annotations/",
                                     json={"result": results_of(ratings(number + k))},
                                     headers={"X-CSRFToken": browser.cookies["csrftoken"],
                                              "Referer": f"{url}/"})
                assert saved.status_code == 201, saved.text


def into_sotopia(words: list[str]) -> None:
    """``VAR=value python examples/into_sotopia.py results/`` in an environment with sotopia."""
    assignments = dict(word.split("=", 1) for word in words if re.match(r"^[A-Z_]+=", word))
    script, *args = [word for word in words if "=" not in word][1:]
    done = subprocess.run([str(sotopia_python()), str(REPO / script), *args],
                          env={**os.environ, **assignments, "HOME": os.getcwd()},
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    aggregated = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    ours = {record["episode"]: record
            for record in map(json.loads, Path("results/episodes.jsonl").open())}
    assert len(aggregated) == len(ours) == RATED
    for record in aggregated:
        mine = ours[record["episode"]]
        for theirs, expected in zip(record["rewards"], mine["rewards"]):
            assert theirs[1] == expected[1] and abs(theirs[0] - expected[0]) < 1e-9
