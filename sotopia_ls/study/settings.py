"""The study file: what one crowd study is, written by ``sotopia-ls study init`` and validated by
``StudyFile``. It holds no secret (keys and the database's password come from the environment,
README.md, "State"), yet is written at mode 0600: its completion code claims a payment.
"""

from __future__ import annotations

import os
from math import log2
from pathlib import Path
from string import ascii_letters, digits
from typing import Literal
from urllib.parse import parse_qsl, urlencode, urlsplit

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from ..errors import StudyError, keep_secret
from ..folders import write_file
from ..scores import DISAGREEMENT_THRESHOLD
from .screening.flags import FlagThresholds

STUDY_FILE = Path("study.json")
SECRET_ENV = "SOTOPIA_LS_STUDY_SECRET"
DASHBOARD_TOKEN_ENV = "SOTOPIA_LS_DASHBOARD_TOKEN"
DATABASE_ENV = "SOTOPIA_LS_STUDY_DATABASE"
# Prolific's page that completes a submission with the code in ``cc``.
PROLIFIC_COMPLETE = "https://app.prolific.com/submissions/complete"
# The session key signs every participant's cookie: shorter or less random keys are refused.
MIN_SECRET_LENGTH = 32
MIN_SECRET_BITS = 128
# Fewer distinct characters than this in 32 or more is no random key: a random hex key of 32
# digits has fewer about once in 30 million.
MIN_SECRET_DISTINCT = 8
_BASE64 = ascii_letters + digits
_PRINTABLE_ASCII = "".join(map(chr, range(ord(" "), ord("~") + 1)))
# Smallest first: a key is credited with the first that holds all its characters.
_KEY_ALPHABETS = tuple(map(frozenset, (
    digits + "abcdef", digits + "ABCDEF", _BASE64 + "-_", _BASE64 + "+/=", _PRINTABLE_ASCII)))
MAKE_SECRET = "python3 -c 'import secrets; print(secrets.token_urlsafe(32))'"
PASSWORD_PLACES = ("PGPASSWORD or a ~/.pgpass file of mode 0600 (read by PostgreSQL's client), "
                   f"or the whole URL in {DATABASE_ENV}")
STUDY_FILE_MODE = 0o600
_CODE = r"^[A-Za-z0-9_-]{1,64}$"
_NAME = r"^[a-z0-9][a-z0-9-]{2,40}$"
# Sotopia-pi's qualification: every rating within 2 points of the researchers' reference.
QUALIFYING_DISTANCE = 2
# Hidden gold above half of the assignments would be most of a participant's work.
MOST_GOLD = 0.5
# The raters of an episode chosen by ``third_rater_share``: the fewest the alternative
# annotator test uses (one left out, two others).
THIRD = 3


