"""The HTML report: ``build`` reads an export (or runs one) and renders the sections in
``sections.SECTIONS``, one object each; ``page`` and ``plots`` make its self-contained HTML and
charts, ``time_on_task`` its time-on-task table. It stands on the export's tables and the
statistics room's figures."""
