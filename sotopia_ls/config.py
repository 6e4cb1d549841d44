"""The annotator's screen: the Label Studio labeling config and the project instructions, both
built from the rubric and the task-data keys named here (``DIALOGUE``, ``agent_field``).

Nothing about a dimension is written here by hand, every static string goes through
ElementTree, and episode text reaches the screen only through ``$variables`` (README.md,
"The annotator's screen").
"""

from __future__ import annotations

import html
import re
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .dimensions import AGENTS, DIMENSIONS, RUBRIC, Dimension, Example, rating_name, reasoning_name
from .errors import InvalidLabelingConfig
from .folders import write_file

# The config's file name; the repository's top level holds it, generated from the rubric and
# kept current by a test, for reading and for pasting into Label Studio by hand. The package
# itself ships only the rubric: it generates the config wherever it is needed.
LABELING_CONFIG_FILE = "labeling_config.xml"

# The task-data key of the numbered dialogue, a ``$variable`` of the config.
DIALOGUE = "dialogue"

# Label Studio binds every Choice without a `hotkey` to the next free key of
# "1234567890qwe…", so the first 33 radio buttons of the form would answer to single
# keystrokes ("1" selecting believability 0 for agent 1) while the other 121 would not.
# An explicit hotkey stops that. Ours start with a character whose code no keyboard sends
# (keymaster matches `key.toUpperCase().charCodeAt(0)` against event.keyCode), so they
# never fire; they are unique because Label Studio warns about repeated keys, and the
# stylesheet hides the "[hotkey]" hint it would print after each value.
_NO_HOTKEY = "\u2205"

# Label Studio substitutes `$name` inside Header and Panel values with task data.
_VARIABLE = re.compile(r"\$[\w\[\].{}]")

# Descendant selectors only: the Style tag is sanitized, which escapes ">". The dialogue
# rules hide the empty "00:00:00 - 00:00:00" timing and the disabled "label whole
# utterance" button that Paragraphs draws for audio transcripts; their class names are
# CSS-module hashes, hence the prefix match. Label Studio 1.23 focuses the first turn on
# load, which scrolls the episode column past the scenario; a tall scroll margin above
# that turn keeps the column at its top instead.
_CSS = """
.sotopia-agents { display: flex; gap: 16px; align-items: stretch; }
.sotopia-agent { flex: 1 1 0; min-width: 0; padding: 4px 12px 8px;
  border: 1px solid #d9d9d9; border-radius: 6px; }
.sotopia-secret { background: #fff1f0; border-left: 4px solid #cf1322; padding: 2px 8px 4px;
  margin: 6px 0; }
.sotopia-dialogue [class*="time--"],
.sotopia-dialogue [class*="selectAllBtnWrapper--"] { display: none; }
.sotopia-dialogue [data-testid="phrase:0"] { scroll-margin-top: 100vh; }
.sotopia-dimension { border-top: 2px solid #e8e8e8; padding: 4px 0 8px; }
.sotopia-ratings { display: flex; flex-wrap: wrap; column-gap: 16px; }
.sotopia-rating .lsf-choices { margin: 4px 0; }
.sotopia-rating .lsf-hint { display: none; }
.sotopia-rating .ant-radio-wrapper { margin-right: 0; }
.sotopia-rating .ant-radio + span { padding: 0 4px 0 2px; }
.sotopia-example { margin: 4px 0 8px; }
"""

# Label Studio's side panels (Info/History, Regions/Relations) serve regions, which this
# config never makes, and take a quarter of the screen. No project setting or config
# attribute removes them, but the Style tag may restyle Label Studio's own classes: hide
# them, and the padding kept free for them (set inline, hence !important).
_SIDE_PANELS_CSS = """
.lsf-sidepanels .lsf-sidepanels__wrapper { display: none; }
.lsf-sidepanels { padding-left: 0 !important; padding-right: 0 !important; }
"""