def secret_bits(key: str) -> float:
    """The randomness ``key`` can hold, in bits: the length of its shortest repeating unit
    (``'ab' * 32`` counts as ``'ab'``) times log2 of the smallest usual key alphabet holding
    every character of the key (hex, base64url, base64, printable ASCII; else as many
    characters as it has distinct ones). A ``secrets.token_hex(16)`` key scores 128."""
    # A unit counts when it repeats at least twice: any key whose last character is its first
    # "repeats" every len - 1 characters.
    period = next((p for p in range(1, len(key) // 2 + 1) if key[p:] == key[:-p]), len(key))
    used = set(key)
    size = next((len(alphabet) for alphabet in _KEY_ALPHABETS if used <= alphabet), len(used))
    return period * log2(size)


def check_secret(key: str, env: str, what: str = "session key") -> str:
    """``key`` (the ``what``) when it is at least ``MIN_SECRET_LENGTH`` characters, at least
    ``MIN_SECRET_BITS`` bits (``secret_bits``) and at least ``MIN_SECRET_DISTINCT`` distinct
    characters; else one line naming ``env`` and the fix."""
    if (len(key) < MIN_SECRET_LENGTH or secret_bits(key) < MIN_SECRET_BITS
            or len(set(key)) < MIN_SECRET_DISTINCT):
        raise StudyError(
            f"{env} must hold a random {what}: at least {MIN_SECRET_LENGTH} characters "
            f"and {MIN_SECRET_BITS} bits (32 random hex digits hold 128), not spaces "
            f"nor a character or a pattern repeated; make one with: "
            f"export {env}=$({MAKE_SECRET})"
        )
    return key


def without_password(url: str) -> str:
    """``url`` without a password: neither ``user:password@`` nor a ``password`` parameter."""
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    kept = [(name, value) for name, value in query if name.lower() != "password"]
    if parts.password is None and kept == query:
        return url
    user, _, host = parts.netloc.rpartition("@")
    login = user.partition(":")[0]
    return parts._replace(netloc=f"{login}@{host}" if login else host,
                          query=urlencode(kept)).geturl()


def completion_url(code: str, base: str = PROLIFIC_COMPLETE) -> str:
    """Prolific's completion link for ``code``."""
    return f"{base}?cc={code}"


def _web_address(url: str | None) -> str | None:
    if url is not None and urlsplit(url).scheme not in ("https", "http"):
        raise ValueError(f"{url!r} is not an http(s) address")
    return url


class Qualification(BaseModel):
    """What makes a study a qualification round: every episode it serves is a gold episode
    (one with reference ratings), and a participant who completes it is scored. A passer gets
    the completion code and joins the study's allow-list; anyone else gets the screen-out code
    and sees no score."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_distance: int = Field(QUALIFYING_DISTANCE, ge=0, le=20, description=(
        "A participant passes when every rating is within this many points of the reference."))
    screen_out_code: str = Field(pattern=_CODE, description=(
        "Prolific code for a participant who completes the round without passing."))
    screen_out_url: str = Field(description="Where such a participant goes.")
    screen_out_reward: int | None = Field(None, ge=1, description=(
        "What Prolific pays a participant given the screen-out code, in hundredths of the "
        "reward's currency (its fixed screen-out payment); none: reviewed like a submission."))

    _address = field_validator("screen_out_url")(_web_address)


class Practice(BaseModel):
    """A practice step before the first episode: the participant rates a practice episode
    (one with reference ratings and rationales) and sees, per dimension and agent, how far
    they were, the reference's rationale and, where off by more than ``max_distance``, the
    rubric's guidance and the seed example of their mistake. Practice ratings are no data."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    references: str = Field(description=(
        "CSV in the oTree layout holding the practice episodes' reference ratings and "
        "rationales (pk: the episode id; believability_1, believability_reasoning_1, …)."))
    attempts: int = Field(2, ge=1, le=10, description="Attempts a participant is given.")
    max_distance: int = Field(QUALIFYING_DISTANCE, ge=0, le=20, description=(
        "An attempt passes when every rating is within this many points of the reference; "
        "feedback names the ratings farther off."))
    screen_out_code: str = Field(pattern=_CODE, description=(
        "Prolific code for a participant who fails every attempt."))
    screen_out_url: str = Field(description="Where such a participant goes.")
    screen_out_reward: int | None = Field(None, ge=1, description=(
        "What Prolific pays a participant given the screen-out code, in hundredths of the "
        "reward's currency (its fixed screen-out payment); none: reviewed like a submission."))

    _address = field_validator("screen_out_url")(_web_address)


class Adaptive(BaseModel):
    """Adaptive extra raters: an episode whose ratings disagree gets one more slot, up to
    ``max_raters`` (k + 1 when not given), until the running agreement is narrow enough."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    threshold: int = Field(DISAGREEMENT_THRESHOLD, ge=0, le=20, description=(
        "An episode's ratings disagree when two differ by more than this on any dimension "
        "and agent."))
    max_raters: int = Field(ge=2, le=21, description=(
        "Most raters an episode may get, its added slots included (more than k)."))
    target_width: float | None = Field(None, gt=0, description=(
        "Stop adding slots once every dimension's alpha interval in the latest agreement "
        "snapshot is narrower than this; none: never stop for the agreement."))


# Prolific pays participants in GBP or USD, in the currency of the researcher's account.
Currency = Literal["GBP", "USD"]


class Reward(BaseModel):
    """What Prolific pays a participant for one submission (a visit of the gateway), as
    Prolific's API takes a study's reward: a whole number of the currency's hundredths."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    cents: int = Field(ge=1, description=(
        "The reward per submission in hundredths of the currency (pence, cents)."))
    currency: Currency = Field(description="The currency of the reward.")


