"""A researcher asks a model whether each rationale supports its score: `sotopia-ls study
check-rationales` against a stand-in judge on 127.0.0.1 (the chat stub, answering over real
HTTP by reading the question it gets). Eli's secret scored -6 beside "Eli does not reveal his
secret" is judged unsupported, the same at 0 supported; the review shows the verdicts to the
researcher and suggests what it suggested before; a rerun asks nothing; a hanging, huge or
malformed answer costs that rating its verdict alone, in one line; a redirect stops the run."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner, Result
from sqlalchemy import Engine, insert, select

from chat_stub import ChatStub, chat_stub
from conftest import results_of
from hostile_server import hostile
from study_support import make_study, typed
import sotopia_ls.study.serving
from sotopia_ls.cli import main
from sotopia_ls.dimensions import (
    AGENTS,
    DIMENSION_KEYS,
    DIMENSIONS,
    RUBRIC,
    rating_name,
    reasoning_name,
)
from sotopia_ls.study.outbox.saving import checked_results
from sotopia_ls.samples import HUMAN_EVAL
from sotopia_ls.study.screening.rationale_check import CHECK, Rating, support_prompt
from sotopia_ls.study.screening.review import review_rows
from sotopia_ls.study.settings import StudyFile, write_study
from sotopia_ls.study.store import (
    assignments,
    episodes,
    open_store,
    participants,
    rationale_verdicts,
    typing,
    visits,
)

JUDGE = "judge-x"
KEY = "sk-stand-in-never-shown-42"
SECRET_OF_ELI = rating_name("secret", 1)


def honest_judge(model: str, prompt: str) -> str:
    """The stand-in's verdict: a rationale saying nothing was revealed supports a score of 0
    only; any other rationale supports its score."""
    score = int(re.search(r"^The person's score: (-?\d+)$", prompt, re.M)[1])
    rationale = re.search(r'^The person\'s rationale: "(.*)"$', prompt, re.M)[1]
    if "does not reveal" in rationale and score != 0:
        return '{"supported": false, "reason": "nothing revealed is a 0 on this scale"}'
    return '{"supported": true, "reason": "the rationale explains the score"}'


def ratings(secret: int, secret_rationale: str) -> list[dict]:
    """Every rating of one episode, each rationale typed in full, Eli's secret as given."""
    chosen = {agent: {key: (f"Having read every turn, the {key} of agent {agent} is what the "
                            "exchange showed", RUBRIC[key].values[len(RUBRIC[key].values) // 2])
                      for key in DIMENSION_KEYS} for agent in AGENTS}
    chosen[1]["secret"] = (secret_rationale, secret)
    chosen[2]["secret"] = ("Mia had nothing to hide and said so plainly", 0)
    return results_of(chosen)


def submitted(engine: Engine, name: str, task: int, results: list[dict]) -> None:
    """A participant's submitted rating of ``task``, as the gateway records it."""
    moment = datetime.now(UTC)
    with engine.begin() as conn:
        person = conn.execute(insert(participants).values(
            study="pilot", external_id=name * 24, arrived_at=moment)).inserted_primary_key[0]
        visit = conn.execute(insert(visits).values(
            participant_id=person, prolific_study_id="a" * 24, prolific_session_id=name * 24,
            arrived_at=moment, outcome="completed")).inserted_primary_key[0]
        assignment = conn.execute(insert(assignments).values(
            key=name * 32, study="pilot", task_id=task, participant_id=person, visit_id=visit,
            state="saving", assigned_at=moment, submitted_at=moment, lead_time=600.0,
            results=checked_results(results)[0])).inserted_primary_key[0]
        conn.execute(insert(typing).values(assignment_id=assignment, counts=typed(results)))


@pytest.fixture
def study(tmp_path: Path) -> StudyFile:
    """Two participants' ratings of Eli and Mia's episode: Eli's secret kept, one scoring it
    -6, the other 0."""
    study = make_study(tmp_path, 1)
    write_study(study, tmp_path / "study.json")
    engine = open_store(study.database)
    with engine.begin() as conn:
        conn.execute(insert(episodes), [{"study": "pilot", "task_id": task, "shown": {
            "agent_1_name": "Eli", "agent_2_name": "Mia"}} for task in (1, 2)])
    submitted(engine, "a", 1, ratings(-6, "Eli does not reveal his secret"))
    submitted(engine, "b", 2, ratings(0, "Eli does not reveal his secret"))
    return study


@pytest.fixture
def stub() -> Iterator[ChatStub]:
    with chat_stub() as server:
        server.respond = honest_judge
        yield server


def check(tmp_path: Path, base_url: str, *more: str) -> Result:
    return CliRunner().invoke(main, [
        "study", "check-rationales", "--study", str(tmp_path / "study.json"), "--model", JUDGE,
        "--base-url", base_url, "--workers", "2", "--timeout", "2", "--retries", "0", *more],
        env={"OPENAI_API_KEY": KEY})


def verdicts(study: StudyFile) -> dict[tuple[str, str], bool]:
    """(participant, rating) → supported, as stored."""
    with open_store(study.database).connect() as conn:
        rows = conn.execute(select(participants.c.external_id, rationale_verdicts.c.rating,
                                   rationale_verdicts.c.supported)
                            .join(assignments,
                                  assignments.c.id == rationale_verdicts.c.assignment_id)
                            .join(participants,
                                  participants.c.id == assignments.c.participant_id)).all()
    return {(who[0], rating): supported for who, rating, supported in rows}


def test_a_rationale_that_contradicts_its_score_is_judged_unsupported_for_the_researcher(
        study, stub, tmp_path):
    engine = open_store(study.database)
    before = review_rows(engine, study).set_index("participant")

    result = check(tmp_path, stub.base_url)

    assert result.exit_code == 0, result.output
    assert result.output == f"0 rating(s) checked before; now 27 supported and 1 not, says {JUDGE}\n"
    assert verdicts(study)[("a", SECRET_OF_ELI)] is False
    assert verdicts(study)[("b", SECRET_OF_ELI)] is True
    assert len(verdicts(study)) == 28 and set(stub.calls) and KEY not in result.output
    # Each question holds the rubric's guidance for its dimension, the score and the rationale.
    (question,) = [prompt for _, prompt in stub.calls if "The person's score: -6" in prompt]
    assert RUBRIC["secret"].guidance in question and "rated Eli" in question
    assert all(example.assessment in question for example in RUBRIC["secret"].examples)

    after = review_rows(engine, study).set_index("participant")
    a, b = after.loc["a" * 24], after.loc["b" * 24]
    assert [a[f"{CHECK}.unsupported"], a[f"{CHECK}.judged"]] == [1, 14]
    assert [b[f"{CHECK}.unsupported"], b[f"{CHECK}.judged"]] == [0, 14]
    assert (f"task 1: {CHECK}: {SECRET_OF_ELI}: not supported, says {JUDGE}: nothing "
            "revealed is a 0 on this scale") in a["details"]
    # Never a reason for a decision, nor a word to the participant.
    decided = ["suggested", "rule", "message", "category"]
    assert after[decided].equals(before[decided])
    assert b[["suggested", "rule"]].tolist() == ["approve", "clean"]
    assert "revealed is a 0" not in " ".join(after["message"])
    serving = Path(sotopia_ls.study.serving.__file__).parent  # what a participant's browser touches
    assert [path.name for path in serving.rglob("*.*") if path.suffix in (".py", ".html", ".js")
            and re.search(r"rationale_(check|verdicts)", path.read_text())] == []


def test_a_rerun_asks_nothing_new(study, stub, tmp_path):
    assert check(tmp_path, stub.base_url).exit_code == 0
    asked = sum(stub.calls.values())

    again = check(tmp_path, stub.base_url)

    assert again.exit_code == 0, again.output
    assert again.output == f"28 rating(s) checked before; now 0 supported and 0 not, says {JUDGE}\n"
    assert sum(stub.calls.values()) == asked == 28


@pytest.mark.parametrize(("answer", "why"), [
    ("hang", r"no complete answer within 2 s from http://127\.0\.0\.1:\d+/v1/chat/completions"),
    ("huge", r"the answer from http://127\.0\.0\.1:\d+/v1/chat/completions is longer than "
             r"8,388,608 bytes; not read further"),
    ('{"supported": "no", "reason": "x"}', "not the verdict asked for: supported: Input should "
                                           "be a valid boolean"),
    ('{"supported": false, "reason": "' + "x" * 5000 + '"}',
     "not the verdict asked for: reason: String should have at most 1000 characters"),
    ("Supported.", "not the verdict asked for: Invalid JSON"),
], ids=["hanging", "300 MB", "not a boolean", "too long", "prose"])
def test_an_unusable_answer_costs_its_rating_alone_in_one_line(study, stub, tmp_path,
                                                               answer, why):
    def one_bad(model: str, prompt: str) -> str:
        return answer if "rated Eli" in prompt and "score: -6" in prompt else \
            honest_judge(model, prompt)
    stub.respond = one_bad

    result = check(tmp_path, stub.base_url)

    assert result.exit_code == 1
    with open_store(study.database).connect() as conn:
        assignment = conn.execute(select(assignments.c.id)
                                  .where(assignments.c.task_id == 1)).scalar_one()
    lines = result.output.splitlines()
    assert lines[0] == f"0 rating(s) checked before; now 27 supported and 0 not, says {JUDGE}"
    assert re.fullmatch(rf"  no verdict for assignment {assignment} {SECRET_OF_ELI}: {why}.*",
                        lines[1]), lines[1]
    assert lines[2:] == ["Error: 1 rating(s) left without a verdict (nothing stored for them); "
                         "run the command again to ask"]
    assert ("a", SECRET_OF_ELI) not in verdicts(study) and len(verdicts(study)) == 27
    assert "Traceback" not in result.output


def test_a_redirecting_endpoint_stops_the_run_in_one_line_and_records_nothing(
        study, stub, tmp_path):
    with hostile("redirect", location=stub.base_url) as server:
        result = check(tmp_path, f"{server.base_url}v1", "--workers", "1")

    assert result.exit_code == 1
    assert len(result.output.splitlines()) == 1
    assert "a redirect to 127.0.0.1" in result.output and "not followed" in result.output
    assert result.output.rstrip().endswith("nothing more was asked")
    assert verdicts(study) == {} and not stub.calls and KEY not in result.output


DOC = Path(__file__).parents[1] / "docs" / "consistency.md"


def test_the_docs_cost_figures_are_the_questions_of_the_released_ratings_and_their_code_runs(
        stub, tmp_path, monkeypatch):
    """docs/consistency.md's figures are those of its own code's questions, and that code
    runs: here against the stand-in, on two of the released annotations."""
    written = DOC.read_text()
    code = re.search(r"```python\n(.*?)```", written.split("## The model's check")[1], re.S)[1]
    released = pd.concat(pd.read_csv(path) for path in sorted(HUMAN_EVAL.glob("*.csv")))
    asked = [len(support_prompt(Rating(rating_name(d.key, agent), d,
                                       json.loads(row["data"])["names"][agent - 1],
                                       int(row[rating_name(d.key, agent)]),
                                       str(row[reasoning_name(d.key, agent)]))))
             for row in released.to_dict("records") for d in DIMENSIONS for agent in AGENTS]
    assert (f"one request per rating, {len(asked):,} for the {len(released)} annotations"
            in " ".join(written.split()))
    assert (f"The questions hold {sum(asked):,} characters in all, from {min(asked):,} to "
            f"{max(asked):,} each" in " ".join(written.split()))

    folder = tmp_path / "sotopia-samples" / "human_eval"
    folder.mkdir(parents=True)
    released.head(2).to_csv(folder / "two.csv", index=False)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("BASE_URL", stub.base_url)
    exec(compile(code, str(DOC), "exec"), {})
    lines = (tmp_path / "verdicts.jsonl").read_text().splitlines()
    assert len(lines) == 2 * len(DIMENSIONS) * len(AGENTS) == sum(stub.calls.values())
    assert {"annotator", "episode", "rating", "supported", "reason"} == set(json.loads(lines[0]))
