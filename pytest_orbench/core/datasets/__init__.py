"""Prompt datasets: the built-in registry, pinned files, custom files, sampling."""