# On a wide screen, two columns: the episode on the left stays put while the ratings on
# the right scroll. Label Studio scrolls the form inside its own panel, so the column
# sticks to that panel's top and scrolls on its own; its height leaves room for the bars
# Label Studio 1.23 puts above the panel (48 px, and 42 more in the data manager) and the
# Submit bar (50 px) laid over its bottom. Narrower screens keep one column: context,
# dialogue, ratings. The study gateway's page sizes the column for its own bars
# (study/serving/static/gateway.css).
_TWO_COLUMNS = "1000px"
_COLUMNS_CSS = f"""
@media (min-width: {_TWO_COLUMNS}) {{
  .sotopia-columns {{ display: flex; gap: 24px; align-items: flex-start; }}
  .sotopia-episode {{ flex: 1 1 0; min-width: 0; position: sticky; top: 0;
    max-height: calc(100vh - 150px); overflow-y: auto; }}
  .sotopia-evaluation {{ flex: 1 1 0; min-width: 0; }}
}}
"""

# Width of one radio button and its number ("-10" the widest) at Label Studio's 14 px.
_OPTION_EM = 2.7


def agent_field(agent: int, part: str) -> str:
    """Task-data key of one agent field: ``agent_1_name``, ``agent_2_goal`` …"""
    return f"agent_{agent}_{part}"


def _stylesheet() -> str:
    """The config's CSS. Both agents' ratings of a dimension sit side by side when their
    longest row of radio buttons fits twice, one above the other when not."""
    row = max(len(dimension.values) for dimension in DIMENSIONS) * _OPTION_EM
    ratings = f".sotopia-rating {{ flex: 1 1 {row:g}em; min-width: 0; }}"
    parts = (_CSS, ratings, _SIDE_PANELS_CSS, _COLUMNS_CSS)
    return "\n" + "\n".join(part.strip() for part in parts) + "\n"


_TITLE = "margin: 12px 0 4px"
LABEL_STYLE = "font-size: 15px; margin: 4px 0 2px"
BODY_STYLE = "font-weight: normal; font-size: 14px; margin: 2px 0 6px"
_QUOTE = "font-weight: normal; font-style: italic; font-size: 14px; margin: 2px 0"
_SMALL = "font-weight: normal; font-size: 13px; color: #595959; margin: 0 0 4px"


# --- labeling config ---------------------------------------------------------------------


def labeling_config() -> str:
    """The labeling config XML for rating both agents of an episode on every dimension."""
    return episode_screen(_evaluation)


def episode_screen(evaluation: Callable[[ET.Element], None], css: str = "") -> str:
    """A labeling config of two columns: the episode as annotators see it, and beside it
    what ``evaluation`` puts into its column (the rating form; the adjudication form of
    ``sotopia_ls.adjudication.screen``). ``css`` is added to the stylesheet."""
    root = ET.Element("View", className="sotopia-columns")
    ET.SubElement(root, "Style").text = _stylesheet() + css
    episode = ET.SubElement(root, "View", className="sotopia-episode")
    _context(episode)
    _dialogue(episode)
    evaluation(ET.SubElement(root, "View", className="sotopia-evaluation"))
    ET.indent(root, space="  ")
    return ET.tostring(root, encoding="unicode") + "\n"


def _context(parent: ET.Element) -> None:
    title(parent, "Scenario", size=3)
    ET.SubElement(parent, "Text", name="scenario", value="$scenario")
    agents = ET.SubElement(parent, "View", className="sotopia-agents")
    for agent in AGENTS:
        card = ET.SubElement(agents, "View", className="sotopia-agent")
        title(card, f"Agent {agent}: ${agent_field(agent, 'name')}", size=4)
        _labelled_text(card, "Background", agent_field(agent, "profile"))
        secret = ET.SubElement(card, "View", className="sotopia-secret")
        _labelled_text(
            secret,
            f"Secret of ${agent_field(agent, 'name')} (private: the other agent does not know it)",
            agent_field(agent, "secret"),
        )
        _labelled_text(card, "Social goal", agent_field(agent, "goal"))


