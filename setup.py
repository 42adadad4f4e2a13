"""The package list, derived from the layer folders so that it cannot fall behind.

`trainingcxl` is a namespace whose subpackages are the repository's top-level
folders (the package-dir mapping in pyproject.toml). setuptools' discovery in
pyproject.toml cannot produce that: it names packages after their folders
("hdl.sdram"), with no "trainingcxl." prefix, and a trainingcxl/ folder holding
the layers would change the tree's layout. So every folder below each mapped
layer is a package, found by namespace discovery (data-only folders such as
sim/dpi included, hidden ones skipped); only the mapped folders are searched,
so docs/, tests/ and caches never are.
"""

import tomllib
from pathlib import Path

from setuptools import find_namespace_packages, setup

HERE = Path(__file__).resolve().parent
LAYERS = tomllib.loads((HERE / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]

packages = []
for package, folder in LAYERS.items():
    packages.append(package)
    # __pycache__ holds bytecode, never a package.
    packages += [f"{package}.{sub}" for sub in
                 find_namespace_packages(str(HERE / folder), exclude=["*__pycache__*"])]

setup(packages=sorted(packages))
