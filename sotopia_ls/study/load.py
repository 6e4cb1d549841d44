"""How busy this gateway process is with participants: the overload guard keeps the count, the
writer into Label Studio reads it to stay out of their way.

One ``Load`` per gateway process, made with the gateway (``prepare_gateway``). It is touched
only on the process's event loop (the app's middleware and the writer's tasks), so it needs no
lock.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field


@dataclass
class Load:
    """Participant requests in progress, and when the last one began (``time.monotonic``)."""

    in_flight: int = 0
    last_began: float = field(default_factory=time.monotonic)

    def began(self) -> None:
        self.in_flight += 1
        self.last_began = time.monotonic()

    def ended(self) -> None:
        self.in_flight -= 1
