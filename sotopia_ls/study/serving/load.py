"""How busy this gateway process is with participants: the overload guard keeps the count, the
writer into Label Studio reads it to stay out of their way.

One ``Load`` per gateway process, made with the gateway (``prepare_gateway``). It is touched
only on the process's event loop (the app's middleware and the writer's tasks), so it needs no
lock.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field


@dataclass
class Load:
    """Participant requests in progress, and when the last one began (``time.monotonic``).

    A request is also timed from when it has been read whole (its body in: a participant slow
    to send theirs costs the process nothing) until its answer starts: the process's own wait
    for a thread and a database connection, and its work."""

    in_flight: int = 0
    last_began: float = field(default_factory=time.monotonic)
    _read_at: dict[int, float] = field(default_factory=dict, repr=False)  # by ticket
    _tickets: itertools.count = field(default_factory=itertools.count, repr=False)

    def began(self) -> int:
        """A request began; its ticket for the calls below."""
        self.in_flight += 1
        self.last_began = time.monotonic()
        return next(self._tickets)

    def read(self, ticket: int) -> None:
        self._read_at.setdefault(ticket, time.monotonic())

    def answered(self, ticket: int) -> None:
        self._read_at.pop(ticket, None)

    def ended(self, ticket: int) -> None:
        self.in_flight -= 1
        self.answered(ticket)

    def longest_wait(self) -> float:
        """Seconds the oldest request read and not yet answered has waited (0 with none): a
        participant's request is milliseconds of work, so a long one is waiting for a thread
        or a database connection, and a new one would wait behind it."""
        return time.monotonic() - min(self._read_at.values(), default=time.monotonic())
