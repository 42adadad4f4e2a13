"""The package reads as layers: every import points down (docs/architecture.md, "Layers").

A module may import its own layer and the layers of a lower rank; layers of one
rank (the gateware and the models; the simulation harness and the boards) do
not import each other. Imports inside functions count too.
"""

import pytest

from trainingcxl.sim.import_graph import all_modules, module_imports

#: (layer, rank, module prefixes), bottom to top; the longest prefix decides.
LAYERS = (
    ("spec", 0, ("trainingcxl.spec",)),
    ("hdl", 1, ("trainingcxl.hdl",)),
    ("model", 1, ("trainingcxl.host.model",)),
    ("sim", 2, ("trainingcxl.sim",)),
    ("boards", 2, ("trainingcxl.boards",)),
    ("pmem", 2, ("trainingcxl.host.pmem",)),
    ("driver", 3, ("trainingcxl.host.driver",)),
    ("protocol", 4, ("trainingcxl.host.protocol",)),
    # Jobs: what a command asks of the layers below, as typed records.
    ("jobs", 5, ("trainingcxl.host.jobs",)),
    # The applications the runner starts inside a simulator, and their launcher.
    ("apps", 6, ("trainingcxl.host.apps",)),
    # The run layer: tasks, the runners (one device, a pool's coordinator, killed and
    # resumed processes), the fan-out on a cluster and its journal.
    ("runs", 7, ("trainingcxl.host.runs",)),
    # What the commands share: argument types, failure plans, the ladder's runs.
    ("tools", 8, ("trainingcxl.host.tools",)),
    ("commands", 9, ("trainingcxl.host.commands",)),
    ("cli", 10, ("trainingcxl.host", "trainingcxl.host.cli")),
)


def layer_of(module):
    best = None
    for name, rank, prefixes in LAYERS:
        for prefix in prefixes:
            if module == prefix or module.startswith(prefix + "."):
                if best is None or len(prefix) > len(best[2]):
                    best = (name, rank, prefix)
    if best is None:
        raise AssertionError(f"{module} is in no layer: add it to LAYERS")
    return best[:2]


def upward_imports(modules, imports=module_imports):
    """``(module, line, imported, why)`` for every import that does not point down."""
    bad = []
    for module in modules:
        own, rank = layer_of(module)
        for target, line in imports(module):
            other, other_rank = layer_of(target)
            if other != own and other_rank >= rank:
                bad.append((module, line, target, f"{own} imports {other}"))
    return bad


def test_every_module_has_a_layer():
    modules = all_modules()
    assert len(modules) > 80, "the package's modules were not found"
    for module in modules:
        layer_of(module)


def test_imports_point_down():
    bad = upward_imports(all_modules())
    assert not bad, "upward imports:\n" + "\n".join(
        f"  {m}:{line} imports {t} ({why})" for m, line, t, why in bad)


@pytest.mark.parametrize("module, target", [
    ("trainingcxl.hdl.top", "trainingcxl.host.model.golden"),
    ("trainingcxl.spec.config", "trainingcxl.hdl.control"),
    ("trainingcxl.host.protocol.training", "trainingcxl.host.commands.campaign"),
])
def test_an_upward_import_is_found(module, target):
    """The check itself: an upward import added to a module is reported."""
    bad = upward_imports([module], imports=lambda m: [*module_imports(m), (target, 1)])
    assert [(m, t) for m, _, t, _ in bad] == [(module, target)]


def import_cycles(modules, imports=module_imports):
    """The strongly connected groups of more than one module in the import graph
    (imports inside functions count): each is a cycle."""
    graph = {m: {t for t, _ in imports(m) if t in modules} for m in modules}
    index, low, stack, on_stack, groups = {}, {}, [], set(), []

    def visit(m):                       # Tarjan's algorithm
        index[m] = low[m] = len(index)
        stack.append(m)
        on_stack.add(m)
        for t in graph[m]:
            if t not in index:
                visit(t)
                low[m] = min(low[m], low[t])
            elif t in on_stack:
                low[m] = min(low[m], index[t])
        if low[m] == index[m]:
            group = []
            while True:
                t = stack.pop()
                on_stack.discard(t)
                group.append(t)
                if t == m:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for m in modules:
        if m not in index:
            visit(m)
    return groups


def test_no_import_cycles():
    modules = set(all_modules())
    cycles = import_cycles(modules)
    assert not cycles, "import cycles:\n" + "\n".join("  " + " <-> ".join(c) for c in cycles)


def test_an_import_cycle_is_found():
    """The check itself: a module importing one that imports it back is a cycle."""
    edges = {"a": ["b"], "b": ["c"], "c": ["a"], "d": ["a"]}
    assert import_cycles(set(edges), imports=lambda m: [(t, 1) for t in edges[m]]) == [["a", "b", "c"]]


#: Module names used by two modules for different things, left to rename.
SHARED_NAMES = {"bridge", "controller", "export", "formal", "layouts", "netlist", "pool", "streams",
                "top"}


def test_no_new_module_shares_a_file_name():
    """A file name says what the module is: a new module does not take a name another
    module already has (the names of :data:`SHARED_NAMES` predate this check)."""
    modules = all_modules()
    packages = {m.rsplit(".", 1)[0] for m in modules}
    by_name = {}
    for module in modules:
        if module not in packages:
            by_name.setdefault(module.rsplit(".", 1)[-1], []).append(module)
    shared = {k: v for k, v in by_name.items() if len(v) > 1 and k not in SHARED_NAMES}
    assert not shared, "\n".join(f"  {k}: {', '.join(v)}" for k, v in sorted(shared.items()))
