"""A labeling config as label-studio-sdk reads it (the SDK's ``LabelInterface``), in the
package's own types: the check that what ``config.labeling_config`` generates is a config the
SDK, and so Label Studio, takes with the controls the rating contract means.

``config.controls`` reads configs with the standard library, for the pre-annotation backend
that has no SDK; this is the SDK's own reading, kept to this one function.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass
from typing import Any

from ..errors import InvalidLabelingConfig


@dataclass(frozen=True)
class SdkControl:
    """One control tag: ``attrs`` as written in the config, ``labels`` a Choices control's
    choices in order, ``required`` whether the SDK requires an answer to it."""

    tag: str
    attrs: dict[str, str]
    to_name: tuple[str, ...]
    labels: tuple[str, ...]
    required: bool


@dataclass(frozen=True)
class SdkConfig:
    """The controls by name, and the JSON schema the SDK derives for one annotator's answers
    (``{control name: value}``)."""

    controls: dict[str, SdkControl]
    json_schema: dict[str, Any]


def sdk_config(xml: str) -> SdkConfig:
    """``xml`` validated and read by label-studio-sdk; ``InvalidLabelingConfig`` with the
    SDK's reason when it refuses it."""
    # Imported here: the SDK's config reader imports boto3 and jsf (~2 s), for this call only.
    from label_studio_sdk._legacy.exceptions import (
        LabelStudioValidationErrorSentryIgnored,
        LabelStudioXMLSyntaxErrorSentryIgnored,
    )
    from label_studio_sdk.label_interface import LabelInterface

    try:
        interface = LabelInterface(xml)
        interface.validate()
    except (LabelStudioValidationErrorSentryIgnored, LabelStudioXMLSyntaxErrorSentryIgnored,
            ET.ParseError) as error:
        raise InvalidLabelingConfig([f"label-studio-sdk refuses it: {error}"]) from None
    controls = {
        control.name: SdkControl(control.tag, dict(control.attr), tuple(control.to_name),
                                 tuple(getattr(control, "labels", ())),
                                 bool(control.is_output_required))
        for control in interface.controls
    }
    return SdkConfig(controls, interface.to_json_schema())
