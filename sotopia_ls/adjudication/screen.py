"""The adjudicator's screen: the adjudication project's labeling config and each task's data.

The episode reads as it did for the raters; beside it, per dimension and agent, the raters'
scores and rationales (escaped HTML) and, only where they disagree, a rating whose options come
from the task, since Label Studio has one config per project and the disputes change per task.
"""

from __future__ import annotations

import html
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..config import (
    BODY_STYLE,
    LABEL_STYLE,
    controls,
    episode_screen,
    header,
    label_and_range,
    silent_hotkey,
    static_text,
    title,
)
from ..dimensions import AGENTS, DIMENSION_KEYS, DIMENSIONS, Dimension
from ..folders import write_file
from ..labelstudio.tasks import DIALOGUE, agent_field
from ..scores import scores_disagree

if TYPE_CHECKING:  # disputes imports pandas, which writing the config does not need
    from .disputes import EpisodeRatings

# The file the repository holds at its top level, beside labeling_config.xml, for reading;
# a test keeps it current.
ADJUDICATION_CONFIG_FILE = "adjudication_config.xml"


def rating_name(key: str, agent: int) -> str:
    """Control name of an adjudicated rating: ``adjudicated_goal_1``."""
    return f"adjudicated_{key}_{agent}"


def note_name(key: str, agent: int) -> str:
    """Control name of an adjudicator's note: ``adjudication_note_goal_1``."""
    return f"adjudication_note_{key}_{agent}"


def _field(key: str, agent: int, part: str) -> str:
    """Task-data key of one block's part: ``adjudication_goal_1_ratings`` …"""
    return f"adjudication_{key}_{agent}_{part}"


def verdict_field(key: str, agent: int) -> str:
    """Task-data key of the line saying whether the raters agreed."""
    return _field(key, agent, "verdict")


def ratings_field(key: str, agent: int) -> str:
    """Task-data key of the raters' table (escaped HTML)."""
    return _field(key, agent, "ratings")


def options_field(key: str, agent: int) -> str:
    """Task-data key of the adjudicated rating's options: the range when disputed, else none."""
    return _field(key, agent, "options")


def block_class(key: str, agent: int) -> str:
    """CSS class of one dimension and agent's block."""
    return f"sotopia-adjudicate-{key}-{agent}"


_CSS = """
.sotopia-raters table { border-collapse: collapse; width: 100%; table-layout: fixed; }
.sotopia-raters th, .sotopia-raters td { border: 1px solid #d9d9d9; padding: 4px 8px;
  text-align: left; vertical-align: top; font-weight: normal; white-space: pre-wrap; }
.sotopia-raters th { background: #fafafa; }
.sotopia-adjudicated .lsf-choices { margin: 4px 0; }
.sotopia-adjudicated .lsf-hint { display: none; }
"""


def missing_control(label_config: str) -> str | None:
    """The first adjudicated rating or note ``label_config`` has no control for: a project
    without one (the study project itself, say) is no adjudication project. None: it has all."""
    names = controls(label_config)
    return next((name for agent in AGENTS for key in DIMENSION_KEYS
                 for name in (rating_name(key, agent), note_name(key, agent))
                 if name not in names), None)


def adjudication_config() -> str:
    """The adjudication project's labeling config XML."""
    return episode_screen(_adjudication, _CSS.strip() + "\n")


def _adjudication(parent: ET.Element) -> None:
    title(parent, "Adjudication", size=3)
    header(parent, "Each rater's score and rationale, side by side. Where the raters "
            "disagree, give the adjudicated rating and a note on why; where they agree, "
            "there is nothing to decide.", BODY_STYLE)
    for dimension in DIMENSIONS:
        for agent in AGENTS:
            _block(parent, dimension, agent)


