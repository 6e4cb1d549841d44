"""The labeling config and instructions come from the rubric, and Label Studio accepts them."""

from __future__ import annotations

import subprocess
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path

import jsonschema
import pytest
from click.testing import CliRunner

from sotopia_ls.cli import main
from sotopia_ls.config import (
    LABELING_CONFIG_FILE,
    instructions_html,
    labeling_config,
    labeling_config_is_current,
    check_labeling_config,
    contract_problems,
    write_labeling_config,
)
from sotopia_ls.dimensions import AGENTS, DIMENSIONS, RUBRIC, rating_name, reasoning_name
from sotopia_ls.errors import InvalidLabelingConfig
from sotopia_ls.labelstudio.interface import SdkConfig, sdk_config

RATINGS = [(d, agent) for agent in AGENTS for d in DIMENSIONS]
REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def interface() -> SdkConfig:
    return sdk_config(labeling_config())


def complete_output() -> dict[str, str]:
    """One annotator's answers in the flat ``{control name: value}`` shape of the JSON schema."""
    output = {}
    for dimension, agent in RATINGS:
        output[rating_name(dimension.key, agent)] = str(dimension.range_low)
        output[reasoning_name(dimension.key, agent)] = f"Why {dimension.label} for agent {agent}."
    return output


def test_the_generated_config_passes_the_sdk_s_own_validation(interface):
    assert check_labeling_config(labeling_config()) == labeling_config()
    assert len(interface.controls) == 4 * len(DIMENSIONS)


def test_a_config_the_sdk_refuses_is_refused_with_its_reason():
    with pytest.raises(InvalidLabelingConfig, match="label-studio-sdk refuses it: .*View"):
        sdk_config('<View><Choices name="a" toName="b"/>')


@pytest.mark.server
def test_a_real_label_studio_accepts_the_config_with_the_same_options(ls_client, project_title):
    project = ls_client.projects.create(
        title=project_title, label_config=labeling_config(), expert_instruction=instructions_html()
    )
    parsed = ls_client.projects.get(id=project.id).parsed_label_config
    for dimension, agent in RATINGS:
        rating = parsed[rating_name(dimension.key, agent)]
        assert rating["type"] == "Choices"
        assert rating["labels"] == [str(value) for value in dimension.values]
        assert parsed[reasoning_name(dimension.key, agent)]["type"] == "TextArea"


@pytest.mark.parametrize(("dimension", "agent"), RATINGS, ids=lambda v: getattr(v, "key", v))
def test_each_rating_offers_exactly_the_integers_of_its_range(interface, dimension, agent):
    rating = interface.controls[rating_name(dimension.key, agent)]
    assert rating.tag == "Choices"
    assert rating.attrs["choice"] == "single-radio"
    assert rating.to_name == ("dialogue",)
    assert [int(label) for label in rating.labels] == dimension.values
    assert rating.required


@pytest.mark.parametrize(("dimension", "agent"), RATINGS, ids=lambda v: getattr(v, "key", v))
def test_each_rating_has_a_required_rationale(interface, dimension, agent):
    rationale = interface.controls[reasoning_name(dimension.key, agent)]
    assert rationale.tag == "TextArea"
    assert rationale.to_name == ("dialogue",)
    assert rationale.required


def test_no_control_starts_with_a_value():
    root = ET.fromstring(labeling_config())
    assert root.findall(".//Choice[@selected]") == []
    assert [t.get("name") for t in root.iter("TextArea") if t.get("value") is not None] == []


def test_rubric_text_survives_xml_escaping_exactly():
    headers = {header.get("value") for header in ET.fromstring(labeling_config()).iter("Header")}
    for dimension in DIMENSIONS:
        assert dimension.guidance in headers
        assert f"{dimension.label} ({dimension.range_text})" in headers
        for example in dimension.examples:
            assert example.assessment in headers