def _dialogue(parent: ET.Element) -> None:
    title(parent, "Dialogue", size=3)
    ET.SubElement(
        ET.SubElement(parent, "View", className="sotopia-dialogue"),
        "Paragraphs",
        name=DIALOGUE,
        value=f"${DIALOGUE}",
        layout="dialogue",
        nameKey="speaker",
        textKey="text",
    )


def _evaluation(parent: ET.Element) -> None:
    title(parent, "Your evaluation", size=3)
    header(
        parent,
        "Rate each agent on every dimension and say why in the box under the rating. "
        f"All {len(DIMENSIONS) * len(AGENTS)} ratings and "
        f"{len(DIMENSIONS) * len(AGENTS)} rationales are required.",
        BODY_STYLE,
    )
    for dimension in DIMENSIONS:
        _dimension_block(parent, dimension)


def _labelled_text(parent: ET.Element, label: str, key: str) -> None:
    header(parent, label, LABEL_STYLE)
    ET.SubElement(parent, "Text", name=key, value=f"${key}")


def _dimension_block(parent: ET.Element, dimension: Dimension) -> None:
    block = ET.SubElement(parent, "View", className="sotopia-dimension")
    title(block, static_text(label_and_range(dimension)), size=4)
    header(block, static_text(dimension.guidance), BODY_STYLE)
    ratings = ET.SubElement(block, "View", className="sotopia-ratings")
    for agent in AGENTS:
        column = ET.SubElement(
            ratings, "View", className=f"sotopia-rating {rating_class(dimension.key, agent)}"
        )
        header(column, f"${agent_field(agent, 'name')}", LABEL_STYLE)
        _rating(column, dimension, agent)
        _rationale(column, dimension, agent)
    collapse = ET.SubElement(block, "Collapse")
    panel = ET.SubElement(
        collapse,
        "Panel",
        value=static_text(f"Annotation examples and worked example for {dimension.label}"),
    )
    for example in dimension.examples:
        _example(panel, example)
    _worked_example(panel, dimension)


def rating_class(key: str, agent: int) -> str:
    """CSS class of the column holding one agent's rating and rationale for one dimension."""
    return control_class(rating_name(key, agent))


def control_class(name: str) -> str:
    """CSS class of the block the config wraps around the control ``name`` (a rating's
    column holds its rationale too)."""
    return f"sotopia-{name}"


def _rating(parent: ET.Element, dimension: Dimension, agent: int) -> None:
    choices = ET.SubElement(
        parent,
        "Choices",
        name=rating_name(dimension.key, agent),
        toName=DIALOGUE,
        choice="single-radio",
        showInline="true",
        required="true",
        requiredMessage=f"Please rate {dimension.label} for agent {agent}.",
    )
    for value in dimension.values:
        ET.SubElement(choices, "Choice", value=str(value),
                      hotkey=silent_hotkey(rating_name(dimension.key, agent), value))


def silent_hotkey(control: str, value: int) -> str:
    """A choice's hotkey that no key fires, unique to the control and value (``_NO_HOTKEY``)."""
    return f"{_NO_HOTKEY}{control}={value}"


def _rationale(parent: ET.Element, dimension: Dimension, agent: int) -> None:
    ET.SubElement(
        parent,
        "TextArea",
        name=reasoning_name(dimension.key, agent),
        toName=DIALOGUE,
        required="true",
        requiredMessage=f"Please explain your {dimension.label} rating for agent {agent}.",
        rows="2",
        maxSubmissions="1",
        editable="true",
        showSubmitButton="false",
        placeholder=f"Why this {dimension.label} rating? (required)",
    )


