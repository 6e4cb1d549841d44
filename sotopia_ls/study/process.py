"""``sotopia-ls study serve`` as a child process, for the tests and the burst benchmark.

The gateway runs exactly as a researcher runs it (uvicorn, its own process); ``start_gateway``
returns once ``/health`` answers, and ``kill`` ends it with SIGKILL, as a machine dying would.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from ..errors import StudyError
from ..labelstudio.server import free_port, tls

SOTOPIA_LS = Path(sys.executable).with_name("sotopia-ls")


@dataclass
class GatewayProcess:
    url: str
    process: subprocess.Popen[bytes]
    log: Path

    def kill(self) -> None:
        """SIGKILL: no shutdown handler runs."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.kill()


def start_gateway(study_file: Path, env: Mapping[str, str], *, port: int | None = None,
                  timeout: float = 120.0,
                  program: Sequence[str] = (str(SOTOPIA_LS),)) -> GatewayProcess:
    """The gateway of ``study_file`` on 127.0.0.1 and ``port`` (a free one by default), its
    output in ``gateway-<port>.log`` beside the study file; ``env`` carries Label Studio's
    address and key and the session key. ``program`` is the ``sotopia-ls`` that runs it (by
    default this environment's; a test passes another install's)."""
    port = port or free_port()
    log = study_file.with_name(f"gateway-{port}.log")
    with log.open("ab") as out:
        process = subprocess.Popen(
            [*program, "study", "serve", "--study", str(study_file), "--port", str(port)],
            env=dict(env), stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        )
    running = GatewayProcess(f"http://127.0.0.1:{port}", process, log)
    deadline = time.monotonic() + timeout
    with httpx.Client(timeout=2, verify=tls()) as http:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise StudyError(f"the gateway exited with code {process.returncode}; "
                                 f"see {log}")
            try:
                if http.get(f"{running.url}/health").status_code == 200:
                    return running
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
    running.stop()
    raise StudyError(f"the gateway did not answer within {timeout:.0f} s; see {log}")


@contextmanager
def gateway(study_file: Path, env: Mapping[str, str]) -> Iterator[GatewayProcess]:
    running = start_gateway(study_file, env)
    try:
        yield running
    finally:
        running.stop()