def _block(parent: ET.Element, dimension: Dimension, agent: int) -> None:
    key = dimension.key
    block = ET.SubElement(parent, "View",
                          className=f"sotopia-dimension {block_class(key, agent)}")
    label = static_text(label_and_range(dimension))
    header(block, f"{label}, agent {agent}: ${agent_field(agent, 'name')}", LABEL_STYLE, size=4)
    ET.SubElement(block, "Text", name=verdict_field(key, agent),
                  value=f"${verdict_field(key, agent)}")
    ET.SubElement(ET.SubElement(block, "View", className="sotopia-raters"), "HyperText",
                  name=ratings_field(key, agent), value=f"${ratings_field(key, agent)}",
                  inline="true", selectionEnabled="false")
    asked = ET.SubElement(block, "View", className="sotopia-adjudicated")
    ET.SubElement(asked, "Choices", name=rating_name(key, agent), toName=DIALOGUE,
                  value=f"${options_field(key, agent)}", choice="single-radio",
                  showInline="true")
    note = ET.SubElement(asked, "View", visibleWhen="choice-selected",
                         whenTagName=rating_name(key, agent))
    ET.SubElement(note, "TextArea", name=note_name(key, agent), toName=DIALOGUE, rows="2",
                  maxSubmissions="1", editable="true", showSubmitButton="false",
                  placeholder=f"Why this adjudicated {dimension.label} rating? (required)")


def write_adjudication_config(path: Path) -> Path:
    """Write the generated config to ``path``, whole or not at all."""
    return write_file(path, adjudication_config())


def adjudication_config_is_current(path: Path) -> bool:
    """True when ``path`` holds exactly what ``adjudication_config()`` generates now."""
    return path.is_file() and path.read_text(encoding="utf-8") == adjudication_config()


# --- task data -----------------------------------------------------------------------------


def raters_table(rated: dict[str, tuple[int, str]]) -> str:
    """``{rater: (score, rationale)}`` as an HTML table, one column per rater; every value
    escaped, so a rationale is shown as the text it is."""
    head = "".join(f"<th>Rater {html.escape(rater)}</th>" for rater in rated)
    scores = "".join(f"<td>{score}</td>" for score, _ in rated.values())
    reasons = "".join(f"<td>{html.escape(text)}</td>" for _, text in rated.values())
    return (f"<table><thead><tr>{head}</tr></thead><tbody><tr>{scores}</tr>"
            f"<tr>{reasons}</tr></tbody></table>")


def verdict(scores: list[int], threshold: int) -> str:
    """The line above a block's table."""
    if not scores:
        return "No ratings."
    spread = max(scores) - min(scores)
    if scores_disagree(scores, threshold):
        return (f"Disputed: the ratings differ by {spread} (more than {threshold}). "
                "Give the adjudicated rating and a note.")
    return f"Agreed: the ratings differ by {spread} (at most {threshold}). Nothing to decide."


def options(dimension: Dimension, agent: int, disputed: bool) -> list[dict[str, str]]:
    """The adjudicated rating's options: the dimension's range when disputed, else none.
    Label Studio gives each option the other keys of its object, here a hotkey no key fires
    (as the rating screen's choices have), so a stray keystroke picks no rating."""
    name = rating_name(dimension.key, agent)
    return [{"value": text, "hotkey": silent_hotkey(name, value)}
            for text, value in dimension.choices.items()] if disputed else []


def screen_data(episode: EpisodeRatings, threshold: int) -> dict[str, Any]:
    """The task data of every block of one episode."""
    data: dict[str, Any] = {}
    disputed = episode.disputed(threshold)
    for dimension in DIMENSIONS:
        for agent in AGENTS:
            rated = episode.ratings.get((agent, dimension.key), {})
            scores = [score for score, _ in rated.values()]
            data[verdict_field(dimension.key, agent)] = verdict(scores, threshold)
            data[ratings_field(dimension.key, agent)] = raters_table(rated)
            data[options_field(dimension.key, agent)] = options(
                dimension, agent, (agent, dimension.key) in disputed)
    return data
