"""Corpora, tokenizers, batching and synthetic tasks."""

# The submodules, imported on use (``from rnnjax.data import text``), not with the package.
__all__ = ['batching', 'classification', 'corpora', 'subwords', 'synthetic', 'text']
