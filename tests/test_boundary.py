"""Label Studio is reached through one boundary, ``sotopia_ls/labelstudio/``: it alone imports
label-studio-sdk, and what it hands the rest of the package is the package's own types."""

from __future__ import annotations

import ast
import dataclasses
import sqlite3
import ssl
import subprocess
from functools import cache
from pathlib import Path

import pytest

from conftest import MIGRATED
from sotopia_ls.labelstudio import migrated
from sotopia_ls.labelstudio.client import Client, Project, create_project, find_project
from sotopia_ls.labelstudio.server import LocalServer, answers_up, tls

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


@pytest.mark.server
def test_the_checked_in_databases_hold_every_migration_of_the_installed_label_studio(
        label_studio: LocalServer):
    """The session's server started on the SQLite dump: had the dump missed a migration of the
    installed release, Label Studio would have applied it then. Both dumps record the same."""
    dumps = [migrated.dump_path(migrated.DUMPS, "sqlite"),
             migrated.dump_path(MIGRATED, "postgresql")]
    tracked = subprocess.run(["git", "ls-files", "--error-unmatch", *map(str, dumps)], cwd=REPO,
                             capture_output=True, text=True)
    stale = ("; delete the dumps, run the suite (its first servers migrate and write new "
             "ones) and commit them")
    assert tracked.returncode == 0, tracked.stderr + stale
    database = label_studio.log_path.parent / migrated.DATABASE_FILE
    with sqlite3.connect(f"file:{database}?mode=ro", uri=True) as running:
        applied = set(running.execute("SELECT app, name FROM django_migrations"))
    assert applied == migrated.applied_migrations(dumps[0]), stale
    assert applied == migrated.applied_migrations(dumps[1]), stale


def test_a_new_data_folder_gets_the_migrated_database_whole_and_an_old_one_keeps_its_own(
        tmp_path: Path):
    new = tmp_path / "new"
    assert migrated.restore_sqlite(new)
    database = new / migrated.DATABASE_FILE
    with sqlite3.connect(database) as restored:
        applied = set(restored.execute("SELECT app, name FROM django_migrations"))
    assert applied == migrated.applied_migrations(migrated.dump_path(migrated.DUMPS, "sqlite"))
    assert [path.name for path in new.iterdir()] == [migrated.DATABASE_FILE]

    kept = database.read_bytes()
    assert not migrated.restore_sqlite(new)
    assert database.read_bytes() == kept
    # Another release (no dump for it): Label Studio migrates at its first start.
    assert not migrated.restore_sqlite(tmp_path / "other", dumps=tmp_path / "no-dumps")
    assert not (tmp_path / "other" / migrated.DATABASE_FILE).exists()

    broken = tmp_path / "broken"
    broken.mkdir()
    migrated.dump_path(broken, "sqlite").write_text("CREATE TABLE half (x);\nNOT SQL;\n")
    with pytest.raises(sqlite3.Error):
        migrated.restore_sqlite(tmp_path / "half", dumps=broken)
    assert list((tmp_path / "half").iterdir()) == []


def test_the_package_s_label_studio_clients_read_the_ca_bundle_once(monkeypatch):
    # Each Label Studio client, server poll and gateway start would otherwise build its own
    # TLS context from the CA bundle (tens of ms of CPU each, in every command and request).
    tls()
    made: list[object] = []
    real = ssl.create_default_context
    monkeypatch.setattr(ssl, "create_default_context",
                        lambda *args, **kwargs: made.append(args) or real(*args, **kwargs))
    clients = [Client(base_url="http://127.0.0.1:9", api_key="k" * 40) for _ in range(2)]
    assert not answers_up("http://127.0.0.1:9", timeout=0.5)
    assert made == []
    assert clients[0]._client_wrapper.httpx_client.httpx_client is not \
        clients[1]._client_wrapper.httpx_client.httpx_client  # one client each, one context


# --- layers: a static import graph of the package -------------------------------------------