def test_the_repository_shows_the_config_the_rubric_generates_at_its_top_level(monkeypatch):
    """A reader of the repository finds the labeling config beside the README, current, and
    `sotopia-ls config --check` run there says so; it is the one copy checked in."""
    assert labeling_config_is_current(REPO / LABELING_CONFIG_FILE), (
        f"{REPO / LABELING_CONFIG_FILE} is stale: regenerate it with `sotopia-ls config` in "
        "the repository's folder"
    )
    monkeypatch.chdir(REPO)
    checked = CliRunner().invoke(main, ["config", "--check"])
    assert checked.exit_code == 0 and "labeling_config.xml is up to date" in checked.output
    tracked = subprocess.run(["git", "ls-files", f"*{LABELING_CONFIG_FILE}"], cwd=REPO,
                             capture_output=True, text=True, check=True).stdout.split()
    assert tracked == [LABELING_CONFIG_FILE]


def test_a_stale_file_is_detected_and_rewritten(tmp_path):
    path = tmp_path / LABELING_CONFIG_FILE
    path.write_text(labeling_config().replace("0 to 10", "1 to 10", 1))
    assert not labeling_config_is_current(path)
    write_labeling_config(path)
    assert labeling_config_is_current(path)


def test_the_json_schema_accepts_a_complete_annotation(interface):
    jsonschema.validate(complete_output(), interface.json_schema)


@pytest.mark.parametrize(
    ("name", "value"), [("believability_1", "11"), ("secret_2", "1"), ("relationship_1", "-6")]
)
def test_the_json_schema_rejects_an_out_of_range_rating(interface, name, value):
    output = complete_output() | {name: value}
    with pytest.raises(jsonschema.ValidationError, match=name):
        jsonschema.validate(output, interface.json_schema)


def test_the_json_schema_rejects_a_missing_rationale(interface):
    output = complete_output()
    del output["goal_reasoning_2"]
    with pytest.raises(jsonschema.ValidationError, match="goal_reasoning_2"):
        jsonschema.validate(output, interface.json_schema)


def _drop_option(root: ET.Element) -> None:
    choices = root.find(".//Choices[@name='goal_1']")
    choices.remove(choices.find("Choice[@value='10']"))


def _make_optional(name: str):
    return lambda root: root.find(f".//*[@name='{name}']").attrib.pop("required")


def _preselect(root: ET.Element) -> None:
    root.find(".//Choices[@name='knowledge_1']/Choice[@value='0']").set("selected", "true")


def _remove(name: str):
    def remove(root: ET.Element) -> None:
        for parent in root.iter():
            for child in parent.findall(f"*[@name='{name}']"):
                parent.remove(child)

    return remove


@pytest.mark.parametrize(
    ("edit", "complaint"),
    [
        (_drop_option, "goal_1: options"),
        (_make_optional("secret_2"), "secret_2: must be required"),
        (_preselect, "knowledge_1: options ['0'] are preselected"),
        (_make_optional("goal_reasoning_2"), "goal_reasoning_2: must be required"),
        (_remove("relationship_2"), "relationship_2: no Choices control"),
    ],
)
def test_a_config_breaking_the_rating_contract_is_refused_with_the_control_named(edit, complaint):
    root = ET.fromstring(labeling_config())
    edit(root)
    with pytest.raises(InvalidLabelingConfig) as error:
        check_labeling_config(ET.tostring(root, encoding="unicode"))
    assert complaint in str(error.value)


@pytest.mark.parametrize(
    ("xml", "complaint"),
    [
        ("<View><Choices name='a' toName='b'", "not valid XML"),
        ('<!DOCTYPE x [<!ENTITY a "aaaa">]><View>&a;</View>', "document type declarations"),
    ],
)
def test_a_config_that_is_not_xml_or_declares_entities_is_refused(xml, complaint):
    with pytest.raises(InvalidLabelingConfig, match=complaint):
        contract_problems(xml)


class _TextOf(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.chunks: list[str] = []

    def handle_data(self, data: str) -> None:
        self.chunks.append(data)


def instruction_texts() -> list[str]:
    parser = _TextOf()
    parser.feed(instructions_html())
    return parser.chunks


def test_the_instructions_hold_every_guidance_example_and_the_worked_example():
    texts = instruction_texts()
    for dimension in DIMENSIONS:
        assert dimension.guidance in texts
        for example in dimension.examples:
            assert example.rationale in texts
            assert example.assessment in texts
    for agent in RUBRIC.worked_example.agents:
        assert agent.name in texts
        for rating in agent.ratings:
            assert rating.reasoning in texts


def test_the_instructions_escape_every_rubric_string():
    page = instructions_html()
    assert "others' words" not in page
    assert "others&#x27; words/actions" in page
