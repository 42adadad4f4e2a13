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
    ("driver", 3, ("trainingcxl.host.driver",)),
    ("protocol", 4, ("trainingcxl.host.protocol",)),
    # The cocotb jobs are entry points that the runner starts inside a simulator.
    ("tools", 5, ("trainingcxl.host.tools", "trainingcxl.sim.jobs")),
    ("cli", 6, ("trainingcxl.host", "trainingcxl.host.cli")),
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
    ("trainingcxl.host.protocol.training", "trainingcxl.host.tools.campaign"),
])
def test_an_upward_import_is_found(module, target):
    """The check itself: an upward import added to a module is reported."""
    bad = upward_imports([module], imports=lambda m: [*module_imports(m), (target, 1)])
    assert [(m, t) for m, _, t, _ in bad] == [(module, target)]