PACKAGE = "sotopia_ls"
# The package's parts, lowest layer first (names below the package; "" is its __init__). A
# module belongs to the part whose name is the longest prefix of its own, so the `commands`
# modules are the command line's wherever they sit. A part imports parts of its own layer or
# of lower ones, never of a higher one; the LLM judge and `evaluate` read and write Label
# Studio tasks, so they sit above it.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("core", ("", "errors", "text", "dimensions", "scores", "episode", "config", "folders",
              "extras", "options", "chat", "samples")),
    ("statistics", ("statistics",)),
    ("labelstudio", ("labelstudio",)),
    ("features", ("importer", "exporter", "adjudication", "ml_backend", "judge", "evaluate")),
    ("report", ("report",)),
    # The study's rooms, each a part (docs/rooms.md), in the order the code takes. Modules that
    # import nothing of the rooms are parts of their own below their room's: the flags (pure
    # functions of a rating, whose thresholds the study file holds) and Prolific's API
    # (screening checks a rejection with its rules before keeping it) with the ground, the
    # request guards just above it (the outbox reads the process's ``Load``; the dashboard
    # shares the pages' guards). Screening sits below the slots: settling a submission stores
    # what screening reads (typing, visible time) in the same transaction. ``status`` reads the
    # database and the running agreement for `study status` and for the dashboard, which the
    # app of ``serving`` serves; the other commands' modules sit on top.
    ("study ground", ("study", "study.settings", "study.store", "study.states",
                      "study.screening.flags", "study.payment.prolific")),
    ("study guards", ("study.serving.load", "study.serving.overload", "study.serving.security")),
    ("study screening", ("study.screening",)),
    ("study slots", ("study.slots",)),
    ("study outbox", ("study.outbox",)),
    ("study payment", ("study.payment",)),
    ("study live", ("study.live",)),
    ("study status", ("study.status",)),
    ("study dashboard", ("study.live.dashboard",)),
    ("study serving", ("study.serving",)),
    ("study commands", ("study.serve", "study.protocol", "study.process")),
    ("cli", ("cli", "__main__", "exporter.commands", "ml_backend.commands", "study.commands")),
)
# Imports between parts that the layers or the no-cycle rule refuse, kept until a restructuring
# moves the code. The list only shrinks: the test fails when an entry is no longer needed.
KNOWN_TANGLES = {
    # The export reads the adjudication project (adjudication.reading), and making that
    # project (adjudication.project) exports the project it adjudicates.
    ("exporter", "adjudication"), ("adjudication", "exporter"),
}
# The gateway as it serves: `study init`, `serve` (the app and its pages, arrival, security,
# overload, editor, saving, store...), `status`, and the lease logic.
SERVING = ("study.commands", "study.serve", "study.status", "study.slots.leases")
# What the serving path never imports: statistics, plotting and table libraries, and the
# exporter (the report's statistics and tables). The dashboard's worker process imports them.
NOT_SERVING = ("pandas", "pyarrow", "scipy", "matplotlib", "krippendorff", "irrCAC", "pingouin")
NOT_SERVING_PARTS = ("exporter", "statistics", "report")


def _module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(path): path for path in (REPO / PACKAGE).rglob("*.py")}


@dataclasses.dataclass(frozen=True)
class Import:
    module: str  # the importing module
    target: str  # a module of the package, or a library's top-level name
    at_import: bool  # run when the module is imported, not only when one of its functions runs


def _nodes_under(blocks: list[ast.AST]) -> set[int]:
    return {id(node) for block in blocks for statement in block.body
            for node in ast.walk(statement)}


def _targets(name: str, names: list[str]) -> set[str]:
    """What ``from name import names`` (or ``import name``) runs: the package's modules on the
    way (each ``__init__``) and those named; a library, by its top-level name."""
    if name != PACKAGE and not name.startswith(f"{PACKAGE}."):
        return {name.partition(".")[0]}
    parts = name.split(".")
    return ({".".join(parts[:end]) for end in range(1, len(parts) + 1)}
            | {f"{name}.{each}" for each in names if f"{name}.{each}" in MODULES})