def _example(parent: ET.Element, example: Example) -> None:
    box = ET.SubElement(parent, "View", className="sotopia-example")
    header(box, f"{example.verdict.capitalize()} annotation, rated {example.rating}", LABEL_STYLE)
    header(box, static_text(f"Rationale: \u201c{example.rationale}\u201d"), _QUOTE)
    header(box, static_text(example.assessment), _SMALL)


def _worked_example(parent: ET.Element, dimension: Dimension) -> None:
    for agent in RUBRIC.worked_example.agents:
        for rating in agent.ratings:
            if rating.dimension != dimension.key:
                continue
            box = ET.SubElement(parent, "View", className="sotopia-example")
            header(box, static_text(f"Worked example: {agent.name}, rated {rating.score}"),
                   LABEL_STYLE)
            header(box, static_text(rating.reasoning), _QUOTE)


def label_and_range(dimension: Dimension) -> str:
    """A dimension's heading: its label and range."""
    return f"{dimension.label} ({dimension.range_text})"


def title(parent: ET.Element, text: str, *, size: int) -> None:
    """A section's or a dimension's heading (``size`` 3 or 4)."""
    header(parent, text, _TITLE, size=size)


def header(parent: ET.Element, text: str, style: str, *, size: int = 5) -> None:
    """A line of the screen's own text (``LABEL_STYLE``, ``BODY_STYLE`` …)."""
    ET.SubElement(parent, "Header", value=text, size=str(size), style=style)


def static_text(text: str) -> str:
    """Rubric text as shown; refused if Label Studio would read part of it as a variable."""
    if _VARIABLE.search(text):
        raise ValueError(f"rubric text would be read as a task variable by Label Studio: {text!r}")
    return text


# --- checks ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Control:
    """A control tag of a labeling config: what the rating contract reads of it."""

    tag: str
    to_name: str
    options: tuple[str, ...]
    preselected: tuple[str, ...]
    attrs: dict[str, str]


def controls(xml: str) -> dict[str, Control]:
    """Every tag with a ``name`` and a ``toName`` in ``xml``, by name.

    Read with the standard library, so the pre-annotation backend (which has no
    label-studio-sdk) checks configs the same way. A config is data from a request there:
    document type declarations, the door to entity expansion, are refused outright.
    """
    if "<!DOCTYPE" in xml.upper() or "<!ENTITY" in xml.upper():
        raise InvalidLabelingConfig(["document type declarations are not allowed"])
    try:
        root = ET.fromstring(xml)
    except ET.ParseError as error:
        raise InvalidLabelingConfig([f"not valid XML: {error}"]) from None
    found: dict[str, Control] = {}
    for element in root.iter():
        name, to_name = element.get("name"), element.get("toName")
        if name and to_name:
            options = [child for child in element if child.tag == "Choice"]
            found[name] = Control(
                tag=element.tag,
                to_name=to_name.split(",")[0],
                options=tuple(child.get("value", "") for child in options),
                preselected=tuple(
                    child.get("value", "") for child in options
                    if child.get("selected", "").lower() == "true"
                ),
                attrs=dict(element.attrib),
            )
    return found


def contract_problems(xml: str) -> list[str]:
    """Why ``xml`` breaks the rating contract: for every dimension and agent, a required
    single-choice rating offering exactly the dimension's integers, none preselected, and a
    required, empty rationale. Empty when it keeps the contract."""
    found = controls(xml)
    problems: list[str] = []
    for dimension in DIMENSIONS:
        for agent in AGENTS:
            problems += _rating_problems(rating_name(dimension.key, agent), found, dimension)
            problems += _rationale_problems(reasoning_name(dimension.key, agent), found)
    return problems


def check_labeling_config(xml: str) -> str:
    """``xml`` when it keeps the rating contract, else ``InvalidLabelingConfig`` listing why."""
    problems = contract_problems(xml)
    if problems:
        raise InvalidLabelingConfig(problems)
    return xml


