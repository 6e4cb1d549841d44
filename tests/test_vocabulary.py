"""One vocabulary for the gateway: a slot's and an assignment's state and a visit's outcome
are enums (``study/states.py``), the sets the queries read are named for what they hold, and
each class name means one thing, so a reader changing one finds every use of it."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from sotopia_ls.study.states import (
    FOR_LABEL_STUDIO,
    IN_EXPORT,
    SUBMITTED,
    AssignmentState,
    Outcome,
    SlotState,
)

REPO = Path(__file__).resolve().parents[1]
STATES = REPO / "sotopia_ls" / "study" / "states.py"
STORED = {str(state) for enum in (SlotState, AssignmentState, Outcome) for state in enum}
# An expression reading or writing a stored state: a column, a row's field, a state variable.
STATEFUL = re.compile(r"(^|\.)(state|outcome|states|outcomes)\b")


def _spelled(tree: ast.AST) -> list[tuple[int, str]]:
    """Each bare string of a stored state next to a state: compared with it, written into
    it (``state="saved"``, ``{"state": "free"}``), looked up in counts of them, or listed in
    an ``in_``."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(STATEFUL.search(ast.unparse(side)) for side in sides):
                found += [each for side in sides for each in ast.walk(side)
                          if isinstance(each, ast.Constant)]
        elif isinstance(node, ast.keyword) and node.arg in ("state", "outcome"):
            found.append(node.value)
        elif isinstance(node, ast.Dict):
            found += [value for key, value in zip(node.keys, node.values)
                      if isinstance(key, ast.Constant) and key.value in ("state", "outcome")]
        elif isinstance(node, ast.Call) and STATEFUL.search(ast.unparse(node.func)):
            found += [each for argument in node.args for each in ast.walk(argument)
                      if isinstance(each, ast.Constant)]
    return sorted({(node.lineno, node.value) for node in found
                   if isinstance(node, ast.Constant) and node.value in STORED})


def test_no_module_spells_a_stored_state_as_a_bare_string():
    spelled = {}
    for path in sorted((REPO / "sotopia_ls" / "study").rglob("*.py")):
        if path != STATES:
            found = _spelled(ast.parse(path.read_text(encoding="utf-8")))
            if found:
                spelled[str(path.relative_to(REPO))] = found
    assert spelled == {}


def test_the_named_sets_hold_what_their_names_say():
    # Every rating a participant submitted, counted for their visit and its time on task:
    # surplus and shelved ones too, though they fill no slot and never reach Label Studio.
    assert set(SUBMITTED) == set(AssignmentState) - {AssignmentState.LEASED,
                                                     AssignmentState.EXPIRED}
    # What an export holds: saved, or on its way; what Label Studio holds or refused.
    assert set(IN_EXPORT) == {AssignmentState.SAVING, AssignmentState.SAVED}
    assert set(FOR_LABEL_STUDIO) == {*IN_EXPORT, AssignmentState.FAILED}
    assert AssignmentState.SURPLUS in SUBMITTED and AssignmentState.SURPLUS not in IN_EXPORT


def _classes(paths: list[Path]) -> dict[str, list[str]]:
    named: dict[str, list[str]] = {}
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                named.setdefault(node.name, []).append(str(path.relative_to(REPO)))
    return named


def test_each_class_of_the_gateway_names_one_thing():
    # A visit is a participant's Prolific session, a submission Prolific's record of it, and a
    # turn a move in an episode's dialogue: the review's visit, the rating page's body and a
    # request on a page have names of their own.
    gateway = _classes(sorted((REPO / "sotopia_ls" / "study").rglob("*.py")))
    core = _classes(sorted((REPO / "sotopia_ls").glob("*.py")))
    assert {name: paths for name, paths in gateway.items() if len(paths) > 1} == {}
    assert {name: [*paths, *core[name]] for name, paths in gateway.items() if name in core} == {}
