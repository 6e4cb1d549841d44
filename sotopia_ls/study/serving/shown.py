"""What a participant is shown of a task: the labeling config's ``$variables``, nothing else.

A task's ``data`` also holds the source file, the models and the agents as parsed, and its
``meta`` the stored model evaluation; none of that may reach a participant's browser. The page
gets each variable the config uses, and for a ``Paragraphs`` tag (the dialogue) each turn
reduced to the two keys the tag reads.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from typing import Any

_VARIABLE = re.compile(r"\$(\w+)")


@dataclass(frozen=True)
class ShownFields:
    """The task-data keys a labeling config shows, and the keys of each turn list it reads."""

    variables: tuple[str, ...]
    lists: dict[str, tuple[str, ...]]

    @classmethod
    def of(cls, config: str) -> ShownFields:
        lists = {
            element.get("value", "").lstrip("$"): (element.get("nameKey", "author"),
                                                   element.get("textKey", "text"))
            for element in ET.fromstring(config).iter("Paragraphs")
        }
        return cls(tuple(dict.fromkeys(_VARIABLE.findall(config))), lists)

    def shown(self, data: dict[str, Any]) -> dict[str, Any]:
        """The part of ``data`` the config shows."""
        shown: dict[str, Any] = {}
        for key in self.variables:
            value = data.get(key, "")
            if key in self.lists:
                keys = self.lists[key]
                value = [{name: turn.get(name, "") for name in keys}
                         for turn in value if isinstance(turn, dict)] if isinstance(value, list) else []
            shown[key] = value
        return shown
