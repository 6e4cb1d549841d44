"""Run by the tests with the backend's Python (``.venv-ml``): requests through Flask's test client.

Reads ``{"requests": [{"method", "path", "headers", "body": base64 or null}], "traced": bool,
"failing_route": bool}`` from stdin, builds the app with ``create_app()`` from the environment's
settings (plus, with ``failing_route``, a route /_fail whose view raises), and prints
``{"answers": [...], "routes": {...}, "library_routes": {...}, "traced": [...]}``: each
answer's status, content type, body and headers; the rules of this app and of
label-studio-ml's own Flask app (rule → methods); and, with ``traced``, the bytes Python holds
(tracemalloc) after each request. The app logs to stderr as the server does.
"""

from __future__ import annotations

import base64
import gc
import json
import os
import sys
import tracemalloc
from typing import Any

from flask import Flask

from sotopia_ls.ml_backend._wsgi import configure_logging, create_app


def fail() -> None:
    raise RuntimeError("an unexpected error\n2026-01-01 00:00:00,000 ERROR forged: from an exception")


def rules(app: Flask) -> dict[str, list[str]]:
    return {rule.rule: sorted(rule.methods or ()) for rule in app.url_map.iter_rules()}


def main() -> None:
    spec = json.load(sys.stdin)
    configure_logging(os.getenv("LOG_LEVEL", "INFO"))
    app = create_app()
    if spec.get("failing_route"):
        app.add_url_rule("/_fail", "fail", fail)
    client = app.test_client()
    if spec["traced"]:
        tracemalloc.start()
    answers: list[dict[str, Any]] = []
    traced: list[int] = []
    for call in spec["requests"]:
        body = None if call["body"] is None else base64.b64decode(call["body"])
        response = client.open(call["path"], method=call["method"], data=body, headers=call["headers"])
        answers.append({
            "status": response.status_code,
            "content_type": response.content_type or "",
            "body": response.get_data(as_text=True),
            "headers": dict(response.headers),
        })
        response.close()
        if spec["traced"]:
            gc.collect()
            traced.append(tracemalloc.get_traced_memory()[0])
    # Imported last: importing it builds the library's own app, a module-level object.
    from label_studio_ml.api import _server as library_app

    json.dump({"answers": answers, "routes": rules(app), "library_routes": rules(library_app), "traced": traced}, sys.stdout)


if __name__ == "__main__":
    main()
