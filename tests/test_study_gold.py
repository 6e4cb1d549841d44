"""Gold episodes: a qualification round serves nothing else, a main study hides a share of
them among its assignments, and nothing a participant receives tells them apart.

The first tests run on the gateway's database alone (as tests/test_study_leases.py does); the
later ones read references from a CSV or from Label Studio's ground-truth annotations, and
serve participants through the gateway on the session's real Label Studio.
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import pytest
from sqlalchemy import Engine, select

from study_support import check_invariants, make_study
from test_study_leases import visitor
from sotopia_ls.errors import StudyError
from sotopia_ls.study import arrival, leases
from sotopia_ls.study.settings import StudyFile
from sotopia_ls.study.store import assignments, gold, open_store, slots

ORDINARY = list(range(1, 41))
GOLD = [101, 102, 103, 104]
RESULTS = [{"from_name": "stand-in", "value": {}}]  # settle stores whatever it is given
QUALIFICATION = {"screen_out_code": "SCR33N", "screen_out_url": "http://127.0.0.1:9/out"}


def on_database(tmp_path: Path, **fields: object) -> tuple[Engine, StudyFile]:
    """A study's database holding the ordinary tasks and the gold ones (with references)."""
    study = make_study(tmp_path, 1, **fields)
    engine = open_store(study.database)
    leases.add_episodes(engine, study.name, {task: {} for task in ORDINARY + GOLD},
                        study.raters_per_episode,
                        references={task: {"believability_1": 7} for task in GOLD})
    return engine, study


def lease(engine: Engine, study: StudyFile, visit: arrival.Visit,
          seconds: float | None = None) -> leases.Assignment | None:
    return leases.lease_for_visit(engine, study.name, visit.id, visit.participant_id,
                                  k=study.raters_per_episode,
                                  lease_seconds=seconds or study.lease_seconds,
                                  gold_share=leases.GoldShare.of(study))


def whole_visit(engine: Engine, study: StudyFile) -> list[int]:
    """A participant takes and submits episodes until the visit is over: the tasks rated."""
    visit, rated = visitor(engine, study), []
    while len(rated) < study.episodes_per_participant:
        taken = lease(engine, study, visit)
        if taken is None:
            break
        assert leases.settle(engine, taken, RESULTS, study.raters_per_episode).state == "saving"
        rated.append(taken.task_id)
    return rated


def test_gold_episodes_get_no_slots(tmp_path):
    engine, _ = on_database(tmp_path, gold_share=0.2)

    with engine.connect() as conn:
        slotted = set(conn.execute(select(slots.c.task_id)).scalars())
    assert slotted == set(ORDINARY)


def test_a_qualification_round_serves_only_gold_each_to_any_number_of_participants(tmp_path):
    engine, study = on_database(tmp_path, qualification=QUALIFICATION,
                                episodes_per_participant=3, raters_per_episode=2)

    visits = [whole_visit(engine, study) for _ in range(6)]

    assert all(len(rated) == 3 and len(set(rated)) == 3 and set(rated) <= set(GOLD)
               for rated in visits)
    served = Counter(task for rated in visits for task in rated)
    # Six participants, three each, over four gold episodes: each beyond k = 2, evenly.
    assert sum(served.values()) == 18 and min(served.values()) > study.raters_per_episode
    assert max(served.values()) - min(served.values()) <= 2
    check_invariants(engine, study)


def test_a_qualification_round_with_fewer_gold_episodes_than_m_gives_what_exists(tmp_path):
    engine, study = on_database(tmp_path, qualification=QUALIFICATION,
                                episodes_per_participant=6)

    assert sorted(whole_visit(engine, study)) == GOLD


def test_hidden_gold_at_20_percent_is_one_in_five_for_every_participant(tmp_path):
    engine, study = on_database(tmp_path, gold_share=0.2, episodes_per_participant=5)

    visits = [whole_visit(engine, study) for _ in range(12)]

    assert [sum(task in GOLD for task in rated) for rated in visits] == [1] * 12
    positions = Counter(next(i for i, task in enumerate(rated) if task in GOLD)
                        for rated in visits)
    assert len(positions) > 1, "the gold episode is always at the same position"
    check_invariants(engine, study)


def test_a_share_between_whole_numbers_is_met_on_average_and_within_one_per_visit(tmp_path):
    # m = 4 and 30%: 1.2 gold a visit, so 1 or 2, 2 about one visit in five.
    share = leases.GoldShare(0.3, 4)
    counts = [len(share.positions(visit, arrival.now())) for visit in range(2000)]

    assert set(counts) == {1, 2}
    assert sum(counts) / (4 * len(counts)) == pytest.approx(0.3, abs=0.015)


def test_every_request_of_a_visit_finds_the_same_gold_positions(tmp_path):
    share, arrived = leases.GoldShare(0.4, 10), arrival.now()

    drawn = share.positions(7, arrived)

    assert len(drawn) == 4 and share.positions(7, arrived) == drawn
    assert len({share.positions(visit, arrived) for visit in range(50)}) > 10


def test_a_participant_who_had_every_gold_episode_gets_ordinary_ones(tmp_path):
    engine, study = on_database(tmp_path, gold_share=0.5, episodes_per_participant=10)
    visit = visitor(engine, study)
    rated = []
    for _ in range(10):
        taken = lease(engine, study, visit)
        leases.settle(engine, taken, RESULTS, study.raters_per_episode)
        rated.append(taken.task_id)

    assert len(set(rated)) == 10 and sorted(set(rated) & set(GOLD)) == GOLD


def test_a_gold_lease_is_renewed_never_expires_and_records_one_submission(tmp_path):
    engine, study = on_database(tmp_path, qualification=QUALIFICATION)
    visit = visitor(engine, study)
    held = lease(engine, study, visit, seconds=0.1)
    time.sleep(0.2)

    assert lease(engine, study, visit, seconds=0.1).key == held.key
    first = leases.settle(engine, held, RESULTS, study.raters_per_episode)
    again = leases.settle(engine, held, [{"other": "results"}], study.raters_per_episode)

    assert (first.state, first.results) == ("saving", RESULTS) and again == first
    assert arrival.load_visit(engine, visit.id).rated == 1
    with engine.connect() as conn:
        assert conn.execute(select(assignments.c.state)).scalars().all() == ["saving"]


def test_a_task_served_as_an_ordinary_episode_cannot_become_gold(tmp_path):
    engine, study = on_database(tmp_path, gold_share=0.2)

    with pytest.raises(StudyError, match=r"task 1 of study pilot has a reference but was "
                                         r"already served as an ordinary episode"):
        leases.add_episodes(engine, study.name, {}, study.raters_per_episode,
                            references={1: {"believability_1": 7}})


def test_a_reference_read_again_replaces_the_one_recorded(tmp_path):
    engine, study = on_database(tmp_path, gold_share=0.2)

    leases.add_episodes(engine, study.name, {}, study.raters_per_episode,
                        references={101: {"believability_1": 3}})

    with engine.connect() as conn:
        stored = dict(conn.execute(select(gold.c.task_id, gold.c.reference)).all())
    assert stored[101] == {"believability_1": 3} and stored[102] == {"believability_1": 7}
