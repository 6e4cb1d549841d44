"""Start a local Label Studio server (SQLite, loopback only) for the demo and the tests.

The first start of a fresh data directory creates the admin user and, with
``--enable-legacy-api-token``, the API token given here; later starts reuse both. While
``sotopia-ls up`` serves the demo, its data folder also holds the server's address, so that
commands run in the same folder find the demo's address and key themselves (``demo_login``).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import httpx

from ..errors import LabelStudioError
from ..folders import write_file

DEFAULT_HOST = "127.0.0.1"
# The demo's data folder, relative to the current folder, unless the environment names another.
DEFAULT_DATA_DIR = Path("var") / "label-studio"
DATA_DIR_ENV = "SOTOPIA_LS_DATA_DIR"
CREDENTIALS_FILE = "credentials.json"
ADDRESS_FILE = "address.json"
# The demo's first user owns the organization and its projects: Label Studio's admin.
DEMO_OWNER = "owner@example.com"
# Label Studio's settings for every run here: no error reports, no analytics, and no request
# to PyPI for a newer release at each start (a network round trip, and its answer parsed).
QUIET = {"SENTRY_DSN": "", "FRONTEND_SENTRY_DSN": "", "COLLECT_ANALYTICS": "0",
         "LATEST_VERSION_CHECK": "false"}


@dataclass(frozen=True)
class Credentials:
    username: str
    password: str
    api_key: str = field(repr=False)

    @classmethod
    def load(cls, path: Path) -> Credentials:
        """The demo login kept in its data folder (whatever user name it was made with)."""
        try:
            return cls(**json.loads(path.read_text(encoding="utf-8")))
        except (ValueError, TypeError, UnicodeDecodeError) as error:
            raise LabelStudioError(
                f"{path} is not a login file ({type(error).__name__}); restore it, or remove "
                "the whole data folder to start afresh"
            ) from None

    @classmethod
    def load_or_create(cls, path: Path) -> Credentials:
        """Reuse the demo login kept beside its data directory, or make a new one (readable by
        its owner only)."""
        if path.exists():
            return cls.load(path)
        creds = cls(
            username=DEMO_OWNER,
            password=secrets.token_urlsafe(12),
            api_key=secrets.token_hex(20),
        )
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as out:
            out.write(json.dumps(creds.__dict__))
        return creds


@dataclass(frozen=True)
class DemoLogin:
    url: str
    api_key: str = field(repr=False)
    credentials_file: Path


def demo_data_dir() -> Path:
    """Where ``sotopia-ls up`` keeps the demo when not told otherwise."""
    return Path(os.environ.get(DATA_DIR_ENV) or DEFAULT_DATA_DIR)


def demo_login(data_dir: Path | None = None) -> DemoLogin | None:
    """The address and key of the demo ``sotopia-ls up`` serves from ``data_dir`` (by default
    ``demo_data_dir()``), or None when no demo is served from there; one whose address
    answers nothing (its ``up`` was killed) is refused in one line."""
    folder = data_dir or demo_data_dir()
    address = folder / ADDRESS_FILE
    if not address.is_file():
        return None
    try:
        url = json.loads(address.read_text(encoding="utf-8"))["url"]
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        return None  # left by an `up` killed while writing it: no demo to trust
    # An `up` killed at once (SIGKILL) leaves its address behind: ask before trusting it.
    if not answers_up(url, timeout=1):
        raise LabelStudioError(
            f"the demo's Label Studio at {url} (named in {address}) is not running: start it "
            "with scripts/demo, or pass --url and --api-key")
    credentials = folder / CREDENTIALS_FILE
    return DemoLogin(url, Credentials.load(credentials).api_key, credentials)


@cache
def tls() -> ssl.SSLContext:
    """httpx's default TLS context (certifi's CA bundle), made once: each new client, server
    poll and SDK client would otherwise read the whole bundle again."""
    return httpx.create_ssl_context()


def answers_up(url: str, *, timeout: float) -> bool:
    """Whether a Label Studio at ``url`` answers its ``/health`` with UP."""
    try:
        return httpx.get(f"{url}/health", timeout=timeout, verify=tls()).json().get(
            "status") == "UP"
    except (httpx.HTTPError, ValueError, AttributeError):
        return False


@contextmanager
def announced(data_dir: Path, url: str) -> Iterator[None]:
    """While the block runs, ``demo_login(data_dir)`` finds the server at ``url``."""
    address = write_file(data_dir / ADDRESS_FILE, json.dumps({"url": url}))
    try:
        yield
    finally:
        address.unlink(missing_ok=True)


@dataclass
class LocalServer:
    url: str
    credentials: Credentials
    process: subprocess.Popen[bytes]
    log_path: Path

    def stop(self) -> None:
        """Stop Label Studio and every process it started (it runs in a session of its own)."""
        if self.process.poll() is None:
            _signal_group(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                _signal_group(self.process.pid, signal.SIGKILL)
                self.process.wait()

    def __enter__(self) -> LocalServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _signal_group(pid: int, number: int) -> None:
    try:
        os.killpg(pid, number)
    except ProcessLookupError:
        pass


def port_in_use(host: str, port: int) -> bool:
    """Whether something already listens on ``host:port``."""
    with socket.socket() as sock:
        sock.settimeout(1)
        return sock.connect_ex((host, port)) == 0


def free_port(host: str = DEFAULT_HOST) -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def label_studio_command() -> str:
    """The ``label-studio`` command; the one installed beside this interpreter wins, so a venv
    works without activation."""
    beside = Path(sys.executable).parent / "label-studio"
    executable = str(beside) if beside.exists() else shutil.which("label-studio")
    if executable is None:
        raise LabelStudioError(
            "the label-studio command is not installed; install it with "
            "pip install 'sotopia-label-studio[server]'"
        )
    return executable


def start(
    data_dir: Path,
    credentials: Credentials,
    *,
    host: str = DEFAULT_HOST,
    port: int | None = None,
    allow_local_ml_backends: bool = False,
    task_lock_minutes: int | None = None,
    extra_env: dict[str, str] | None = None,
    timeout: float = 300.0,
) -> LocalServer:
    """Start ``label-studio`` on ``host:port`` and wait until ``/health`` answers UP.

    Signup without the organization's invite link is closed. ``allow_local_ml_backends``
    lifts Label Studio's SSRF guard so it may call a backend on 127.0.0.1 (for a local
    pre-annotation backend); ``task_lock_minutes`` is how long a task an annotator opened in
    the label stream stays reserved for them (Label Studio's default: a day). The data folder
    is made private to the user: Label Studio keeps the API token in plain text there.
    """
    executable = label_studio_command()
    port = port or free_port(host)
    if port_in_use(host, port):
        # Whatever answers there would be sent the key: never talk to a server we did not start.
        raise LabelStudioError(f"{host}:{port} is already in use by another program; stop it "
                               "or pass another --port")
    data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    data_dir.chmod(0o700)
    env = {
        **os.environ,
        "LABEL_STUDIO_BASE_DATA_DIR": str(data_dir),
        "LABEL_STUDIO_USERNAME": credentials.username,
        "LABEL_STUDIO_PASSWORD": credentials.password,
        "LABEL_STUDIO_USER_TOKEN": credentials.api_key,
        **QUIET,
        "LABEL_STUDIO_DISABLE_SIGNUP_WITHOUT_LINK": "true",
        **(extra_env or {}),
    }
    if allow_local_ml_backends:
        env |= {"ML_BLOCK_LOCAL_IP": "false", "USE_DEFAULT_BANNED_SUBNETS": "false"}
    if task_lock_minutes is not None:
        env["LABEL_STUDIO_TASK_LOCK_TTL"] = str(task_lock_minutes * 60)
    log_path = data_dir / "server.log"
    with log_path.open("ab") as log:
        process = subprocess.Popen(
            [
                executable, "start", "--no-browser",
                "--internal-host", host, "--port", str(port),
                "--enable-legacy-api-token",
            ],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            # A session of its own: stop() ends the whole group, and a Ctrl-C meant for the
            # caller reaches Label Studio only through the caller's own shutdown.
            start_new_session=True,
        )
    server = LocalServer(f"http://{host}:{port}", credentials, process, log_path)
    try:
        _wait_until_up(server, timeout)
    except BaseException:
        server.stop()
        raise
    return server


def _wait_until_up(server: LocalServer, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise LabelStudioError(
                f"label-studio exited with code {server.process.returncode}; "
                f"see {server.log_path}"
            )
        if answers_up(server.url, timeout=2):
            return
        time.sleep(1)
    raise LabelStudioError(f"label-studio did not answer on {server.url} within {timeout:.0f} s")
