"""The shape of the package, checked on its source (docs/architecture.md says why each rule holds):

- no import cycles, counting the imports inside functions;
- the fits (ablate.fit) import nothing of ablate outside ablate.fit and ablate.errors;
- the launchers (ablate.launch) never import the prune monitor or its rules;
- no private name (`_x`) is imported from, or reached into, another module;
- one way to start a child Python process (ablate.topology.process) and to find the package (no `parents[...]`
  elsewhere);
- no module over 400 lines and no function over 80, numerical kernels excepted by name.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 80
KERNELS = {"ablate.fit.sigmoid.fit_batch"}
"""Vectorised numerical kernels, kept whole so their arithmetic reads top to bottom."""
CHILD_PROCESS_MODULE = "ablate.topology.process"


def _modules() -> dict[str, Path]:
    mods = {}
    for path in sorted(SRC.rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        mods[".".join(parts)] = path
    return mods


MODULES = _modules()
TREES = {name: ast.parse(path.read_text(), str(path)) for name, path in MODULES.items()}


def _target(module: str, node: ast.ImportFrom | ast.Import, name: str) -> str | None:
    """The ablate module an import names (the longest known prefix), or None for another package."""
    if isinstance(node, ast.ImportFrom):
        if node.level:
            base = module.split(".")
            if MODULES[module].name != "__init__.py":
                base = base[:-1]
            base = base[: len(base) - (node.level - 1)]
            stem = ".".join(base + ([node.module] if node.module else []))
        else:
            stem = node.module or ""
        candidates = [f"{stem}.{name}", stem]
    else:
        candidates = [name]
    for dotted in candidates:
        parts = dotted.split(".")
        for i in range(len(parts), 0, -1):
            if ".".join(parts[:i]) in MODULES:
                return ".".join(parts[:i])
    return None


LAZY = re.compile(r"^(ablate(?:\.\w+)+):\w+$")
"""A lazy registry entry or a job function named as text (`"ablate.train.builtin:BuiltinTrainer"`): an import
made later, by name, and an edge of the graph all the same."""


def _imports(module: str) -> set[str]:
    found = set()
    for node in ast.walk(TREES[module]):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                target = _target(module, node, alias.name)
                if target and target != module:
                    found.add(target)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and (m := LAZY.match(node.value)):
            target = _target(module, ast.Import(names=[]), m.group(1))
            if target and target != module:
                found.add(target)
    return found


def test_a_lazy_entry_named_as_text_is_an_import():
    assert "ablate.train.builtin" in GRAPH["ablate.train.loop"]
    assert "ablate.track.wandb" in GRAPH["ablate.track.fanout"]


GRAPH = {m: _imports(m) for m in MODULES}


def _cycles() -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(GRAPH[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(MODULES):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycles():
    assert _cycles() == []


def test_the_cycle_finder_finds_a_cycle():
    saved = dict(GRAPH)
    try:
        GRAPH["ablate.errors"] = {"ablate.storage.store"}  # store imports errors: a planted two-module cycle
        assert any({"ablate.errors", "ablate.storage.store"} <= set(cycle) for cycle in _cycles())
    finally:
        GRAPH.clear()
        GRAPH.update(saved)


def _fit_leaving_fit() -> dict[str, list[str]]:
    outside = {
        m: sorted(t for t in GRAPH[m] if not (t.startswith("ablate.fit") or t == "ablate.errors"))
        for m in MODULES
        if m.startswith("ablate.fit")
    }
    return {m: t for m, t in outside.items() if t}


def _launch_reaching_pruning() -> dict[str, list[str]]:
    edges = {m: sorted(t for t in GRAPH[m] if "prune" in t) for m in MODULES if m.startswith("ablate.launch")}
    return {m: t for m, t in edges.items() if t}


def test_fit_imports_only_fit_and_errors():
    assert _fit_leaving_fit() == {}


def _flags_in_text(tree: ast.AST) -> list[str]:
    """Every command-line flag (`--fit-from`) in a string the code builds, docstrings and comments aside."""
    documents = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)}
    texts = [
        n.value
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in documents
    ]
    return [m for t in texts for m in re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", t)]


def test_fit_names_settings_not_flags():
    """fit/ knows no front end: a note, a reason or a refusal names a setting as a `{keyword}` placeholder
    (errors.Phrase, errors.SettingError), and the command line spells it as its flag."""
    found = {m: flags for m in MODULES if m.startswith("ablate.fit") if (flags := _flags_in_text(TREES[m]))}
    assert found == {}


def test_the_flag_finder_finds_a_flag():
    tree = ast.parse('"""--doc is fine"""\nx = f"give --r0 {y}"\n# --comment\n')
    assert _flags_in_text(tree) == ["--r0"]


def test_launch_does_not_import_pruning():
    assert _launch_reaching_pruning() == {}


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _private_crossings() -> list[str]:
    crossings = []
    for module, tree in TREES.items():
        aliases: dict[str, str] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                for alias in node.names:
                    target = _target(module, node, alias.name)
                    if target and target != module and _private(alias.name):
                        crossings.append(f"{module}: from {target} import {alias.name}")
                    if target and target.endswith(alias.name):
                        aliases[alias.asname or alias.name] = target
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name in MODULES and alias.asname:
                        aliases[alias.asname] = alias.name
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and _private(node.attr)
                and isinstance(node.value, ast.Name)
                and node.value.id in aliases
            ):
                crossings.append(f"{module}: {node.value.id}.{node.attr}")
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and re.fullmatch(r"ablate(\.\w+)+:_\w+", node.value)
            ):
                crossings.append(f"{module}: entry point {node.value!r}")
    return crossings


def test_no_private_names_across_modules():
    assert _private_crossings() == []


def _child_process_starters() -> list[str]:
    return [
        m
        for m, path in MODULES.items()
        if m != CHILD_PROCESS_MODULE and ("sys.executable" in (text := path.read_text()) or ".parents[" in text)
    ]


def test_one_way_to_start_a_child_python_and_to_find_the_package():
    assert _child_process_starters() == []


def _functions(tree: ast.AST, prefix: str):
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield f"{prefix}.{node.name}", node
            yield from _functions(node, f"{prefix}.{node.name}")
        elif isinstance(node, ast.ClassDef):
            yield from _functions(node, f"{prefix}.{node.name}")


def _long_modules() -> dict[str, int]:
    return {m: n for m, p in MODULES.items() if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES}


def _long_functions() -> dict[str, int]:
    long = {}
    for module, tree in TREES.items():
        for name, node in _functions(tree, module):
            lines = (node.end_lineno or node.lineno) - node.lineno + 1
            if lines > MAX_FUNCTION_LINES and name not in KERNELS:
                long[name] = lines
    return long


def test_module_sizes():
    assert _long_modules() == {}


def test_function_sizes():
    assert _long_functions() == {}


@pytest.mark.parametrize("kernel", sorted(KERNELS))
def test_kernels_named_exist(kernel):
    module = kernel.rpartition(".")[0]
    assert any(n == kernel for n, _ in _functions(TREES[module], module))


if __name__ == "__main__":  # a report of every finding: python tests/test_architecture.py
    for title, found in (
        ("import cycles", _cycles()),
        ("fit/ reaching outside", _fit_leaving_fit()),
        ("launch/ reaching pruning", _launch_reaching_pruning()),
        ("private names across modules", _private_crossings()),
        ("child processes / package root outside topology.process", _child_process_starters()),
        ("modules over 400 lines", _long_modules()),
        ("functions over 80 lines", _long_functions()),
    ):
        print(f"{title}: {len(found)}")
        for item in found.items() if isinstance(found, dict) else found:
            print("   ", item)
