"""Prolific's API: the calls a study makes (create its draft, approve, reject, bulk-approve,
list a study's submissions, participant groups for a qualification round, bonuses).

Requests follow the package's HTTP rules (``sotopia_ls.remote``); the token goes into the
``Authorization`` header only and is cut out of every message. What Prolific expects of each
call, and the exception tree, are in docs/gateway.md, "Prolific's API".
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, TypeVar, get_args
from urllib.parse import urlencode, urlsplit

from pydantic import AfterValidator, AliasChoices, BaseModel, ConfigDict, Field, ValidationError

from ... import remote
from ...errors import SotopiaLSError, header_problem, keep_secret
from ...text import visible_length

API_URL = "https://api.prolific.com/api/v1/"
TOKEN_VARIABLE = "PROLIFIC_TOKEN"
# Prolific's advice for one bulk-approve request.
BULK_APPROVE_LIMIT = 1000
RejectionCategory = Literal[
    "TOO_QUICKLY", "TOO_SLOWLY", "FAILED_INSTRUCTIONS", "INCOMP_LONGITUDINAL", "FAILED_CHECK",
    "LOW_EFFORT", "MALINGERING", "NO_CODE", "BAD_CODE", "NO_DATA", "UNSUPP_DEVICE", "OTHER",
]
REJECTION_CATEGORIES: tuple[str, ...] = get_args(RejectionCategory)
MIN_REJECTION_MESSAGE = 100
# Repeats of a request that failed for a passing reason (``retries``'s default).
RETRIES = 3
# A list that keeps answering a next page is cut off here rather than followed forever.
_MOST_PAGES = 1000
_REASON_LENGTH = 300
_LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})
# Prolific's webhook calls (``follow``): where the gateway takes them, and how they are signed.
HOOK_PATH = "/prolific/hook"
HOOK_SECRET_ENV = "SOTOPIA_LS_PROLIFIC_HOOK_SECRET"
# A call whose timestamp is further than this from the gateway's clock is refused (seconds).
HOOK_TOLERANCE = 300
SIGNATURE_HEADER = "X-Prolific-Request-Signature"
TIMESTAMP_HEADER = "X-Prolific-Request-Timestamp"
SUBMISSION_EVENT = "submission.status.change"
HOOK_CONFIRMATION_HEADER = "X-Hook-Secret"


class ProlificError(SotopiaLSError):
    pass


class ProlificRefused(ProlificError):
    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


class ProlificUnavailable(ProlificError):
    pass


class InvalidRejection(ProlificError):
    """A rejection Prolific would refuse; ``fields`` names the fields at fault."""

    def __init__(self, message: str, fields: tuple[str, ...]) -> None:
        super().__init__(message)
        self.fields = fields


class _Wire(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


_Answer = TypeVar("_Answer", bound=_Wire)


def _long_enough(message: str) -> str:
    """The message, if a participant reads at least Prolific's minimum in it
    (``text.visible_length``: invisible characters and padding do not count)."""
    if visible_length(message) < MIN_REJECTION_MESSAGE:
        raise ValueError("too short")
    return message


class Rejection(_Wire):
    """The body of a rejection, checked before it is sent."""

    action: Literal["REJECT"] = "REJECT"
    message: Annotated[str, AfterValidator(_long_enough)]
    rejection_category: RejectionCategory


class Submission(_Wire):
    id: str
    status: str
    participant_id: str | None = Field(
        default=None, validation_alias=AliasChoices("participant_id", "participant"))
    entered_code: str | None = None


class ParticipantGroup(_Wire):
    id: str
    name: str


class _ListedGroup(ParticipantGroup):
    workspace_id: str | None = None
    is_deleted: bool | None = None


class DraftStudy(_Wire):
    """A study as Prolific answers it (``create_study``, ``project_studies``)."""

    id: str
    status: str | None = None
    internal_name: str | None = None


class Subscription(_Wire):
    """A webhook subscription of a workspace (``subscribe``)."""

    id: str
    event_type: str
    target_url: str
    workspace_id: str | None = None


class BulkBonus(_Wire):
    """A bulk bonus Prolific set up (``set_up_bonuses``), not paid yet."""

    id: str


class _Membership(_Wire):
    participant_id: str


class _Link(_Wire):
    href: str | None = None


class _Page(_Wire):
    results: list[dict[str, Any]]
    links: dict[str, _Link | None] = Field(default_factory=dict, alias="_links")


@dataclass(frozen=True)
class Prolific:
    """Prolific's API at ``base_url`` (a stand-in's in tests) with ``token``; ``retries`` and
    the first ``backoff`` wait (seconds) bound the repeats of a request that failed for a
    passing reason."""

    token: str = field(repr=False)
    base_url: str = API_URL
    timeout: float = 30.0
    retries: int = RETRIES
    backoff: float = 1.0
    max_bytes: int = remote.MAX_BYTES

    @classmethod
    def from_environment(cls, token: str | None = None, **settings: Any) -> Prolific:
        """A client with ``token``, else the ``PROLIFIC_TOKEN`` environment variable's."""
        return cls(token if token is not None else os.environ.get(TOKEN_VARIABLE, ""),
                   **settings)

    def __post_init__(self) -> None:
        if not self.token.strip():
            raise ProlificError(f"no Prolific API token: set {TOKEN_VARIABLE}")
        problem = header_problem(self.token, "latin-1")
        if problem:
            raise ProlificError(f"the Prolific API token {problem}")
        keep_secret(self.token)  # cut out of every message of the package from now on
        address = urlsplit(self.base_url)
        if not (address.scheme == "https"
                or address.scheme == "http" and address.hostname in _LOOPBACK):
            raise ProlificError(f"Prolific's API address must be https:// (http:// only on "
                                f"this machine, for a stand-in), not {self.base_url!r}: the "
                                "token would travel in the clear")
        object.__setattr__(self, "base_url", self.base_url.rstrip("/") + "/")

    def approve(self, submission_id: str) -> Submission:
        """Approve one submission; the submission as Prolific answers it."""
        subject = f"submission {submission_id}"
        return _parsed(Submission, self._send(
            "POST", _path("submissions", submission_id, "transition"), subject, "approve",
            {"action": "APPROVE"}), f"approve {subject}")

    def reject(self, submission_id: str, message: str, category: str) -> Submission:
        """Reject one submission, telling the participant ``message`` (at least 100
        characters) under ``category`` (one of ``REJECTION_CATEGORIES``)."""
        subject = f"submission {submission_id}"
        try:
            body = rejection(message, category)
        except ProlificError as exc:
            raise ProlificError(f"reject {subject}: {exc}") from exc
        return _parsed(Submission, self._send(
            "POST", _path("submissions", submission_id, "transition"), subject, "reject",
            body.model_dump()), f"reject {subject}")

    def bulk_approve(self, submission_ids: Sequence[str]) -> None:
        """Approve ``submission_ids``, at most ``BULK_APPROVE_LIMIT`` a request."""
        for start in range(0, len(submission_ids), BULK_APPROVE_LIMIT):
            chunk = list(submission_ids[start:start + BULK_APPROVE_LIMIT])
            self._send("POST", "submissions/bulk-approve/",
                       f"submissions {chunk[0]} … {chunk[-1]} ({len(chunk)})", "bulk-approve",
                       {"submission_ids": chunk}, read=False)

    def submissions(self, study_id: str) -> list[Submission]:
        """Every submission of the study, all pages."""
        action, subject = "list the submissions of", f"study {study_id}"
        return [_parsed(Submission, item, f"{action} {subject}") for item in self._pages(
            _path("studies", study_id, "submissions"), subject, action)]

    def create_participant_group(self, name: str, workspace_id: str,
                                 participant_ids: Sequence[str] = ()) -> ParticipantGroup:
        """A new participant group in the workspace, holding ``participant_ids``; sent once,
        never again after a failure (a lost answer may hide a group made)."""
        subject = f"participant group {name!r} in workspace {workspace_id}"
        return _parsed(ParticipantGroup, self._send(
            "POST", "participant-groups/", subject, "create",
            {"name": name, "workspace_id": workspace_id,
             "participant_ids": list(participant_ids)}, once=True), f"create {subject}")

    def participant_groups(self, workspace_id: str) -> list[ParticipantGroup]:
        """The participant groups of the workspace that are not deleted, all pages."""
        action, subject = "list the participant groups of", f"workspace {workspace_id}"
        groups = [_parsed(_ListedGroup, item, f"{action} {subject}") for item in self._pages(
            "participant-groups/?" + urlencode({"filter[workspace_id]": workspace_id}),
            subject, action)]
        # Checked here too: a server that ignored the filter must not lend another
        # workspace's group.
        return [ParticipantGroup(id=group.id, name=group.name) for group in groups
                if group.workspace_id == workspace_id and not group.is_deleted]

    def add_to_participant_group(self, group_id: str, participant_ids: Sequence[str]) -> None:
        """Add participants to the group; members already in it are ignored by Prolific."""
        self._send("POST", _path("participant-groups", group_id, "participants"),
                   f"participant group {group_id}", "add participants to",
                   {"participant_ids": list(participant_ids)}, read=False)

    def participant_group_members(self, group_id: str) -> list[str]:
        """The participant ids in the group, all pages."""
        action, subject = "list the members of", f"participant group {group_id}"
        pages = self._pages(_path("participant-groups", group_id, "participants"), subject, action)
        return [_parsed(_Membership, item, f"{action} {subject}").participant_id
                for item in pages]

    def create_study(self, body: dict[str, Any]) -> DraftStudy:
        """A draft study made of ``body`` (Prolific's fields); sent once, never again after a
        failure (a lost answer may hide a study made: ``project_studies`` finds it)."""
        subject = f"study {body.get('internal_name')!r}"
        return _parsed(DraftStudy, self._send("POST", "studies/", subject, "create", body,
                                              once=True), f"create {subject}")

    def project_studies(self, project_id: str) -> list[DraftStudy]:
        """The studies of a Prolific project, all pages."""
        action, subject = "list the studies of", f"project {project_id}"
        return [_parsed(DraftStudy, item, f"{action} {subject}") for item in self._pages(
            _path("projects", project_id, "studies"), subject, action)]

    def subscribe(self, workspace_id: str, target_url: str,
                  event_type: str = SUBMISSION_EVENT) -> Subscription:
        """The workspace's subscription of ``target_url`` to ``event_type``: one made before
        is taken, else one is made (sent once) and confirmed with the ``X-Hook-Secret`` its
        answer carries (that secret is not the one calls are signed with). The reference
        answers the making with the list of subscriptions (``results``), its guide with the
        one made: either is read (docs/gateway.md, "Prolific's API")."""
        action, subject = "subscribe", f"{target_url} to {event_type}"
        wanted = (target_url, event_type, workspace_id)
        listed = {"results": list(self._pages("hooks/subscriptions/?" + urlencode(
            {"workspace_id": workspace_id}), subject, action))}
        found = _subscription(listed, wanted, f"{action} {subject}")
        if found is not None:
            return found
        answer = self._send("POST", "hooks/subscriptions/", subject, action,
                            {"event_type": event_type, "target_url": target_url,
                             "workspace_id": workspace_id}, once=True, whole=True)
        made = _subscription(_json(answer, f"{action} {subject}"), wanted, f"{action} {subject}")
        if made is None:
            raise ProlificUnavailable(f"{action} {subject}: Prolific's answer holds no such "
                                      "subscription")
        confirm = answer.headers.get(HOOK_CONFIRMATION_HEADER)
        if not confirm:
            raise ProlificUnavailable(f"{action} {subject}: Prolific's answer has no "
                                      f"{HOOK_CONFIRMATION_HEADER} to confirm it with")
        keep_secret(confirm)
        self._send("POST", _path("hooks", "subscriptions", made.id), subject,
                   "confirm the subscription of", {"secret": confirm}, read=False)
        return made

    def set_up_bonuses(self, study_id: str, amounts: Sequence[tuple[str, int]]) -> BulkBonus:
        """Set up a bulk bonus of ``amounts`` (submission id, hundredths of the currency);
        nothing is paid, so a repeat after a lost answer costs nothing."""
        subject = f"bonuses of study {study_id} ({len(amounts)})"
        lines = "".join(f"{submission},{cents / 100:.2f}\n" for submission, cents in amounts)
        return _parsed(BulkBonus, self._send(
            "POST", "submissions/bonus-payments/", subject, "set up",
            {"study_id": study_id, "csv_bonuses": lines}), f"set up {subject}")

    def pay_bonuses(self, bulk_id: str) -> None:
        """Pay a bulk bonus set up before; sent once, never again (a second call pays twice)."""
        self._send("POST", _path("bulk-bonus-payments", bulk_id, "pay"),
                   f"bulk bonus {bulk_id}", "pay", None, read=False, once=True)

    def _pages(self, path: str, subject: str, action: str) -> Iterator[dict[str, Any]]:
        url: str | None = self.base_url + path
        for _ in range(_MOST_PAGES):
            if url is None:
                return
            page = _parsed(_Page, self._send("GET", url, subject, action), f"{action} {subject}")
            yield from page.results
            url = (page.links.get("next") or _Link()).href
            if url is not None and not url.startswith(self.base_url):
                raise ProlificError(f"{action} {subject}: the next page is at another address "
                                    "than the API's; not followed")
        raise ProlificError(f"{action} {subject}: more than {_MOST_PAGES} pages")

    def _send(self, method: str, path: str, subject: str, action: str,
              body: dict[str, Any] | None = None, read: bool = True, once: bool = False,
              whole: bool = False) -> Any:
        """The JSON answer to one request (None unless ``read``: a call that uses no answer
        takes any success, whatever its body; the ``remote.Answer`` itself when ``whole``),
        sent again on a passing failure unless ``once``."""
        url = path if path.startswith(self.base_url) else self.base_url + path
        try:
            answer = remote.send(
                method, url, body=body, headers={"Authorization": f"Token {self.token}"},
                deadline=self.timeout, retries=0 if once else self.retries, backoff=self.backoff,
                max_bytes=self.max_bytes, name="Prolific")
        except remote.RemoteError as exc:
            # A redirect too: the action went nowhere, and no address but the API's is used.
            raise ProlificUnavailable(f"{action} {subject}: {exc}") from exc
        if answer.status >= 400:
            hint = f" (check {TOKEN_VARIABLE})" if answer.status in (401, 403) else ""
            raise ProlificRefused(f"{action} {subject}: Prolific answered HTTP {answer.status}"
                                  f"{hint}: {self._reason(answer)}", answer.status)
        if whole or not read:
            return answer if whole else None
        return _json(answer, f"{action} {subject}")

    def _reason(self, answer: remote.Answer) -> str:
        """Prolific's reason for a refusal, on one line, without the token."""
        try:
            document = answer.json()
        except (ValueError, RecursionError):
            document = None
        detail: Any = answer.reason or "no reason given"
        if isinstance(document, dict):
            inner = document.get("error")
            source = inner if isinstance(inner, dict) else document
            detail = source.get("detail", source.get("title", detail))
        text = " ".join(" ".join(_texts(detail)).split()).replace(self.token, "***")
        return text if len(text) <= _REASON_LENGTH else text[:_REASON_LENGTH - 1] + "…"


