"""The judge's endpoint under a flaky, misconfigured or hostile API: a reply cut off mid-body
is asked again, a Retry-After that is no number of seconds falls back to the backoff, an
address that is no HTTP URL stops the run in one line, a caller's stop ends the retries at
once, an answer dripped a byte at a time is cut at the deadline, one too long is not read
whole, a redirect is not followed, and ``sotopia-ls evaluate`` refuses a key no HTTP header
can carry without showing it. The API is the chat stub on 127.0.0.1, answering over real HTTP
(or the hostile server, answering badly)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
from click.testing import CliRunner

from chat_stub import ChatStub, chat_stub
from hostile_server import LIMIT, hostile
from sotopia_ls.chat import ChatEndpoint, EndpointRefused, InvalidReply
from sotopia_ls.cli import main

EPISODE = "Ana and Ben"
MESSAGES = [{"role": "user", "content": f"Participants: {EPISODE}\nEvaluate."}]


@pytest.fixture
def stub() -> Iterator[ChatStub]:
    with chat_stub() as server:
        yield server


def endpoint(base_url: str, retries: int = 2, backoff: float = 0.01) -> ChatEndpoint:
    return ChatEndpoint(base_url, "judge", "sk-test", timeout=5, retries=retries, backoff=backoff)


def test_a_reply_cut_off_mid_body_is_asked_again(stub: ChatStub) -> None:
    stub.script = {("judge", EPISODE): ["cut off"]}
    assert endpoint(stub.base_url).complete(MESSAGES).startswith("{")
    assert stub.calls[("judge", EPISODE)] == 2


def test_a_retry_after_that_is_no_number_of_seconds_falls_back_to_the_backoff(stub) -> None:
    stub.script = {("judge", EPISODE): ["429 nan", "429 inf", "429 -inf"]}
    started = time.monotonic()
    assert endpoint(stub.base_url, retries=3).complete(MESSAGES).startswith("{")
    assert stub.calls[("judge", EPISODE)] == 4 and time.monotonic() - started < 5


@pytest.mark.parametrize("base_url", ["127.0.0.1:11434/v1", "ftp://127.0.0.1/v1", "http://"])
def test_an_address_that_is_no_http_url_refuses_every_request(base_url: str) -> None:
    with pytest.raises(EndpointRefused, match="check --base-url") as refused:
        endpoint(base_url).complete(MESSAGES)
    assert "sk-test" not in str(refused.value)


def test_a_stop_ends_the_wait_before_a_retry_at_once(stub: ChatStub) -> None:
    """Ctrl-C in ``sotopia-ls evaluate`` sets the stop: a request waiting out a long
    Retry-After gives up then, instead of holding the run for minutes."""
    stub.script = {("judge", EPISODE): ["429 30"] * 5}
    stop = threading.Event()
    threading.Timer(0.3, stop.set).start()
    started = time.monotonic()
    with pytest.raises(InvalidReply, match="stopped before an answer came"):
        endpoint(stub.base_url, retries=4).complete(MESSAGES, stop)
    assert time.monotonic() - started < 5 and stub.calls[("judge", EPISODE)] == 1


@pytest.mark.parametrize("key", ["sk-‘quoted’-key", "sk-a\x01b"], ids=["not latin-1", "control"])
def test_evaluate_refuses_a_key_no_header_can_carry_in_one_line_without_showing_it(key: str) -> None:
    result = CliRunner().invoke(main, [
        "evaluate", "--url", "http://127.0.0.1:9", "--api-key", "ls-key", "--project", "1",
        "--model", "judge", "--api-key-env", "JUDGE_KEY"], env={"JUDGE_KEY": key})
    assert result.exit_code == 2, result.output
    assert "the API key in $JUDGE_KEY holds" in result.output
    assert key not in result.output and "Traceback" not in result.output


@pytest.mark.parametrize("behaviour", ["drip headers", "drip body"])
def test_an_answer_dripped_a_byte_at_a_time_is_cut_at_the_deadline(behaviour: str) -> None:
    """Each byte comes well within any per-read timeout; the deadline is for the whole."""
    with hostile(behaviour) as server:
        slow = ChatEndpoint(f"{server.base_url}v1", "judge", "sk-test", timeout=0.5)
        started = time.monotonic()
        with pytest.raises(InvalidReply, match=r"^no complete answer within 0\.5 s from http"):
            slow.complete(MESSAGES)
    assert time.monotonic() - started < 2.5 and server.requests == 1


def test_an_answer_longer_than_the_cap_is_refused_without_reading_it_whole() -> None:
    with hostile("huge") as server:
        capped = ChatEndpoint(f"{server.base_url}v1", "judge", "sk-test", timeout=30,
                              retries=2, max_bytes=2**20)
        with pytest.raises(InvalidReply, match=r"longer than 1,048,576 bytes; not read further$"):
            capped.complete(MESSAGES)
    assert server.requests == 1  # the same request would get the same answer
    assert server.written < LIMIT / 2  # what the socket buffers took, not the 300 MB claimed


def test_a_redirect_is_refused_naming_where_it_points_and_not_followed(stub: ChatStub) -> None:
    elsewhere = stub.base_url + "/chat/completions"
    with hostile("redirect", location=elsewhere) as server:
        with pytest.raises(EndpointRefused) as refused:
            endpoint(f"{server.base_url}v1").complete(MESSAGES)
    port = stub.server_address[1]
    assert f"answered HTTP 307, a redirect to 127.0.0.1:{port}; not followed" in str(refused.value)
    assert "check --base-url" in str(refused.value) and "sk-test" not in str(refused.value)
    assert not stub.calls and server.requests == 1
