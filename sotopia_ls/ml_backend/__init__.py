"""The pre-annotation backend: a label-studio-ml 1.0.9 model serving Sotopia judgements.

``model`` and ``_wsgi`` run in the backend's own environment and import only the pure-pydantic
core; ``commands`` runs beside label-studio-sdk. This module, shared by both, needs only the
standard library.
"""

import ipaddress

# Shared by both sides: the CLI offers them, the model implements them.
PROVIDERS: tuple[str, ...] = ("stored", "llm")

AUTH_ENV: tuple[str, str] = ("ML_SERVER_BASIC_AUTH_USER", "ML_SERVER_BASIC_AUTH_PASS")


def is_loopback(host: str) -> bool:
    """Whether binding ``host`` keeps the backend reachable from this machine only."""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def open_host_refusal(host: str) -> str:
    """Why the backend will not serve on ``host`` without basic auth, and the fix."""
    return (
        f"refusing to serve on {host} without basic auth: anyone who reaches the port could use it; "
        f"set {' and '.join(AUTH_ENV)}, or bind 127.0.0.1"
    )
