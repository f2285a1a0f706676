"""The GitHub Action's logic: `python -m action` after `pytest --orbench` (see action.yml)."""