class OnProlific(BaseModel):
    """The study's draft on Prolific, made by ``study publish --send``: a rerun creates none."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    study_id: str = Field(pattern=_CODE, description="The Prolific study's id.")
    project_id: str = Field(pattern=_CODE, description="The Prolific project it is in.")


class StudyFile(BaseModel):
    """One study: its project, how episodes are shared out, and how participants leave."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=_NAME,
                      description="The study's name in its participant link: /s/<name>.")
    project: int = Field(ge=1, description="Id of the Label Studio project holding the episodes.")
    title: str = Field("Rate social interactions", min_length=1, max_length=120,
                       description="Shown to participants as the page title.")
    raters_per_episode: int = Field(2, ge=1, le=20,
                                    description="k: distinct participants who rate each episode.")
    episodes_per_participant: int = Field(
        2, ge=1, le=100, description="m: episodes a participant rates in one Prolific session."
    )
    lease_minutes: float = Field(30, gt=0, le=24 * 60,
                                 description="How long an episode is held for a participant.")
    completion_code: str = Field(pattern=_CODE, description="Prolific completion code.")
    completion_url: str = Field(description="Where a participant goes when done.")
    no_slots_code: str | None = Field(None, pattern=_CODE, description=(
        "Code for a participant who arrives when nothing is left to rate (none: no code)."))
    no_slots_url: str | None = Field(None, description="Where such a participant goes.")
    database: str = Field(description="SQLAlchemy URL of the gateway's own database.")
    secret_env: str = Field(SECRET_ENV, pattern=r"^[A-Z_][A-Z0-9_]*$",
                            description="Environment variable holding the session key.")
    qualification: Qualification | None = Field(None, description=(
        "Set: this study is a qualification round, serving gold episodes only."))
    requires_qualification: str | None = Field(None, pattern=_NAME, description=(
        "Name of a qualification study on the same database: only its passers are admitted."))
    gold_share: float = Field(0, ge=0, le=MOST_GOLD, description=(
        "Share of a participant's assignments that are gold episodes, hidden among the others."))
    gold_references: str | None = Field(None, description=(
        "CSV in the oTree layout holding the reference ratings of the gold episodes (its "
        "``pk`` the episode id); none: the project's ground-truth annotations."))
    flags: FlagThresholds = Field(default_factory=FlagThresholds,
                                  description="Thresholds of the quality flags.")
    dashboard_token_env: str = Field(
        DASHBOARD_TOKEN_ENV, pattern=r"^[A-Z_][A-Z0-9_]*$",
        description="Environment variable holding the researcher dashboard's token (unset: "
        "no dashboard).")
    third_rater_share: float = Field(0, ge=0, le=1, description=(
        "Share of the episodes rated by three participants rather than k (k below 3): the "
        "episodes the alternative annotator test can use."))
    adaptive: Adaptive | None = Field(None, description=(
        "Set: an episode whose ratings disagree gets an extra rater (``Adaptive``)."))
    practice: Practice | None = Field(None, description=(
        "Set: a practice episode with feedback comes before the first episode (``Practice``)."))
    reward: Reward | None = Field(None, description=(
        "Prolific's reward per submission, for the pay per hour `study status` and `study "
        "review` estimate; none: no estimate."))
    prolific: OnProlific | None = Field(None, description=(
        "The study on Prolific, once `study publish --send` made it; none: not yet."))

    _addresses = field_validator("completion_url", "no_slots_url")(_web_address)

    @model_validator(mode="before")
    @classmethod
    def _one_more_rater(cls, data: object) -> object:
        """``adaptive.max_raters`` defaults to k + 1: one extra rater per episode."""
        if not isinstance(data, dict) or not isinstance(data.get("adaptive"), dict):
            return data
        adaptive = data["adaptive"]
        k = data.get("raters_per_episode", cls.model_fields["raters_per_episode"].default)
        if "max_raters" in adaptive or not isinstance(k, int):
            return data  # a k that is no number is refused as such
        return {**data, "adaptive": {**adaptive, "max_raters": k + 1}}

    @model_validator(mode="after")
    def _one_kind(self) -> StudyFile:
        if self.qualification is not None and self.gold_share:
            raise ValueError("a qualification round serves gold episodes only: it takes no "
                             "gold_share")
        if self.qualification is not None and self.requires_qualification:
            raise ValueError("a qualification round cannot itself require a qualification")
        if self.requires_qualification == self.name:
            raise ValueError("a study cannot require itself as its qualification")
        if self.adaptive is not None and self.qualification is not None:
            raise ValueError("a qualification round serves gold episodes only: it adds no "
                             "slots (adaptive)")
        if self.third_rater_share and self.qualification is not None:
            raise ValueError("a qualification round serves gold episodes only: it takes no "
                             "third_rater_share")
        if self.third_rater_share and self.raters_per_episode >= THIRD:
            raise ValueError(f"third_rater_share does nothing when every episode has "
                             f"{self.raters_per_episode} raters (raters_per_episode)")
        paid = [part for part in (self.qualification, self.practice)
                if part is not None and part.screen_out_reward]
        if paid and self.reward is None:
            raise ValueError("a screen_out_reward is in hundredths of the reward's currency: "
                             "give the reward too")
        if len({part.screen_out_code for part in paid}) > 1:
            raise ValueError("Prolific pays a fixed screen-out on one code only: give the "
                             "practice and the qualification round one screen-out code, or "
                             "one screen_out_reward")
        if self.adaptive is not None and self.adaptive.max_raters <= self.raters_per_episode:
            raise ValueError(f"adaptive.max_raters must be more than raters_per_episode "
                             f"({self.raters_per_episode}): it counts the added slots too")
        return self

    @classmethod
    def from_options(
        cls, *, name: str, completion_code: str, completion_link: str | None = None,
        no_slots_code: str | None = None, no_slots_link: str | None = None,
        database: str | None = None, is_qualification: bool = False,
        screen_out_code: str | None = None, screen_out_link: str | None = None,
        max_distance: int | None = None, gold_share: float = 0,
        gold_references: Path | None = None, is_adaptive: bool = False,
        disagreement_threshold: int | None = None, max_raters: int | None = None,
        target_width: float | None = None, reward: float | None = None,
        currency: str | None = None, practice_references: Path | None = None,
        practice_attempts: int | None = None, practice_distance: int | None = None,
        practice_screen_out_code: str | None = None, screen_out_reward: float | None = None,
        practice_screen_out_reward: float | None = None, **fields: object,
    ) -> StudyFile:
        """The study ``study init``'s options describe: Prolific's links for codes given
        without one, the default database (its password left out), the options of a
        qualification round or of adaptive raters checked; an option that does nothing in the
        combination given is one line naming it."""
        qualification = _qualification(is_qualification, screen_out_code, screen_out_link,
                                       max_distance, screen_out_reward)
        adaptive = _adaptive(is_adaptive, disagreement_threshold, max_raters, target_width)
        if gold_references is not None and not (is_qualification or gold_share):
            raise StudyError("--gold-references needs --qualification or --gold-share: "
                             "without either the study serves no gold episode")
        return new_study(
            name=name, completion_code=completion_code,
            completion_url=completion_link or completion_url(completion_code),
            no_slots_code=no_slots_code,
            no_slots_url=no_slots_link or (completion_url(no_slots_code) if no_slots_code
                                           else None),
            database=without_password(database or default_database(name)),
            qualification=qualification, gold_share=gold_share,
            gold_references=str(gold_references.resolve()) if gold_references else None,
            adaptive=adaptive, reward=_reward(reward, currency),
            practice=_practice(practice_references, practice_attempts, practice_distance,
                               practice_screen_out_code, practice_screen_out_reward), **fields)

    @property
    def uses_gold(self) -> bool:
        """Whether the study serves gold episodes (a qualification, or hidden gold)."""
        return self.qualification is not None or self.gold_share > 0

    @field_validator("database")
    @classmethod
    def _no_password(cls, url: str) -> str:
        # The message never quotes the URL: it holds the password.
        if without_password(url) != url:
            raise ValueError(f"a database password does not belong in the study file: remove "
                             f"it and give it to the gateway in {PASSWORD_PLACES}")
        return url

    @property
    def lease_seconds(self) -> float:
        return self.lease_minutes * 60

    def secret(self) -> str:
        """The session key from ``secret_env``; refused when unset or weak, with the fix."""
        value = os.environ.get(self.secret_env, "")
        keep_secret(value)
        return check_secret(value, self.secret_env)

    def dashboard_token(self) -> str | None:
        """The researcher dashboard's token from ``dashboard_token_env``; None when unset (no
        dashboard), refused like the session key when weak."""
        value = os.environ.get(self.dashboard_token_env, "")
        if not value:
            return None
        keep_secret(value)
        return check_secret(value, self.dashboard_token_env, "token")


