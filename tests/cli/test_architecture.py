"""The layers have one direction and no cycles (docs/architecture.md).

Every import of a project module is read from the source (top-level and inside functions alike;
an ``if __name__ == "__main__":`` block or an ``if TYPE_CHECKING:`` block is not an import the
library makes), and the graph must be free of cycles, and must go downwards only:

    commands -> pipeline -> catalogue / monitor
             -> agents / envs / faults / logs / analysis / detection
             -> config / hooks / metrics / store / markdown / advantages

The packages of the library layer (agents ... detection) do not import each other, except the few
pairs in :data:`PEER_OK`, each with its reason; no pair is allowed both ways.

Imports sit at the top of their module except where a module is imported on every start of a
host program that should not pay for it (Hydra imports every plugin module at start-up; pytest
loads the plugin in every session of anyone who installed the package) or where the import is an
optional extra (``[trl]``): :data:`DEFERRED_OK` lists those modules with the reason.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.paths import ROOT

PACKAGES = ("harness", "faults", "hydra_plugins")

#: layer of a module, by the longest matching prefix (higher imports lower, never the reverse)
LAYERS: dict[str, int] = {
    "harness": 0, "harness.config": 0, "harness.hooks": 0, "harness.metrics": 0, "harness.store": 0,
    "harness.markdown": 0, "harness.advantages": 0,
    "harness.agents": 1, "harness.envs": 1, "faults": 1, "harness.logs": 1, "harness.analysis": 1,
    "harness.detection": 1,
    "harness.catalogue": 2, "harness.monitor": 2,
    "harness.pipeline": 3, "harness.testing": 3, "harness.pytest_plugin": 3, "hydra_plugins": 3,
    "harness.commands": 4,
    # ``python -m harness.X`` shims: entry points (their command is imported under __main__ only)
    "harness.diagnose": 4, "harness.evaluate": 4, "harness.export": 4, "harness.watch": 4,
}
LIBRARY = 1
LAYER_NAMES = {0: "leaves (config / hooks / metrics / store / markdown / advantages)",
               1: "library (agents, envs, faults, logs, analysis, detection)",
               2: "built on the library (catalogue, monitor)", 3: "pipeline", 4: "commands"}

#: the library packages that may import another library package (importer, imported), and why
PEER_OK = {
    ("harness.agents", "harness.envs"): "a trainer makes and steps the envs it trains on",
    ("harness.analysis", "harness.logs"): "the examples render stored runs in each framework's view of the log",
    ("harness.analysis", "faults"): "labels, plots and examples look a run's fault up in the registry",
    ("harness.detection", "harness.analysis"): "the diagnosis applies analysis's signatures, evidence and model",
    ("harness.detection", "harness.logs"): "the diagnosis loads the log it is given",
    # faults imports leaves only; its registry is filled by importing it (and by register() from outside),
    # so no lower layer can hold the names and expected signatures
    ("harness.detection", "faults"): "the diagnosis reads each fault's algos and expected signatures",
}

#: modules allowed to import project modules inside functions, and why
DEFERRED_OK = {
    "hydra_plugins.harness_sweeper.base": "Hydra imports every plugin module at each start-up",
    "hydra_plugins.harness_sweeper.catalogue_sweeper": "Hydra imports every plugin module at each start-up",
    "hydra_plugins.harness_sweeper.dataset_sweeper": "Hydra imports every plugin module at each start-up",
    "harness.pytest_plugin": "pytest loads the plugin in every session of anyone who installed the package",
    "faults.adv_std_no_floor": "diagnose imports every fault without torch; the GRPO advantages it recomputes are torch",
    "faults.group_misalignment": "diagnose imports every fault without torch; the GRPO advantages it recomputes are torch",
    "harness.analysis.model": "diagnose reads a saved model with numpy alone; scikit-learn (1-2 s to import) only fits",
}


def _modules() -> dict[str, Path]:
    mods = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            mods[".".join(parts)] = path
    return mods


MODULES = _modules()


def _resolve(name: str) -> str | None:
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _skipped(node: ast.AST) -> bool:
    """``if __name__ == "__main__":`` and ``if TYPE_CHECKING:`` blocks."""
    if not isinstance(node, ast.If):
        return False
    test = ast.unparse(node.test)
    return test in ("__name__ == '__main__'", 'TYPE_CHECKING', 'typing.TYPE_CHECKING')


def imports(module: str) -> list[tuple[str, bool]]:
    """(imported project module, at module top?) for every import statement of ``module``."""
    tree = ast.parse(MODULES[module].read_text())
    out = []

    def visit(node: ast.AST, top: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if _skipped(child):
                continue
            names = []
            if isinstance(child, ast.Import):
                names = [a.name for a in child.names]
            elif isinstance(child, ast.ImportFrom) and child.level == 0 and child.module:
                names = [f"{child.module}.{a.name}" for a in child.names]
            for name in names:
                target = _resolve(name)
                if target is not None and target != module:
                    out.append((target, top))
            nested = isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda))
            visit(child, top and not nested)

    visit(tree, True)
    return out


GRAPH = {m: imports(m) for m in MODULES if not m.endswith("__main__")}


def layer(module: str) -> int:
    prefix = max((p for p in LAYERS if module == p or module.startswith(p + ".")), key=len)
    return LAYERS[prefix]


def package(module: str) -> str:
    """The package a module belongs to: ``faults``, ``hydra_plugins`` or ``harness.<first part>``."""
    parts = module.split(".")
    return parts[0] if parts[0] != "harness" or len(parts) == 1 else ".".join(parts[:2])


def peer_imports() -> dict[tuple[str, str], list[str]]:
    """(importer, imported) library package -> the module imports between them."""
    out: dict[tuple[str, str], list[str]] = {}
    for m, edges in GRAPH.items():
        for t, _ in edges:
            if layer(m) == layer(t) == LIBRARY and package(m) != package(t):
                out.setdefault((package(m), package(t)), []).append(f"{m} -> {t}")
    return out


def _cycles() -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def connect(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w, _ in GRAPH.get(v, []):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in GRAPH:
        if v not in index:
            connect(v)
    return found


def test_every_module_is_in_a_layer():
    assert all(layer(m) >= 0 for m in GRAPH)


def test_no_import_cycle():
    assert _cycles() == []


def test_layers_point_downwards():
    upward = [f"{m} ({LAYER_NAMES[layer(m)]}) imports {t} ({LAYER_NAMES[layer(t)]})"
              for m, edges in GRAPH.items() for t, _ in edges if layer(t) > layer(m)]
    assert upward == []


def test_library_packages_do_not_import_each_other():
    """agents, envs, faults, logs, analysis and detection are peers: one imports another only where
    :data:`PEER_OK` says why (move shared code down to a leaf, or pass it in from above, instead)."""
    wrong = sorted(f"{edge} (add a reason to PEER_OK only if moving the code down is unreasonable)"
                   for pair, edges in peer_imports().items() if pair not in PEER_OK for edge in edges)
    assert wrong == []


@pytest.mark.parametrize("pair, why", sorted(PEER_OK.items()))
def test_peer_imports_are_justified_and_one_way(pair, why):
    importer, imported = pair
    assert {layer(importer), layer(imported)} == {LIBRARY} and why
    assert (imported, importer) not in PEER_OK, f"{importer} and {imported} may not import each other both ways"
    assert pair in peer_imports(), f"{importer} no longer imports {imported}: drop it from PEER_OK"


def test_nothing_outside_commands_imports_them():
    offenders = [f"{m} -> {t}" for m, edges in GRAPH.items() for t, _ in edges
                 if t.startswith("harness.commands") and not m.startswith("harness.commands")]
    assert offenders == []


def test_project_imports_sit_at_module_top():
    deferred = sorted({f"{m} -> {t}" for m, edges in GRAPH.items() for t, top in edges
                       if not top and m not in DEFERRED_OK})
    assert deferred == []


@pytest.mark.parametrize("module, why", sorted(DEFERRED_OK.items()))
def test_deferred_imports_are_justified(module, why):
    assert module in MODULES, f"{module} is gone: drop it from DEFERRED_OK"
    assert any(not top for _, top in GRAPH[module]), f"{module} defers nothing: drop it from DEFERRED_OK"


def test_diagnose_runs_without_torch_or_scikit_learn():
    """Reading a log and answering it needs neither torch nor scikit-learn: the fault registry, the hooks,
    the diagnosis and the saved model load without them (torch took 3 of diagnose's 7.7 s of start-up on a
    busy day; scikit-learn with scipy 1.7 s)."""
    import subprocess
    import sys

    log = ROOT / "harness" / "data" / "selftest" / "sb3_nan" / "progress.csv"
    code = ("import sys\nfrom harness.commands.diagnose import main\ntry:\n    main(['log=" + str(log) + "'])\n"
            "except SystemExit:\n    pass\n"
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'sklearn', 'scipy'}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300,
                         env={**__import__("os").environ, "HF_HUB_OFFLINE": "1"})
    assert out.returncode == 0, out.stderr
    assert "sb3_nan" in out.stdout or "nonfinite" in out.stdout or "non-finite" in out.stdout, out.stdout[-800:]
    assert out.stdout.strip().splitlines()[-1] == "[]", out.stdout[-800:]


if __name__ == "__main__":     # every import between two packages, and what the rules above say of it
    for m, edges in sorted(GRAPH.items()):
        for t, top in sorted(set(edges)):
            if package(m) == package(t):
                continue
            if layer(t) > layer(m):
                verdict = "UPWARD"
            elif layer(t) == layer(m) == LIBRARY:
                verdict = "peer, allowed" if (package(m), package(t)) in PEER_OK else "PEER"
            else:
                verdict = "down"
            print(f"{verdict:14} {m} -> {t}{'' if top else ' (deferred)'}")
