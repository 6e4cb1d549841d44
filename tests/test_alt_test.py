"""Can the judge replace a person? A researcher runs the alternative annotator test (Calderon,
Reichart & Dror, ACL 2025) on episodes three people rated.

A simulated study where the answer is known: a judge drawn like one more person passes, a judge
answering at random fails. The figures are those of ``nitaytech/AltTest``'s own procedure,
written again below with its loops, and a study with too few third raters says how many more
episodes need one.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy.stats import ttest_1samp

from sotopia_ls.exporter import Tally
from sotopia_ls.report.build import build_report
from sotopia_ls.statistics.alttest import MEASURE, alt_test

from conftest import read_study, sections_named

NOISE = 1.5


def crowd_study(episodes: int, raters: int, seed: int, *, people: int | None = None
                ) -> tuple[pd.DataFrame, np.ndarray, np.random.Generator]:
    """Units (episode × agent) with a true goal score, each rated by ``raters`` people with the
    same noise; ``people`` of them in all (each rates every unit when not given)."""
    rng = np.random.default_rng(seed)
    units = pd.MultiIndex.from_product(
        [[f"ep{i:03d}" for i in range(episodes)], [1, 2]], names=["episode_id", "agent"]
    ).to_frame(index=False)
    truth = rng.integers(0, 11, len(units))
    frames = []
    for k in range(raters):
        who = ([f"a{k}"] * len(units) if people is None
               else [f"p{(i // 2 * raters + k) % people}" for i in range(len(units))])
        frames.append(units.assign(
            annotation_id=units.index * 10 + k, annotator_id=who, dimension="goal",
            score=np.clip(np.round(truth + rng.normal(0, NOISE, len(units))), 0, 10)))
    return pd.concat(frames, ignore_index=True), truth, rng


def judge(long: pd.DataFrame, scores: np.ndarray, name: str = "judge") -> pd.DataFrame:
    units = long[["episode_id", "agent"]].drop_duplicates().reset_index(drop=True)
    return units.assign(dimension="goal", score=scores, evaluator=name)


def verdict(long: pd.DataFrame, scores: pd.DataFrame, agent: str = "all") -> pd.Series:
    table = alt_test(long, scores)
    return table.set_index(["agent", "dimension"]).loc[(agent, "goal")]


@pytest.mark.parametrize("seed", [7, 8, 9])
def test_a_judge_drawn_like_a_person_passes_and_a_random_one_fails(seed):
    # A judge exactly as good as a person wins only by ε's margin; on a 0–10 scale, where
    # ties are rare, that takes many items (with 200 episodes it passed in 4 seeds of 10).
    long, truth, rng = crowd_study(500, 3, seed)
    like_a_person = judge(long, np.clip(np.round(truth + rng.normal(0, NOISE, len(truth))), 0, 10))
    passed = verdict(long, like_a_person)
    assert passed["verdict"] == "passes" and passed["winning_rate"] >= 0.5
    assert passed["measure"] == MEASURE == "negative RMSE" and passed["epsilon"] == 0.1
    assert passed["annotators"] == "people" and passed["annotators_tested"] == 3
    assert passed["items"] == 1000 and passed["third_raters_needed"] == 0

    random = verdict(long, judge(long, rng.integers(0, 11, len(truth))))
    assert random["verdict"] == "fails" and random["winning_rate"] == 0
    assert random["advantage_probability"] < passed["advantage_probability"]


# --- nitaytech/AltTest's procedure, as its notebook writes it ------------------------------

def by_procedure(p_values, q):
    p_values = np.array(p_values, dtype=float)
    m = len(p_values)
    order = np.argsort(p_values)
    harmonic = np.sum(1.0 / np.arange(1, m + 1))
    thresholds = (np.arange(1, m + 1) / m) * (q / harmonic)
    last = -1
    for i in range(m):
        if p_values[order[i]] <= thresholds[i]:
            last = i
    return [] if last == -1 else list(order[:last + 1])


def neg_rmse(pred, annotations):
    return -1 * float(np.sqrt(np.mean([(pred - ann) ** 2 for ann in annotations])))


def reference_alt_test(llm, humans, epsilon=0.1, q=0.05, min_humans=3, min_instances=30):
    h_set = {}
    for h, anns in humans.items():
        for i in anns:
            h_set.setdefault(i, []).append(h)
    keep = {i for i in h_set if len(h_set[i]) >= min_humans and i in llm}
    p_values, advantage_probs, tested = [], [], []
    for excluded in humans:
        instances = [i for i in humans[excluded] if i in keep]
        if len(instances) < min_instances:
            continue
        llm_ind, excluded_ind = [], []
        for i in instances:
            remaining = [humans[h][i] for h in h_set[i] if h != excluded]
            human_score = neg_rmse(humans[excluded][i], remaining)
            llm_score = neg_rmse(llm[i], remaining)
            llm_ind.append(1 if llm_score >= human_score else 0)
            excluded_ind.append(1 if human_score >= llm_score else 0)
        diff = [e - m for e, m in zip(excluded_ind, llm_ind)]
        p_values.append(ttest_1samp(diff, epsilon, alternative="less").pvalue)
        advantage_probs.append(float(np.mean(llm_ind)))
        tested.append(excluded)
    return len(by_procedure(p_values, q)) / len(tested), float(np.mean(advantage_probs))


def as_reference(long: pd.DataFrame, scores: pd.DataFrame, annotator: str):
    humans: dict = {}
    for row in long.itertuples():
        humans.setdefault(getattr(row, annotator), {})[(row.episode_id, row.agent)] = row.score
    llm = {(row.episode_id, row.agent): row.score for row in scores.itertuples()}
    return llm, humans


@pytest.mark.parametrize("noise", [1.0, 2.0, 3.0])
def test_the_figures_are_alttests_own_to_four_decimals(noise):
    long, truth, rng = crowd_study(60, 3, 11)
    scores = judge(long, np.clip(np.round(truth + 0.5 + rng.normal(0, noise, len(truth))), 0, 10))
    ours = verdict(long, scores)
    winning, advantage = reference_alt_test(*as_reference(long, scores, "annotator_id"))
    assert ours["winning_rate"] == pytest.approx(winning, abs=1e-4)
    assert ours["advantage_probability"] == pytest.approx(advantage, abs=1e-4)
    # One agent alone: half the items.
    first = long[long["agent"] == 1]
    alone = verdict(long, scores, agent="1")
    winning, advantage = reference_alt_test(
        *as_reference(first, scores[scores["agent"] == 1], "annotator_id"))
    assert alone["items"] == 60
    assert alone["winning_rate"] == pytest.approx(winning, abs=1e-4)
    assert alone["advantage_probability"] == pytest.approx(advantage, abs=1e-4)


def test_crowd_workers_who_rate_a_few_episodes_each_are_combined_by_rater_position():
    # 30 people, each rating a few episodes: no one has the 30 items a t-test needs, so the
    # first, second and third rater of every episode stand for three annotators (the paper's
    # "combined annotators").
    long, truth, rng = crowd_study(100, 3, 5, people=30)
    scores = judge(long, np.clip(np.round(truth + rng.normal(0, 2.0, len(truth))), 0, 10))
    ours = verdict(long, scores)
    assert ours["annotators"] == "rater positions" and ours["annotators_tested"] == 3
    positions = long.assign(position=long["annotation_id"] % 10)
    winning, advantage = reference_alt_test(*as_reference(positions, scores, "position"))
    assert ours["winning_rate"] == pytest.approx(winning, abs=1e-4)
    assert ours["advantage_probability"] == pytest.approx(advantage, abs=1e-4)


def test_too_few_third_raters_says_how_many_episodes_need_one():
    long, truth, rng = crowd_study(40, 3, 3)
    # Only the first 10 episodes keep their third rater: 20 items of the 30 the test needs.
    third = long["annotation_id"] % 10 == 2
    long = long[~third | long["episode_id"].isin([f"ep{i:03d}" for i in range(10)])]
    table = alt_test(long, judge(long, truth)).set_index(["agent", "dimension"])
    row = table.loc[("all", "goal")]
    assert row["verdict"] == "too few items" and np.isnan(row["winning_rate"])
    assert row["items"] == 20 and row["third_raters_needed"] == 5
    assert table.loc[("1", "goal"), "third_raters_needed"] == 20


@pytest.mark.report
def test_the_report_says_which_judge_passes_and_how_many_episodes_need_a_third_rater(
        sample_data, tmp_path):
    study = read_study(sample_data)
    # A judge who rates like one more of the raters: the second rater of each episode.
    second = study.sort_values("annotation_id").groupby(["episode_id", "agent", "dimension"])
    judge_scores = second.nth(1)[["episode_id", "agent", "dimension", "score"]].assign(
        evaluator="stand-in")
    # The samples' 42 episodes have two raters (one has three): 14 more need a third for the
    # 30 units (both agents) the test needs at the least.
    tested = sections_named("paired", "alt_test")  # the section and the one it needs
    report = build_report(study, judge_scores, Tally(), bootstrap=0, sections=tested)
    pooled = report.alt_test.set_index(["agent", "dimension"]).loc["all"]
    assert (pooled["verdict"] == "too few items").all()
    assert pooled.loc["goal", "items"] == 2 and pooled.loc["goal", "third_raters_needed"] == 14

    # Each episode given a third rater, who rates like the first: the test runs.
    first = study.sort_values("annotation_id").groupby(["episode_id", "agent", "dimension"])
    third = first.nth(0).assign(annotation_id=lambda f: f["annotation_id"] + 100_000,
                                annotator_id="third")
    crowded = pd.concat([study, third[~third["episode_id"].isin(
        study.groupby("episode_id")["annotator_id"].nunique().loc[lambda n: n > 2].index)]])
    report = build_report(crowded, judge_scores, Tally(), bootstrap=0, alt_test_epsilon=0.2,
                          sections=tested)
    page = report.write(tmp_path / "report")
    written = pd.read_csv(page.parent / "alt_test.csv", keep_default_na=False)
    assert set(written["epsilon"]) == {0.2} and set(written["measure"]) == {"negative RMSE"}
    assert set(written["agent"]) == {"all", "1", "2"}
    expected = alt_test(crowded, judge_scores, epsilon=0.2)
    assert written["winning_rate"].astype(str).tolist() == [
        "" if pd.isna(v) else str(v) for v in expected["winning_rate"]]
    shown = page.read_text().split("<h2>Can the judge replace a person?</h2>")[1]
    assert "ε = 0.2 (--alt-test-epsilon)." in shown
    verdicts = expected[expected["agent"] == "all"].set_index("dimension")["verdict"]
    passed = ", ".join(verdicts.index[verdicts == "passes"])
    assert passed and f"stand-in: passes on {passed}" in shown
