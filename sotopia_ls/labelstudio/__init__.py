"""The boundary to Label Studio: everything of the package that speaks to it lives here.

- ``client``    every call to the server, through label-studio-sdk, with one error boundary
                (``sdk_errors``: SDK and HTTP failures become ``LabelStudioError``); it returns
                the package's own frozen types (``Project``, ``Backend``, ``TaskRecord``…) and
                names the SDK's client ``Client``: no module outside this folder imports the SDK
- ``interface`` a labeling config as the SDK reads it (``sdk_config``), in the package's types
- ``tasks``     ``Episode`` → task data (what the labeling config shows) and task ``meta``
- ``results``   the score model ↔ Label Studio result lists, both directions, validated
- ``push``      episodes → tasks in a project: batched, idempotent, converging on one task
                per episode
- ``snapshot``  a project's annotations, streamed from an export snapshot
- ``server``    a local Label Studio process for the demo and the tests

``tasks`` and ``results`` import no SDK: the pre-annotation backend, which runs in an
environment without label-studio-sdk, uses them too.
"""
