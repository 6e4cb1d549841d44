"""Label Studio is reached through one boundary, ``sotopia_ls/labelstudio/``: it alone imports
label-studio-sdk, and what it hands the rest of the package is the package's own types."""

from __future__ import annotations

import dataclasses
import subprocess
from pathlib import Path

import pytest

from sotopia_ls.labelstudio.client import Client, Project, create_project, find_project

REPO = Path(__file__).resolve().parents[1]
BOUNDARY = "sotopia_ls/labelstudio/"
SDK = "label_studio_" + "sdk"  # spelled apart, so this file does not name it either


def test_no_module_outside_the_boundary_imports_the_sdk():
    tracked = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard",
                              "*.py"], cwd=REPO, capture_output=True, text=True, check=True)
    naming = [path for path in tracked.stdout.split()
              if not path.startswith(BOUNDARY) and (REPO / path).exists()
              and SDK in (REPO / path).read_text(encoding="utf-8")]
    assert naming == []


@pytest.mark.server
def test_a_project_is_the_package_s_own_frozen_record(ls_client: Client, project_title: str):
    made = create_project(ls_client, project_title, annotations_per_task=3)

    assert isinstance(made, Project)
    assert find_project(ls_client, made.id) == find_project(ls_client, project_title) == made
    assert (made.title, made.maximum_annotations, made.show_instruction) == (project_title, 3, True)
    assert 'name="believability_1"' in made.label_config
    assert "Believability" in made.expert_instruction
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.title = "renamed"  # type: ignore[misc]
