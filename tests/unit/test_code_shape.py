"""The package's shape holds: no import loops between modules or between sibling packages,
and no module grows past what one reader takes in. Which package may import which is
declared once, as import contracts in pyproject.toml (``lint-imports``, run by ``just
lint``); this keeps what a contract cannot say.

The import graph is grimp's (the graph import-linter checks contracts on): every import
statement counts, at module level, inside functions and under ``TYPE_CHECKING`` alike,
since a lazy import is still a dependency and a loop through one is still a loop."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import grimp
import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "impyard"
#: Lines a module may hold; the run's orchestration stays a page or so of steps.
MAX_MODULE_LINES = 400
MAX_PIPELINE_LINES = 250
#: Modules (``__init__.py`` included) one package folder may hold before it is split into
#: sub-packages a reader can find their way in.
MAX_PACKAGE_MODULES = 15


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return grimp.build_graph("impyard", include_external_packages=False, cache_dir=None)


def test_no_module_imports_itself_back_through_any_chain(graph: grimp.ImportGraph) -> None:
    loops = []
    for module in sorted(graph.modules):
        for imported in sorted(graph.find_modules_directly_imported_by(module)):
            back = graph.find_shortest_chain(importer=imported, imported=module)
            if back is not None:
                loops.append(" -> ".join((module, *back)))
    assert loops == [], "import loops:\n" + "\n".join(loops)


def test_no_two_sibling_packages_import_each_other(graph: grimp.ImportGraph) -> None:
    edges = _package_edges(graph)
    both_ways = sorted(f"{a} <-> {b}" for a, b in edges if (b, a) in edges and a < b)
    assert both_ways == [], both_ways


def test_no_module_is_longer_than_one_reader_takes_in() -> None:
    lengths = {
        str(path.relative_to(PACKAGE.parent)): len(path.read_text().splitlines())
        for path in PACKAGE.rglob("*.py")
    }
    over = {path: n for path, n in lengths.items() if n > MAX_MODULE_LINES}
    assert over == {}, f"modules over {MAX_MODULE_LINES} lines: {over}"
    assert lengths["impyard/runs/drive/pipeline.py"] <= MAX_PIPELINE_LINES


def test_no_package_folder_holds_more_modules_than_a_reader_finds_their_way_in() -> None:
    counts = Counter(
        path.parent.relative_to(PACKAGE.parent).as_posix() for path in PACKAGE.rglob("*.py")
    )
    over = {folder: n for folder, n in counts.items() if n > MAX_PACKAGE_MODULES}
    assert over == {}, f"package folders over {MAX_PACKAGE_MODULES} modules: {over}"


def _package_edges(graph: grimp.ImportGraph) -> set[tuple[str, str]]:
    """Imports between impyard's direct children (impyard.box -> impyard.knowledge)."""

    def child(module: str) -> str:
        return ".".join(module.split(".")[:2])

    edges = set()
    for module in graph.modules:
        for imported in graph.find_modules_directly_imported_by(module):
            if child(module) != child(imported):
                edges.add((child(module), child(imported)))
    return edges