# Prolific's ids are 24 hex digits; anything that could leave its path segment is refused.
_ID = re.compile(r"[A-Za-z0-9_-]+")


def _path(*segments: str) -> str:
    """The API path of ``segments``; an id that is no single path segment is refused."""
    for segment in segments:
        if not _ID.fullmatch(segment):
            raise ProlificError(f"{segment!r} is no Prolific id (letters, digits, - and _)")
    return "/".join(segments) + "/"


def _json(answer: remote.Answer, where: str) -> Any:
    """The answer's JSON ({} for an empty body)."""
    if not answer.body:
        return {}
    try:
        return answer.json()
    except (ValueError, RecursionError) as exc:
        raise ProlificUnavailable(f"{where}: Prolific's answer is no JSON") from exc


def _parsed(model: type[_Answer], document: Any, where: str) -> _Answer:
    """``document`` as ``model``; an answer of another shape is one line naming its field."""
    try:
        return model.model_validate(document)
    except ValidationError as exc:
        error = exc.errors()[0]
        place = ".".join(str(part) for part in error["loc"]) or "the answer"
        raise ProlificUnavailable(
            f"{where}: Prolific's answer is not as documented ({place}: {error['msg']})") from exc


def _subscription(document: Any, wanted: tuple[str, str, str],
                  where: str) -> Subscription | None:
    """The subscription of ``wanted`` (target URL, event type, workspace) in ``document``:
    a list of them (``results``) or one."""
    listed = document["results"] if isinstance(document, dict) and isinstance(
        document.get("results"), list) else [document]
    return next((s for s in (_parsed(Subscription, item, where) for item in listed)
                 if (s.target_url, s.event_type, s.workspace_id) == wanted), None)


