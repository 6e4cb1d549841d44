"""The boundary to Label Studio: everything of the package that speaks to it lives here.

Only ``client`` imports label-studio-sdk, and returns the package's own frozen types; the
other modules are named for what they hold (README.md, "Layout"). ``tasks`` and ``results``
import no SDK, so the pre-annotation backend can use them.
"""