def _reward(amount: float | None, currency: str | None) -> Reward | None:
    """The study file's reward: ``amount`` of ``currency`` in hundredths, as Prolific's API
    takes it."""
    if amount is None and currency is None:
        return None
    if amount is None or currency is None:
        raise StudyError("--reward and --currency go together: the reward per submission and "
                         "its currency (your Prolific account's)")
    return Reward(cents=_cents(amount, "--reward"), currency=currency)


def _cents(amount: float, option: str) -> int:
    """``amount`` of a currency in its hundredths; more than two decimals is refused."""
    cents = round(amount * 100)
    if abs(amount * 100 - cents) > 1e-6:
        raise StudyError(f"{option}: {amount} has more than two decimals")
    return cents


def _qualification(is_qualification: bool, screen_out_code: str | None,
                   screen_out_link: str | None, max_distance: int | None,
                   screen_out_reward: float | None) -> dict | None:
    """The study file's ``qualification`` from ``study init``'s options, or None for a study
    that is no qualification round; options of a round given without ``--qualification``, or
    a round without its screen-out code, are one line naming the option."""
    if not is_qualification:
        given = [option for option, value in (("--screen-out-code", screen_out_code),
                                              ("--screen-out-url", screen_out_link),
                                              ("--max-distance", max_distance),
                                              ("--screen-out-reward", screen_out_reward))
                 if value is not None]
        if given:
            raise StudyError(f"{given[0]} applies to a qualification round only: add "
                             "--qualification")
        return None
    if screen_out_code is None:
        raise StudyError("--qualification needs --screen-out-code: the code for participants "
                         "who complete the round without passing")
    rule = {} if max_distance is None else {"max_distance": max_distance}
    if screen_out_reward is not None:
        rule["screen_out_reward"] = _cents(screen_out_reward, "--screen-out-reward")
    return {"screen_out_code": screen_out_code,
            "screen_out_url": screen_out_link or completion_url(screen_out_code), **rule}