def _texts(detail: Any) -> list[str]:
    """The texts in a detail that is a text, a list or an object of them ("field: text")."""
    if isinstance(detail, dict):
        return [f"{key}: {text}" for key, value in detail.items() for text in _texts(value)]
    if isinstance(detail, list):
        return [text for item in detail for text in _texts(item)]
    return [str(detail)]


def rejection(message: str, category: str) -> Rejection:
    """The body of a rejection; what Prolific would refuse in it is one line naming every
    field (checked before anything is sent)."""
    try:
        return Rejection(message=message, rejection_category=category)
    except ValidationError as exc:
        raise InvalidRejection(_invalid_rejection(exc), tuple(
            str(error["loc"][0]) for error in exc.errors())) from exc


def _invalid_rejection(exc: ValidationError) -> str:
    """What is wrong with a rejection, every field on one line."""
    reasons = []
    for error in exc.errors():
        if error["loc"] == ("message",):
            message = error["input"] if isinstance(error["input"], str) else ""
            seen = visible_length(message)
            hidden = (f" (of {len(message)}: invisible characters and repeated spaces do not "
                      "count)" if seen != len(message) else "")
            reasons.append(f"the message to the participant must be a text of at least "
                           f"{MIN_REJECTION_MESSAGE} characters (Prolific's minimum), not "
                           f"{seen}{hidden}")
        else:
            reasons.append(f"rejection category {error['input']!r} is none of Prolific's ("
                           + ", ".join(REJECTION_CATEGORIES) + ")")
    return "; ".join(reasons)


def hook_signature(secret: str, timestamp: str, body: bytes) -> str:
    """Prolific's signature of a call: base64 of HMAC-SHA256(secret, timestamp + body)."""
    digest = hmac.new(secret.encode(), timestamp.encode() + body, hashlib.sha256).digest()
    return base64.b64encode(digest).decode()
