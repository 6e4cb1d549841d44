"""A researcher's review reaches Prolific: approvals, rejections, bulk approvals, a study's
submissions and a qualification round's participant group, against a stand-in for Prolific's
API on 127.0.0.1 (real HTTP), which records what was sent and answers as Prolific does,
refusals included; and an address answering badly (a drip, a huge answer) costs no more than
the client's deadline and size cap."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from typing import Any

import pytest
from hostile_server import LIMIT, hostile
from prolific_stand_in import TOKEN, StandIn, serving

from sotopia_ls.study.payment.prolific import (
    REJECTION_CATEGORIES,
    Prolific,
    ProlificError,
    ProlificRefused,
    ProlificUnavailable,
)

REASON = ("Your answers arrived in under a minute for twelve episodes, far below the time "
          "reading them takes; the attention check was failed too.")


@pytest.fixture
def prolific() -> Iterator[StandIn]:
    with serving() as server:
        yield server


def client(stand_in: StandIn, **settings: Any) -> Prolific:
    return Prolific(TOKEN, base_url=stand_in.base_url, backoff=0.01, **settings)


def test_approving_a_submission_sends_the_approve_action_with_the_token(prolific):
    submission = client(prolific).approve("s1")

    assert prolific.sent() == [("POST", "/api/v1/submissions/s1/transition/",
                                {"action": "APPROVE"})]
    assert prolific.requests[0]["auth"] == f"Token {TOKEN}"
    assert (submission.id, submission.status, submission.participant_id) == (
        "s1", "APPROVED", "p-s1")


def test_rejecting_sends_the_message_and_category_prolific_requires(prolific):
    submission = client(prolific).reject("s2", REASON, "TOO_QUICKLY")

    assert prolific.sent() == [("POST", "/api/v1/submissions/s2/transition/", {
        "action": "REJECT", "message": REASON, "rejection_category": "TOO_QUICKLY"})]
    assert submission.status == "REJECTED"


@pytest.mark.parametrize(("message", "category", "expected"), [
    ("Too fast.", "TOO_QUICKLY", "at least 100 characters (Prolific's minimum), not 9"),
    # Prolific counts these; the participant would read nothing, or two words.
    ("\u200b" * 120, "LOW_EFFORT", "(Prolific's minimum), not 0 (of 120: invisible characters "
     "and repeated spaces do not count)"),
    ("Too \u2060fast." + " \u00a0\u200b" * 60, "TOO_QUICKLY", "not 9 (of 190: "),
    (REASON, "TOO_FAST", "rejection category 'TOO_FAST' is none of Prolific's (TOO_QUICKLY, "),
])
def test_a_rejection_prolific_would_refuse_is_stopped_before_it_is_sent(
        prolific, message, category, expected):
    with pytest.raises(ProlificError) as caught:
        client(prolific).reject("s3", message, category)

    assert str(caught.value).startswith("reject submission s3: ")
    assert expected in str(caught.value)
    assert "\n" not in str(caught.value)
    assert prolific.requests == []


def test_an_id_that_would_leave_its_path_is_refused_before_anything_is_sent(prolific):
    climbing = "/".join(["s1", "..", "..", "studies"])  # up two folders of the API's paths
    with pytest.raises(ProlificError, match=rf"^{re.escape(repr(climbing))} is no Prolific id"):
        client(prolific).approve(climbing)

    assert prolific.requests == []


def test_the_documented_rejection_categories_are_the_twelve_prolific_lists():
    assert set(REJECTION_CATEGORIES) == {
        "TOO_QUICKLY", "TOO_SLOWLY", "FAILED_INSTRUCTIONS", "INCOMP_LONGITUDINAL",
        "FAILED_CHECK", "LOW_EFFORT", "MALINGERING", "NO_CODE", "BAD_CODE", "NO_DATA",
        "UNSUPP_DEVICE", "OTHER"}


def test_bulk_approval_of_2500_submissions_goes_in_requests_of_at_most_1000(prolific):
    ids = [f"s{n}" for n in range(2500)]

    client(prolific).bulk_approve(ids)

    sent = prolific.sent()
    assert [(method, path) for method, path, _ in sent] == [
        ("POST", "/api/v1/submissions/bulk-approve/")] * 3
    assert [body["submission_ids"] for _, _, body in sent] == [
        ids[:1000], ids[1000:2000], ids[2000:]]
    assert all(set(body) == {"submission_ids"} for _, _, body in sent)


def test_a_studys_submissions_are_read_over_every_page(prolific):
    submissions = client(prolific).submissions("study-7")

    assert [(s.id, s.participant_id, s.status) for s in submissions] == [
        ("s1", "p1", "AWAITING REVIEW"), ("s2", "p2", "AWAITING REVIEW"),
        ("s3", "p3", "AWAITING REVIEW")]
    assert prolific.sent() == [
        ("GET", "/api/v1/studies/study-7/submissions/", None),
        ("GET", "/api/v1/studies/study-7/submissions/?page=2", None)]
    assert {r["auth"] for r in prolific.requests} == {f"Token {TOKEN}"}


def test_a_qualification_round_builds_its_participant_group(prolific):
    prolific_client = client(prolific)

    group = prolific_client.create_participant_group("passed round 1", "ws-1", ["p1", "p2"])
    prolific_client.add_to_participant_group(group.id, ["p3"])
    members = prolific_client.participant_group_members(group.id)

    assert (group.id, group.name) == ("group-1", "passed round 1")
    assert members == ["p1", "p2", "p3"]
    assert prolific.sent() == [
        ("POST", "/api/v1/participant-groups/",
         {"name": "passed round 1", "workspace_id": "ws-1", "participant_ids": ["p1", "p2"]}),
        ("POST", "/api/v1/participant-groups/group-1/participants/", {"participant_ids": ["p3"]}),
        ("GET", "/api/v1/participant-groups/group-1/participants/", None),
        ("GET", "/api/v1/participant-groups/group-1/participants/?page=2", None)]


def test_a_refused_rejection_names_the_submission_and_prolifics_reason(prolific):
    prolific.script["/api/v1/submissions/s4/transition/"] = [(400, {"error": {
        "status": 400, "title": "Invalid request",
        "detail": {"rejection_category": ["Submission is not awaiting review."]}}}, {})]

    with pytest.raises(ProlificRefused) as caught:
        client(prolific).reject("s4", REASON, "LOW_EFFORT")

    assert str(caught.value) == (
        "reject submission s4: Prolific answered HTTP 400: "
        "rejection_category: Submission is not awaiting review.")
    assert caught.value.status == 400
    assert len(prolific.requests) == 1  # a refusal is not sent again


def test_a_refused_token_is_named_but_never_shown(prolific):
    # A server that echoes the header it was sent must not carry the token into the message.
    prolific.script["/api/v1/submissions/s5/transition/"] = [
        (401, {"detail": f"Invalid token header: Token {TOKEN}"}, {})]
    prolific_client = client(prolific)

    with pytest.raises(ProlificRefused) as caught:
        prolific_client.approve("s5")

    message = str(caught.value)
    assert message == ("approve submission s5: Prolific answered HTTP 401 (check "
                       "PROLIFIC_TOKEN): Invalid token header: Token ***")
    assert TOKEN not in message + repr(caught.value) + repr(prolific_client)


def test_an_unknown_participant_group_is_named_in_the_error(prolific):
    with pytest.raises(ProlificRefused) as caught:
        client(prolific).add_to_participant_group("no-such-group", ["p1"])

    assert str(caught.value).startswith(
        "add participants to participant group no-such-group: Prolific answered HTTP 404: ")
    assert caught.value.status == 404


def test_a_rate_limited_approval_is_sent_again_and_succeeds(prolific):
    prolific.script["/api/v1/submissions/s6/transition/"] = [
        (429, {"detail": "Request was throttled."}, {"Retry-After": "0"})]

    submission = client(prolific).approve("s6")

    assert submission.status == "APPROVED"
    assert prolific.sent() == [("POST", "/api/v1/submissions/s6/transition/",
                                {"action": "APPROVE"})] * 2


def test_an_approval_that_timed_out_is_sent_again(prolific):
    prolific.script["/api/v1/submissions/s7/transition/"] = [("sleep", 1.0)]

    submission = client(prolific, timeout=0.3).approve("s7")

    assert submission.status == "APPROVED"
    assert len(prolific.requests) == 2


def test_prolific_down_after_every_retry_is_one_line_naming_the_call(prolific):
    prolific.script["/api/v1/submissions/bulk-approve/"] = [(503, b"<html>down</html>", {})] * 3

    with pytest.raises(ProlificUnavailable) as caught:
        client(prolific, retries=2).bulk_approve(["s1", "s2"])

    assert str(caught.value) == ("bulk-approve submissions s1 … s2 (2): Prolific answered "
                                 "HTTP 503 (3 tries)")
    assert len(prolific.requests) == 3


def test_an_answer_of_another_shape_is_one_line_naming_the_field(prolific):
    prolific.script["/api/v1/studies/study-9/submissions/"] = [(200, {
        "results": [{"id": "s1", "participant_id": "p1"}], "_links": {"next": None}}, {})]

    with pytest.raises(ProlificUnavailable) as caught:
        client(prolific).submissions("study-9")

    assert str(caught.value) == ("list the submissions of study study-9: Prolific's answer is "
                                 "not as documented (status: Field required)")


def test_a_next_page_elsewhere_is_not_followed_so_the_token_stays_home(prolific):
    prolific.script["/api/v1/studies/study-8/submissions/"] = [(200, {
        "results": [], "_links": {"next": {"href": "http://127.0.0.2:9/steal/"}}}, {})]

    with pytest.raises(ProlificError, match="another address than the API's"):
        client(prolific).submissions("study-8")

    assert len(prolific.requests) == 1


def test_the_token_comes_from_the_environment(prolific, monkeypatch):
    monkeypatch.setenv("PROLIFIC_TOKEN", TOKEN)
    Prolific.from_environment(base_url=prolific.base_url).approve("s8")
    assert prolific.requests[0]["auth"] == f"Token {TOKEN}"

    monkeypatch.delenv("PROLIFIC_TOKEN")
    with pytest.raises(ProlificError, match="^no Prolific API token: set PROLIFIC_TOKEN$"):
        Prolific.from_environment(base_url=prolific.base_url)


@pytest.mark.parametrize("address", ["http://api.example.org/api/v1/", "ftp://127.0.0.1/"])
def test_the_token_is_never_sent_in_the_clear_to_another_machine(address):
    with pytest.raises(ProlificError, match="must be https:// .* the token would travel in the "
                                            "clear"):
        Prolific(TOKEN, base_url=address)


def test_a_bulk_approval_answered_in_plain_text_is_done(prolific):
    # Prolific documents the answer only as "Bulk approve in progress"; nothing of it is used.
    prolific.script["/api/v1/submissions/bulk-approve/"] = [
        (200, b"Bulk approve in progress", {"Content-Type": "text/plain"})]

    client(prolific).bulk_approve(["s1", "s2"])

    assert len(prolific.requests) == 1


def test_a_workspaces_participant_groups_are_only_its_own_and_not_deleted(prolific):
    group = {"participant_count": 0, "description": None, "feeder_studies": []}
    # A server that ignored the workspace filter: another workspace's group and a deleted one.
    prolific.script["GET /api/v1/participant-groups/"] = [(200, {"results": [
        group | {"id": "g-ours", "name": "passed", "workspace_id": "ws-7", "is_deleted": False},
        group | {"id": "g-gone", "name": "passed", "workspace_id": "ws-7", "is_deleted": True},
        group | {"id": "g-theirs", "name": "passed", "workspace_id": "ws-8",
                 "is_deleted": False}]}, {})]

    groups = client(prolific).participant_groups("ws-7")

    assert [(found.id, found.name) for found in groups] == [("g-ours", "passed")]
    assert prolific.sent() == [
        ("GET", "/api/v1/participant-groups/?filter%5Bworkspace_id%5D=ws-7", None)]


@pytest.mark.parametrize("behaviour", ["drip headers", "drip body"])
def test_an_answer_dripped_a_byte_at_a_time_is_cut_at_the_deadline(behaviour):
    with hostile(behaviour) as server:
        slow = Prolific(TOKEN, base_url=server.base_url, timeout=0.5, retries=1, backoff=0.01)
        started = time.monotonic()
        with pytest.raises(ProlificUnavailable) as caught:
            slow.approve("s1")

    assert str(caught.value) == ("approve submission s1: no complete answer within 0.5 s from "
                                 "Prolific (2 tries)")
    assert time.monotonic() - started < 3 and server.requests == 2


def test_an_answer_longer_than_the_cap_is_refused_without_reading_it_whole():
    with hostile("huge") as server:
        capped = Prolific(TOKEN, base_url=server.base_url, max_bytes=2**20)
        with pytest.raises(ProlificUnavailable) as caught:
            capped.submissions("study-7")

    assert str(caught.value) == ("list the submissions of study study-7: the answer from "
                                 "Prolific is longer than 1,048,576 bytes; not read further")
    assert server.requests == 1 and server.written < LIMIT / 2
