"""The states the gateway stores, as enums of the strings in its database, and the named sets
of them that its queries read: one vocabulary for every room (``store`` holds the tables)."""

from __future__ import annotations

from enum import StrEnum


class SlotState(StrEnum):
    """A slot of an episode (``slots.state``)."""

    FREE = "free"  # never given out, or given back (its rating shelved)
    LEASED = "leased"  # held for one assignment until ``expires_at`` (free again after it)
    DONE = "done"  # its assignment was submitted


class AssignmentState(StrEnum):
    """One participant on one episode (``assignments.state``)."""

    LEASED = "leased"  # given out, not yet submitted
    EXPIRED = "expired"  # its lease ran out and its slot went to another participant
    SAVING = "saving"  # submitted, waiting in the outbox to be saved in Label Studio
    SAVED = "saved"  # saved in Label Studio
    SURPLUS = "surplus"  # submitted when its episode had no slot left: kept here only
    FAILED = "failed"  # Label Studio refused to save it (``save_failures`` says why)
    SHELVED = "shelved"  # failed for good: kept here, its slot free for another participant


class Outcome(StrEnum):
    """How a visit ended (``visits.outcome``; none while it goes on)."""

    COMPLETED = "completed"  # it rated at least one episode
    NO_SLOTS = "no_slots"  # nothing was left for it to rate
    NOT_ADMITTED = "not_admitted"  # refused at admission (a study requiring a round)
    # A qualification round's participant who failed it in another session: given the
    # screen-out code again, nothing to rate.
    SCREENED_OUT = "screened_out"


class PracticeStanding(StrEnum):
    """Where a participant stands in a study's practice step, over their attempts (derived
    from ``practice_attempts``, as the review and the protocol give it)."""

    PRACTISING = "practising"  # attempts left, none passed
    PASSED = "passed"  # an attempt had every rating within the tolerance
    FAILED = "failed"  # every attempt used, none passed: screened out


class SubmissionStatus(StrEnum):
    """A submission's status on Prolific (``prolific_statuses.status``), as its API spells it;
    one it adds later is kept as Prolific spelled it."""

    ACTIVE = "ACTIVE"
    AWAITING_REVIEW = "AWAITING REVIEW"
    APPROVED = "APPROVED"
    REJECTED = "REJECTED"
    RETURNED = "RETURNED"
    TIMED_OUT = "TIMED-OUT"
    SCREENED_OUT = "SCREENED-OUT"


class BonusState(StrEnum):
    """A bulk bonus on Prolific (``bonus_payments.state``): set up, then paid in a second
    call that is not idempotent, so the call is recorded before it is sent."""

    SET_UP = "set_up"  # Prolific holds it, unpaid: the next `study pay --send` pays it
    PAYING = "paying"  # the pay call was sent and no answer came: never sent again
    PAID = "paid"  # Prolific accepted the pay call


# Submissions whose participant left the study on Prolific: their visit's leases are freed.
LEFT_PROLIFIC = (SubmissionStatus.RETURNED, SubmissionStatus.TIMED_OUT)
# Every state of a rating the participant submitted, whether or not it fills a slot or reaches
# Label Studio: what a visit has rated.
SUBMITTED = (AssignmentState.SAVING, AssignmentState.SAVED, AssignmentState.SURPLUS,
             AssignmentState.FAILED, AssignmentState.SHELVED)
# Ratings saved in Label Studio or waiting to be: those an export will hold.
IN_EXPORT = (AssignmentState.SAVING, AssignmentState.SAVED)
# Ratings that are, or are to be, annotations in Label Studio: those an export will hold, and
# those Label Studio refused (``study retry``); surplus and shelved ones stay in the gateway's
# database.
FOR_LABEL_STUDIO = (*IN_EXPORT, AssignmentState.FAILED)