def imports(module: str) -> list[Import]:
    """Every import statement of ``module`` that can run (none under ``TYPE_CHECKING``)."""
    path = MODULES[module]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = module.split(".")[:None if path.name == "__init__.py" else -1]
    never = _nodes_under([node for node in ast.walk(tree) if isinstance(node, ast.If)
                          and "TYPE_CHECKING" in ast.unparse(node.test)])
    deferred = _nodes_under([node for node in ast.walk(tree)
                             if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))])
    found = []
    for node in ast.walk(tree):
        if id(node) in never:
            continue
        if isinstance(node, ast.Import):
            targets = set().union(*(_targets(alias.name, []) for alias in node.names))
        elif isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            name = ".".join([*base, *([node.module] if node.module else [])])
            targets = _targets(name, [alias.name for alias in node.names])
        else:
            continue
        found += [Import(module, target, id(node) not in deferred) for target in targets]
    return found


@cache
def graph() -> list[Import]:
    """Every import of the package, parsed when a test first reads it (not at collection)."""
    return [found for module in sorted(MODULES) for found in imports(module)]


@cache
def folders() -> set[str]:
    """Packages whose ``__init__`` imports nothing: importing a module below one runs no code
    of it, so it joins no parts (a module may be a part of its own below its folder's)."""
    importing = {found.module for found in graph()}
    return {module for module, path in MODULES.items()
            if path.name == "__init__.py" and module not in importing}


def part_of(module: str) -> str:
    relative = module.removeprefix(PACKAGE).removeprefix(".")
    return max((name for _, names in LAYERS for name in names
                if name in ("", relative) or relative.startswith(f"{name}.")), key=len)


def layer_of(part: str) -> int:
    return next(number for number, (_, names) in enumerate(LAYERS) if part in names)


def _reach(edges: set[tuple[str, str]], start: str) -> set[str]:
    reached, waiting = set(), [start]
    while waiting:
        part = waiting.pop()
        for after in (after for before, after in edges if before == part):
            if after not in reached:
                reached.add(after)
                waiting.append(after)
    return reached


def test_parts_import_down_the_layers_and_form_no_cycle():
    joined: dict[tuple[str, str], list[str]] = {}  # (importing part, imported part) → how
    for found in graph():
        pair = (part_of(found.module), part_of(found.target))
        if found.target in MODULES and found.target not in folders() and pair[0] != pair[1]:
            joined.setdefault(pair, []).append(f"{found.module} imports {found.target}")
    upward = {pair for pair in joined if layer_of(pair[0]) < layer_of(pair[1])}
    cycling = {pair for pair in joined if pair[0] in _reach(set(joined), pair[1])}

    assert {part_of(module) for module in MODULES} == {
        name for _, names in LAYERS for name in names}, "a declared part holds no module"
    assert {pair: joined[pair] for pair in (upward | cycling) - KNOWN_TANGLES} == {}
    assert KNOWN_TANGLES - upward - cycling == set(), "untangled: drop these from KNOWN_TANGLES"


def _reached_at_import(roots: list[str]) -> dict[str, str]:
    """Every module and library that importing ``roots`` runs, each → a module importing it."""
    via = dict.fromkeys(roots, "")
    waiting = list(roots)
    while waiting:
        module = waiting.pop()
        for found in graph():
            if found.module == module and found.at_import and found.target not in via:
                via[found.target] = module
                if found.target in MODULES:
                    waiting.append(found.target)
    return via


def test_the_gateway_s_serving_path_imports_no_statistics_plotting_or_table_library():
    via = _reached_at_import([f"{PACKAGE}.{root}" for root in SERVING])

    def chain(target: str) -> str:
        return target if not via[target] else f"{target} <- {chain(via[target])}"

    assert [chain(target) for target in sorted(via) if target in NOT_SERVING
            or target in MODULES and part_of(target) in NOT_SERVING_PARTS] == []


def test_the_running_agreement_s_worker_imports_no_label_studio_client():
    # Each gateway's fork server imports these once; the figures never call Label Studio.
    from sotopia_ls.study.live.snapshots import PRELOADED

    via = _reached_at_import(list(PRELOADED))

    assert [target for target in (SDK, "httpx", f"{PACKAGE}.labelstudio.client")
            if target in via] == []
