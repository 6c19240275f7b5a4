# SPDX-License-Identifier: BSD-3-Clause
"""Sphinx configuration of the fedmm documentation.

Build (no Makefile needed; warnings are errors)::

    python -m sphinx -W -b html docs docs/_build/html

The API reference pages in ``api/`` list every public name by hand (one autosummary block per
module, generated stubs in ``api/generated/``); ``tests/docs/test_docs.py`` checks them against the
modules' ``__all__``.  The gallery scripts in ``examples/gallery/`` run at every build.
"""
from __future__ import annotations

import os
import shutil

import fedmm

HERE = os.path.dirname(os.path.abspath(__file__))
# autosummary never deletes a stub: start from an empty directory so that a name removed from a page
# leaves no orphan document behind (an orphan is a warning, hence an error under -W).
shutil.rmtree(os.path.join(HERE, "api", "generated"), ignore_errors=True)

project = "fedmm"
author = "fedmm developers"
copyright = "2026, fedmm developers"
release = fedmm.__version__
version = release

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.mathjax",
    # Ships MathJax 3 and points mathjax_path at the copy in _static: formulas render with no network.
    "sphinx-mathjax-offline",
    "sphinx.ext.viewcode",
    "numpydoc",
    "sphinx_gallery.gen_gallery",
    "myst_parser",
]

source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
templates_path = ["_templates"]
exclude_patterns = ["_build", "figures/README.md", "auto_examples/*.ipynb", "auto_examples/*.py",
                    "auto_examples/*.zip", "auto_examples/*.json", "auto_examples/*.md5"]

# -- autodoc / autosummary / numpydoc -------------------------------------------------------------
autosummary_generate = True
autosummary_imported_members = True
autodoc_typehints = "none"           # numpydoc's Parameters sections carry the types
autodoc_member_order = "bysource"
numpydoc_show_class_members = False  # the class template lists the members
numpydoc_class_members_toctree = False
numpydoc_xref_param_type = False
numpydoc_validation_checks: set[str] = set()

# -- myst (the markdown pages) ---------------------------------------------------------------------
myst_enable_extensions = ["dollarmath"]
myst_heading_anchors = 3

# -- sphinx-gallery ---------------------------------------------------------------------------------
sphinx_gallery_conf = {
    "examples_dirs": os.path.join(os.pardir, "examples", "gallery"),
    "gallery_dirs": "auto_examples",
    # Every example whose name starts with plot_ runs at build time (each takes seconds).  Set the
    # environment variable FEDMM_DOCS_NO_GALLERY=1 to build the pages without running them.
    "filename_pattern": r"^$" if os.environ.get("FEDMM_DOCS_NO_GALLERY") else r"/plot_",
    "plot_gallery": "False" if os.environ.get("FEDMM_DOCS_NO_GALLERY") else "True",
    "abort_on_example_error": True,
    "download_all_examples": False,
    "remove_config_comments": True,
    "within_subsection_order": "FileNameSortKey",
    "image_scrapers": ("matplotlib",),
    "matplotlib_animations": False,
    "show_memory": False,
    "write_computation_times": False,
}

# -- HTML -------------------------------------------------------------------------------------------
html_theme = "alabaster"
html_title = f"fedmm {release}"
html_theme_options = {
    "description": "Federated majorize-minimization with compiled kernels",
    "fixed_sidebar": True,
}
html_static_path = ["_static"]
html_css_files = ["fedmm.css"]  # code blocks wrap their long lines instead of hiding them


# -- rendered class bases ---------------------------------------------------------------------------
def public_bases(app, name, obj, options, bases):
    """``autodoc-process-bases``: a page's "Bases:" line names public classes only.

    A private base (an implementation mixin such as the estimators' shared federation code) is replaced
    by its own bases, so the reader sees the public classes whose behaviour the class inherits.
    """
    i = 0
    while i < len(bases):
        base = bases[i]
        if isinstance(base, type) and base.__name__.startswith("_"):
            bases[i:i + 1] = [b for b in base.__bases__ if b is not object and b not in bases]
        else:
            i += 1
    if not bases:
        bases.append(object)


# -- numpydoc: its docstring template compiled once -------------------------------------------------------
def one_numpydoc_template():
    """numpydoc's ``get_doc_object``, compiling its Jinja template once per builder.

    numpydoc builds a Jinja environment and compiles ``numpydoc_docstring.rst`` again for every docstring
    and every signature it processes (thousands per build), although the template and its search path do
    not change during a build.  This one keeps the first template of each builder and builds the same doc
    objects (numpydoc's own code with that template); numpydoc's ``setup`` takes such a function too.
    """
    from numpydoc import docscrape_sphinx as ds

    templates = {}

    def get_doc_object(obj, what=None, doc=None, config=None, builder=None):
        config = {} if config is None else config
        if id(builder) not in templates:
            out = ds.get_doc_object(obj, what=what, doc=doc, config=config, builder=builder)
            templates[id(builder)] = (builder, config["template"])  # the builder kept: its id stays its own
            return out
        config["template"] = templates[id(builder)][1]
        return ds.get_doc_object_orig(obj, what=what, doc=doc, config=config, class_doc=ds.SphinxClassDoc,
                                      func_doc=ds.SphinxFunctionDoc, obj_doc=ds.SphinxObjDoc)

    return get_doc_object


def setup(app):
    app.connect("autodoc-process-bases", public_bases)
    import numpydoc.numpydoc
    from numpydoc import docscrape_sphinx

    # only with the numpydoc whose internals it calls (else numpydoc's own, slower path)
    if hasattr(docscrape_sphinx, "get_doc_object_orig") and hasattr(numpydoc.numpydoc, "get_doc_object"):
        numpydoc.numpydoc.get_doc_object = one_numpydoc_template()
