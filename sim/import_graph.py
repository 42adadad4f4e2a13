"""The import graph of the project's modules, read from their source (nothing is imported).

Module names are resolved to files the way the import system would resolve them
(through ``sys.meta_path``, so an editable install and a plain source tree both
work), but parent packages are never executed: each level is looked up with the
finders directly, given the parent's search locations. Sources are parsed with
:mod:`ast`; every ``import`` and ``from ... import`` counts, wherever it is
(module level, inside functions or ``if`` blocks), as do
``importlib.import_module("...")`` calls with a literal name.

* :func:`module_imports`: the project modules one module imports, with line numbers
  (for layering checks);
* :func:`project_modules`: every project module reachable from some roots, with
  the package ``__init__`` modules of each (for the build cache key);
* :func:`all_modules`: every module of the package.
"""

import ast
import functools
import sys
from pathlib import Path

__all__ = ["PACKAGE", "find_module_spec", "module_file", "module_imports", "imports_of",
           "project_modules", "all_modules"]

PACKAGE = "trainingcxl"


def _in_package(name, package):
    return name == package or name.startswith(package + ".")


def find_module_spec(name):
    """The :class:`~importlib.machinery.ModuleSpec` of module ``name``, or ``None``.

    Unlike :func:`importlib.util.find_spec`, parent packages are not imported: a
    module already imported answers with its own spec, any other is looked up by
    the meta path finders with the parent's search locations.
    """
    return _spec(name)


@functools.lru_cache(maxsize=None)
def _spec(name):
    module = sys.modules.get(name)
    if module is not None and getattr(module, "__spec__", None) is not None:
        return module.__spec__
    parent, _, _ = name.rpartition(".")
    path = None
    if parent:
        pspec = _spec(parent)
        if pspec is None or pspec.submodule_search_locations is None:
            return None                 # the parent is no package: no submodules
        path = list(pspec.submodule_search_locations)
    for finder in sys.meta_path:
        find = getattr(finder, "find_spec", None)
        if find is None:
            continue
        spec = find(name, path)
        if spec is not None:
            return spec
    return None


def module_file(name):
    """Path of the Python source of module ``name`` (a package's ``__init__.py``),
    or ``None`` when it has none (a namespace package, a builtin) or is unknown."""
    spec = _spec(name)
    if spec is None or not spec.has_location or not spec.origin:
        return None
    path = Path(spec.origin)
    return path if path.suffix == ".py" and path.is_file() else None


def _is_package(name):
    spec = _spec(name)
    return spec is not None and spec.submodule_search_locations is not None


def _is_module(name):
    return _spec(name) is not None


def _resolve_relative(name, is_package, level, module):
    """Absolute name of ``from <level dots><module> import ...`` written in ``name``."""
    base = name if is_package else name.rpartition(".")[0]
    for _ in range(level - 1):
        base = base.rpartition(".")[0]
    if not base:
        raise ImportError(f"{name}: relative import beyond the top-level package")
    return f"{base}.{module}" if module else base


