"""The docs point at code that exists: every `ablate.x.y` they name, every repository path, and README's module
list matches the tree. Names are resolved on the source (ast), so no module is imported (torch stays unloaded)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
DOCS = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md", SRC / "ablate/recipes/README.md"]
DOCS += [ROOT / "slurm/README.md"]
DOTTED = re.compile(r"\bablate(?:\.[A-Za-z_]\w*)+")
PATH = re.compile(r"(?<![\w/.-])((?:src|docs|bench|tests|mk)/[\w./-]*\w)")
OUTPUTS = ("bench/out/",)
"""Folders the benchmarks write into: the docs name files there that a run makes, not files of the repository."""


def _module_file(dotted: str) -> Path | None:
    base = SRC / Path(*dotted.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return base if base.is_dir() else None  # a namespace package (fit/): names in it are its modules


def _defines(body: list[ast.stmt], name: str) -> ast.AST | None:
    """The top-level statement of `body` that binds `name` (a def, a class, an assignment or an import)."""
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
            return node
        targets = []
        if isinstance(node, ast.Assign):
            targets = [t.id for t in node.targets if isinstance(t, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            targets = [node.target.id]
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            targets = [(a.asname or a.name).split(".")[0] for a in node.names]
        if name in targets:
            return node
    return None


def resolves(dotted: str) -> bool:
    """True when `dotted` is a module of src/ablate, or a module followed by a name it defines (and, for a class,
    a name defined in its body). A package's lazily loaded names (a `_HOME` table) count as defined."""
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        path = _module_file(".".join(parts[:i]))
        if path is None:
            continue
        rest = parts[i:]
        if not rest:
            return True
        if path.is_dir():
            return False
        source = path.read_text()
        node: ast.AST | None = ast.parse(source)
        for name in rest:
            body = getattr(node, "body", None)
            if not isinstance(body, list):
                return False
            node = _defines(body, name)
            if node is None:
                return f'"{name}"' in source and "_HOME" in source
        return True
    return False


def _mentions(pattern: re.Pattern[str]) -> list[tuple[str, str]]:
    return sorted({(doc.name, m.rstrip(".")) for doc in DOCS for m in pattern.findall(doc.read_text())})


@pytest.mark.parametrize(("doc", "name"), _mentions(DOTTED))
def test_every_ablate_name_the_docs_use_exists(doc, name):
    assert resolves(name), f"{doc} names {name}, which the source does not define"


@pytest.mark.parametrize(("doc", "path"), [(d, p) for d, p in _mentions(PATH) if not p.startswith(OUTPUTS)])
def test_every_repository_path_the_docs_name_exists(doc, path):
    assert (ROOT / path).exists(), f"{doc} names {path}, which is not in the repository"


def test_the_resolver_tells_a_moved_name_from_a_present_one():
    assert resolves("ablate.states.RunState.LOST")
    assert resolves("ablate.train.session.RunSession")
    assert not resolves("ablate.prune.start_hook_gone")
    assert not resolves("ablate.reporting_gone")
    assert resolves("ablate.fit") and not resolves("ablate.fit.nothing")


def test_readme_lists_every_module_once_and_none_that_is_gone():
    """The Files block of README.md names each module of src/ablate (a package's modules may be named together
    on its folder's line instead); `__init__` and `__main__` are the packages' own."""
    block = (ROOT / "README.md").read_text().split("## Files", 1)[1]
    listed = re.findall(r"^(src/ablate/\S+\.py)\b", block, re.M)
    folders = re.findall(r"^(src/ablate/\S+/)\s", block, re.M)
    assert len(listed) == len(set(listed)), [p for p in listed if listed.count(p) > 1]
    gone = [p for p in listed if not (ROOT / p).is_file()]
    assert not gone, f"README lists modules that are gone: {gone}"
    modules = sorted(p.relative_to(ROOT).as_posix() for p in (SRC / "ablate").rglob("*.py"))
    modules = [m for m in modules if Path(m).name not in ("__init__.py", "__main__.py")]
    for folder in folders:
        text = block.split(folder, 1)[1].split("\nsrc/", 1)[0]
        listed += [m for m in modules if m.startswith(folder) and Path(m).stem in text]
    missing = [m for m in modules if m not in listed]
    assert not missing, f"README does not list: {missing}"


def test_the_run_directory_page_names_every_state_and_failure_cause():
    from ablate.launch.slurm import SACCT_CAUSE
    from ablate.states import RunState

    text = (ROOT / "docs" / "run-directory.md").read_text()
    for state in RunState:
        assert f"`{state}`" in text, state
    for cause in {*SACCT_CAUSE.values(), "killed", "submit", "input", "no_space"}:
        assert f"| `{cause}` |" in text, cause


def _layers() -> list[list[str]]:
    """The rows of docs/architecture.md's layer table: on each unindented line of its first code block, the names
    before the description (`cli/` is the package `cli`, `demo` the module `demo`)."""
    text = (ROOT / "docs" / "architecture.md").read_text().split("## Layers", 1)[1]
    block = text.split("```", 2)[1]
    rows = []
    for line in block.splitlines()[1:]:
        if line and not line[0].isspace():
            rows.append([name.rstrip("/") for name in re.split(r"\s{2,}", line)[0].split()])
    return rows


def _ablate_imports(path: Path) -> set[str]:
    """The first component under `ablate.` of every ablate import in a module, inside functions too."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        out |= {n.split(".")[1] for n in names if n.startswith("ablate.")}
    return out


def test_the_architecture_page_layers_are_the_import_graph():
    """Every module of src/ablate is in one row of the layer table, and imports only from its row and those below."""
    rows = _layers()
    row_of = {name: i for i, row in enumerate(rows) for name in row}
    assert len(row_of) == sum(map(len, rows)), "a name is in two rows"
    upward = []
    for path in sorted((SRC / "ablate").rglob("*.py")):
        parts = path.relative_to(SRC / "ablate").with_suffix("").parts
        if parts == ("__init__",):
            continue
        group = parts[0]
        assert group in row_of, f"docs/architecture.md's layers do not place {path.relative_to(ROOT)}"
        upward += [
            f"{path.relative_to(ROOT)} -> ablate.{dep}"
            for dep in _ablate_imports(path)
            if dep in row_of and row_of[dep] < row_of[group]
        ]
    assert not upward, f"imports that go up docs/architecture.md's layers: {upward}"