def _practice(references: Path | None, attempts: int | None, max_distance: int | None,
              screen_out_code: str | None, screen_out_reward: float | None) -> dict | None:
    """The study file's ``practice`` from ``study init``'s options (None without
    ``--practice``); its options given without it, or it without its screen-out code, are one
    line naming the option."""
    options = (("--practice-attempts", "attempts", attempts),
               ("--practice-distance", "max_distance", max_distance),
               ("--practice-screen-out-code", "screen_out_code", screen_out_code),
               ("--practice-screen-out-reward", "screen_out_reward", screen_out_reward))
    given = {field: value for _, field, value in options if value is not None}
    if references is None:
        if given:
            option = next(option for option, field, _ in options if field in given)
            raise StudyError(f"{option} applies to a practice step only: add --practice")
        return None
    if screen_out_code is None:
        raise StudyError("--practice needs --practice-screen-out-code: the code for "
                         "participants who fail every practice attempt")
    if screen_out_reward is not None:
        given["screen_out_reward"] = _cents(screen_out_reward, "--practice-screen-out-reward")
    return {"references": str(references.resolve()),
            "screen_out_url": completion_url(screen_out_code), **given}


def _adaptive(is_adaptive: bool, threshold: int | None, max_raters: int | None,
              target_width: float | None) -> dict | None:
    """The study file's ``adaptive`` from ``study init``'s options (None without
    ``--adaptive``); its options given without it are one line naming the option."""
    options = [("--disagreement-threshold", "threshold", threshold),
               ("--max-raters", "max_raters", max_raters),
               ("--target-width", "target_width", target_width)]
    given = [(option, field, value) for option, field, value in options if value is not None]
    if not is_adaptive and given:
        raise StudyError(f"{given[0][0]} applies to adaptive extra raters only: add --adaptive")
    return {field: value for _, field, value in given} if is_adaptive else None


def default_database(name: str) -> str:
    """SQLite in ``var/study/<name>.sqlite3`` of the current folder."""
    return f"sqlite:///var/study/{name}.sqlite3"


def read_study(path: Path) -> StudyFile:
    """The study file at ``path``; an unreadable or invalid one names the field and the fix."""
    try:
        return StudyFile.model_validate_json(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise StudyError(f"cannot read the study file {path}: {error.strerror}; "
                         "write one with `sotopia-ls study init`") from None
    except ValidationError as error:
        raise _invalid(error, f"study file {path}") from None


def new_study(**fields: object) -> StudyFile:
    """A study from its fields; a bad value is refused with the field named."""
    try:
        return StudyFile.model_validate(fields)
    except ValidationError as error:
        raise _invalid(error, "study") from None


def _invalid(error: ValidationError, what: str) -> StudyError:
    first = error.errors(include_url=False)[0]
    where = ".".join(map(str, first["loc"])) or "the file"
    return StudyError(f"{what}: {where}: {first['msg']}")


def write_study(study: StudyFile, path: Path, *, overwrite: bool = False) -> Path:
    """Write ``study`` to ``path`` (mode 0600); an existing file is kept unless ``overwrite``."""
    if path.exists() and not overwrite:
        raise StudyError(f"{path} exists; pass --force to replace it")
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_file(path, study.model_dump_json(indent=2) + "\n", mode=STUDY_FILE_MODE)
