"""Corpora, tokenizers, batching and synthetic tasks."""
