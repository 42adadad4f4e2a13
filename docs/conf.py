"""Sphinx configuration of the trainingcxl documentation.

Build: ``python -m sphinx -W --keep-going -b html docs docs/_build/html``.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent / "_ext"))

project = "trainingcxl"
copyright = "the trainingcxl authors"
author = "the trainingcxl authors"

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "spec_tables",
]

source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
root_doc = "index"
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store"]

myst_enable_extensions = ["colon_fence"]
myst_heading_anchors = 3

napoleon_numpy_docstring = True
napoleon_google_docstring = False
# The gateware documents its ports in a "Members" section, laid out like "Parameters".
napoleon_custom_sections = [("Members", "params_style")]

autodoc_member_order = "bysource"
autodoc_default_options = {"members": True, "undoc-members": False, "show-inheritance": False}
autodoc_typehints = "none"

nitpicky = False

try:
    import furo  # noqa: F401
    html_theme = "furo"
except ImportError:
    html_theme = "alabaster"
html_title = "trainingcxl"
# Wide tables scroll in their own box, code blocks wrap (docs/_static/wide.css).
html_static_path = ["_static"]
html_css_files = ["wide.css"]
