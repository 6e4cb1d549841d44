"""The participant gateway for blind crowd studies (``sotopia-ls study``).

Participants arrive from a Prolific study link, read the instructions, rate episodes in Label
Studio's own editor embedded in a page of the gateway, and return to Prolific with the
completion code. Label Studio stays the store and the researcher's interface; participants
never get a login, a token or its address.

- ``settings``  the study file (``StudyFile``) that ``study init`` writes
- ``store``     the gateway's database: participants, visits, slots, assignments
- ``arrival``   Prolific's URL parameters, the participant and their visit
- ``leases``    k slots per episode, leased to participants, settled on submission
- ``flow``      the pages in order: instructions → rate (× m) → done
- ``shown``     what of a task a participant's browser receives
- ``saving``    a submission checked, and written behind into Label Studio exactly once
- ``security``  headers, CSRF token, bounded bodies, JSON inside HTML
- ``editor``    Label Studio's editor files: one pinned npm release, verified
- ``app``       the Starlette app; ``serve`` runs it; ``status`` reports progress
- ``process``   ``study serve`` as a child process, for the tests and the benchmark
- ``commands``  the ``sotopia-ls study`` commands
"""