@functools.lru_cache(maxsize=None)
def _import_statements(name):
    """The imports written in module ``name``: ``(module, names, lineno)`` triples with
    absolute module names; ``names`` holds what ``from module import ...`` names (empty
    for ``import module`` and ``import_module("module")``)."""
    path = module_file(name)
    if path is None:
        return ()
    tree = ast.parse(path.read_bytes(), filename=str(path))
    is_package = path.name == "__init__.py"
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, (), node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = (_resolve_relative(name, is_package, node.level, node.module)
                    if node.level else node.module)
            found.append((base, tuple(alias.name for alias in node.names), node.lineno))
        elif (isinstance(node, ast.Call) and node.args and _is_import_call(node.func)
              and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            target = node.args[0].value
            if target.startswith("."):
                anchor = node.args[1] if len(node.args) > 1 else None
                if not (isinstance(anchor, ast.Constant) and isinstance(anchor.value, str)):
                    continue
                target = _relative_to(anchor.value, target)
            found.append((target, (), node.lineno))
    return tuple(sorted(found, key=lambda t: (t[2], t[0])))


def _relative_to(anchor, target):
    """The module ``importlib.import_module(target, anchor)`` imports, ``target`` relative."""
    level = len(target) - len(target.lstrip("."))
    base = anchor
    for _ in range(level - 1):
        base = base.rpartition(".")[0]
    rest = target[level:]
    return f"{base}.{rest}" if rest else base


def _is_import_call(func):
    """``importlib.import_module(...)``, ``import_module(...)`` or ``__import__(...)``."""
    if isinstance(func, ast.Attribute):
        return func.attr == "import_module"
    return isinstance(func, ast.Name) and func.id in ("import_module", "__import__")


def module_imports(name, package=PACKAGE):
    """The modules of ``package`` that module ``name`` imports directly, as
    ``(module, lineno)`` pairs sorted by line, then name.

    ``from X import y`` gives ``X.y`` when that is a submodule of package ``X`` and
    ``X`` when ``y`` is a name defined in ``X``; ``from X import y, z`` with both
    submodules gives only ``X.y`` and ``X.z`` (``X`` is their parent package). The
    package ``__init__`` modules above an imported module are not listed: they are
    implied (see :func:`project_modules`)."""
    found = set()
    for base, names, line in _import_statements(name):
        if not _in_package(base, package):
            continue
        subs = [f"{base}.{n}" for n in names if n != "*"]
        subs = [s for s in subs if _is_package(base) and _is_module(s)] if subs else []
        if not names or len(subs) < len(names):
            found.add((base, line))
        found.update((s, line) for s in subs)
    return sorted(found, key=lambda t: (t[1], t[0]))


def imports_of(name, package=PACKAGE):
    """The set of modules of ``package`` that module ``name`` imports directly."""
    return {m for m, _ in module_imports(name, package)}


def _with_parents(name):
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts) + 1)]


def project_modules(roots, package=PACKAGE):
    """Every module of ``package`` that importing ``roots`` can import, transitively:
    ``{name: source path}`` sorted by name. Importing a module runs the ``__init__``
    of each package above it, so those are included; namespace packages (no source)
    are not. Raises :class:`ModuleNotFoundError` for a root or an import of
    ``package`` that does not resolve to a source file."""
    seen = {}
    todo = [r for root in roots for r in _with_parents(root)]
    while todo:
        name = todo.pop()
        if name in seen or not _in_package(name, package):
            continue
        path = module_file(name)
        if path is None:
            spec = _spec(name)
            if spec is None or spec.submodule_search_locations is None:
                raise ModuleNotFoundError(f"no source for module {name!r}", name=name)
            seen[name] = None           # a namespace package: nothing to hash
            continue
        seen[name] = path
        for imported, _ in module_imports(name, package):
            todo += _with_parents(imported)
    return {n: p for n, p in sorted(seen.items()) if p is not None}


def _child_names(spec):
    """Names of the modules and packages in the search locations of package ``spec``."""
    names = set()
    for location in spec.submodule_search_locations or ():
        folder = Path(location)
        if not folder.is_dir():
            continue
        for entry in folder.iterdir():
            if entry.is_dir() and entry.name.isidentifier() and (entry / "__init__.py").is_file():
                names.add(entry.name)
            elif entry.suffix == ".py" and entry.stem.isidentifier() and entry.stem != "__init__":
                names.add(entry.stem)
    return names


def all_modules(package=PACKAGE):
    """Sorted names of every module of ``package`` (packages included) found in its
    search locations. A namespace package installed in editable mode has no folder to
    list, so the folders beside this module's package are offered as candidates too;
    only names that resolve to a module of ``package`` count."""
    spec = _spec(package)
    if spec is None:
        raise ModuleNotFoundError(f"no package {package!r}", name=package)
    found = set()
    todo = [(package, spec)]
    while todo:
        name, spec = todo.pop()
        found.add(name)
        if spec.submodule_search_locations is None:
            continue
        children = _child_names(spec)
        if spec.origin is None or spec.loader is None:      # a namespace package
            here = Path(__file__).parent.parent
            for root in {here, here.resolve()}:
                if root.is_dir():
                    children |= {e.name for e in root.iterdir()
                                 if e.is_dir() and (e / "__init__.py").is_file()}
        for child in sorted(children):
            cspec = _spec(f"{name}.{child}")
            if cspec is not None and cspec.origin and cspec.origin.endswith(".py"):
                todo.append((f"{name}.{child}", cspec))
    return sorted(n for n in found if n != package or module_file(n) is not None)
