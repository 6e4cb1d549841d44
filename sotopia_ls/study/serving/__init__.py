"""Serving participants: the Starlette app and its pages in order (``flow.PAGE_SEQUENCE``), a
participant's arrival from Prolific, the guards every request passes (security headers, CSRF,
bounded bodies, the overload guard and the load it counts), Label Studio's editor embedded in the
rating page and what of a task that page is shown, with the templates and static files the pages
are made of. What a participant's browser touches is here; what a request does with a rating
belongs to the rooms beside it (slots, outbox, screening)."""
