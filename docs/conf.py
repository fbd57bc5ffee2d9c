"""Sphinx configuration of the rnnjax documentation (``sphinx-build -W -b html docs docs/_build/html``)."""

import importlib.metadata
import os
import sys

sys.path.insert(0, os.path.abspath('..'))  # the checkout's rnnjax, installed or not
sys.path.insert(0, os.path.abspath('_ext'))  # plain_docstrings

project = 'rnnjax'
author = 'The rnnjax authors'
copyright = '2026, The rnnjax authors'  # noqa: A001 (Sphinx's name)
release = importlib.metadata.version('rnnjax')
version = release

extensions = [
    'myst_parser',
    'sphinx.ext.autodoc',
    'sphinx.ext.napoleon',
    'sphinx.ext.viewcode',
    'plain_docstrings',
]
source_suffix = {'.md': 'markdown'}
root_doc = 'index'
# docs/results/ holds the measured tables, each included into its study page.
exclude_patterns = ['_build', 'results/*']

myst_heading_anchors = 3

napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_rtype = False
autodoc_member_order = 'bysource'
autodoc_typehints = 'description'
autodoc_typehints_format = 'short'
autodoc_default_options = {'members': True, 'show-inheritance': False}

html_theme = 'furo'
html_title = f'rnnjax {release}'
