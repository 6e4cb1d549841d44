"""The study as it runs: the running agreement, the report's own figures on the ratings so far,
computed in a worker process off the request path (``figures``), and the researcher's dashboard
that follows progress and those figures behind a token of its own (``dashboard``)."""
