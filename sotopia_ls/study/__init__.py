"""The participant gateway for blind crowd studies (``sotopia-ls study``).

Participants arrive from a Prolific study link, read the instructions, rate episodes in Label
Studio's own editor embedded in a page of the gateway, and return to Prolific with the
completion code. Label Studio stays the store and the researcher's interface; participants
never get a login, a token or its address.

- ``settings``  the study file (``StudyFile``) that ``study init`` writes
- ``store``     the gateway's database: participants, visits, page answers, slots, assignments
- ``arrival``   Prolific's URL parameters, the participant and their visit
- ``leases``    k slots per episode (more for one whose ratings disagree, with adaptive extra
                raters), leased to participants, settled on submission
- ``page``      a participant page as an object, as oTree's ``Page``: whether it is displayed,
                what its template gets (``vars_for_template``), what its submit does
                (``before_next_page``, returning the visit as it left it); a page with a form
                records its answers by default
- ``flow``      the gateway's pages in order, ``PAGE_SEQUENCE``: [admission] → instructions →
                rate (× m) → done (admission only in a study that requires a qualification
                round); ``create_app(pages=…)`` takes another sequence (a consent page added
                is one class and one template)
- ``gateway``   what every request needs, made once at start (``prepare_gateway``)
- ``shown``     what of a task a participant's browser receives
- ``saving``    a submission checked, and written behind into Label Studio exactly once
- ``marks``     a task's meta written from the gateway, one writer per task at a time
- ``security``  headers, CSRF token, bounded bodies, JSON inside HTML
- ``editor``    Label Studio's own editor, of the release the server runs: where its files are
                and how the page loads them (``static/editor-loader.js``)
- ``app``       the Starlette app, its routes built from the page sequence, the out-of-turn
                guard and the CSRF check once for every page; ``serve`` runs it; ``status``
                reports progress
- ``process``   ``study serve`` as a child process, for the tests and the benchmark
- ``live``      the running agreement: the report's figures on the ratings so far, recomputed
                in a worker process off the request path
- ``figures``   those figures, with the exporter's statistics: imported by that worker only
- ``dashboard`` the researcher's page following the study, behind a token of its own
- ``commands``  the ``sotopia-ls study`` commands

Screening and paying a study (``study init --qualification``, ``study review``, ``export``):

- ``qualification``  a round's visits scored against gold as they end; its allow-list; admission
- ``gold``      the gold episodes' reference ratings, from an oTree-layout CSV or ground truth
- ``typing_counts``  each rationale's characters pasted and typed, as the rating page counts them
- ``visible``   time on task: the seconds the rating page was visible and focused
- ``flags``     a rating's quality flags (rationales, time, straight-lining, gold distance)
- ``review``    the review file (``study review``), its edits recorded and marked in Label Studio
- ``prolific``  Prolific's API: approve, reject with a message, bulk-approve, participant groups
- ``payment``   the recorded decisions carried out on Prolific (``study review --apply``), once each
- ``protocol``  the study's side of the export's protocol record (``export --study``), without ids
"""
