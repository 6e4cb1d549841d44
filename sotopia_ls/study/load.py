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
    """Participant requests in progress, and when the last one began (``time.monotonic``)."""

    in_flight: int = 0
    last_began: float = field(default_factory=time.monotonic)
    # When each request in progress began, by the ticket ``began`` gave it.
    _since: dict[int, float] = field(default_factory=dict, repr=False)
    _tickets: itertools.count = field(default_factory=itertools.count, repr=False)

    def began(self) -> int:
        """A request began; its ticket, for ``ended``."""
        self.in_flight += 1
        self.last_began = time.monotonic()
        ticket = next(self._tickets)
        self._since[ticket] = self.last_began
        return ticket

    def ended(self, ticket: int) -> None:
        self.in_flight -= 1
        self._since.pop(ticket, None)

    def longest_wait(self) -> float:
        """Seconds since the oldest request in progress began (0 with none): a participant's
        request is milliseconds of work, so a long one is waiting for a thread or a database
        connection."""
        return time.monotonic() - min(self._since.values(), default=time.monotonic())