def _required(control: Control) -> bool:
    return control.attrs.get("required", "").lower() == "true"


def _rating_problems(name: str, found: dict[str, Control], dimension: Dimension) -> list[str]:
    rating = found.get(name)
    if rating is None or rating.tag != "Choices":
        return [f"{name}: no Choices control"]
    problems = []
    expected = tuple(dimension.choices)
    if rating.options != expected:
        problems.append(
            f"{name}: options {list(rating.options)} differ from "
            f"{dimension.label} {dimension.range_text} ({list(expected)})"
        )
    if rating.attrs.get("choice") == "multiple":
        problems.append(f"{name}: must allow a single choice only")
    if rating.preselected:
        problems.append(f"{name}: options {list(rating.preselected)} are preselected")
    if not _required(rating):
        problems.append(f"{name}: must be required")
    return problems


def _rationale_problems(name: str, found: dict[str, Control]) -> list[str]:
    rationale = found.get(name)
    if rationale is None or rationale.tag != "TextArea":
        return [f"{name}: no TextArea control"]
    problems = []
    if rationale.attrs.get("value"):
        problems.append(f"{name}: has a prefilled value")
    if not _required(rationale):
        problems.append(f"{name}: must be required")
    return problems


def write_labeling_config(path: Path) -> Path:
    """Write the generated config to ``path``, whole or not at all."""
    return write_file(path, labeling_config())


def labeling_config_is_current(path: Path) -> bool:
    """True when ``path`` holds exactly what ``labeling_config()`` generates now."""
    return path.is_file() and path.read_text(encoding="utf-8") == labeling_config()


# --- instructions --------------------------------------------------------------------------


def instructions_html() -> str:
    """The project's ``expert_instruction``: every dimension with its examples, then the
    worked example. Every rubric string is escaped."""
    parts = [
        "<h2>Evaluating Sotopia episodes</h2>",
        "<p>Each task is one conversation between two agents. Read the scenario, both "
        "agents' backgrounds, secrets and social goals, and the whole dialogue. Then rate "
        f"<b>each agent</b> on the {len(DIMENSIONS)} dimensions below and write a short rationale for "
        "every rating. Ratings use the full range of each dimension, including zero and "
        "negative values.</p>",
    ]
    for dimension in DIMENSIONS:
        parts.append(_dimension_html(dimension))
    parts.append(_worked_example_html())
    return "\n".join(parts) + "\n"


def _dimension_html(dimension: Dimension) -> str:
    table = _table(
        ("Annotator's rationale", "Rating", "Verdict", "Assessment"),
        [(e.rationale, str(e.rating), e.verdict, e.assessment) for e in dimension.examples],
    )
    return (
        f"<h3>{_e(label_and_range(dimension))}</h3>"
        f"<p>{_e(dimension.guidance)}</p>{table}"
    )


def _worked_example_html() -> str:
    names = " and ".join(agent.name for agent in RUBRIC.worked_example.agents)
    parts = [f"<h2>Worked example: {_e(names)}</h2>"]
    for agent in RUBRIC.worked_example.agents:
        rows = [
            (label_and_range(RUBRIC[r.dimension]), r.reasoning, str(r.score))
            for r in agent.ratings
        ]
        table = _table(("Dimension", "Reasoning", "Rating"), rows)
        parts.append(f"<h3>{_e(agent.name)}</h3>{table}")
    return "\n".join(parts)


def _table(headers: tuple[str, ...], rows: list[tuple[str, ...]]) -> str:
    """An escaped table, padded by attribute: Label Studio strips inline styles here."""
    if not rows:
        return ""
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    body = "".join(
        "<tr>" + "".join(f"<td>{_e(cell)}</td>" for cell in row) + "</tr>" for row in rows
    )
    return (
        '<table cellpadding="4" width="100%">'
        f"<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
    )


def _e(text: str) -> str:
    return html.escape(text, quote=True)
