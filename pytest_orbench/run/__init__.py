"""The pytest run (the only wing besides plugin.py that imports pytest): options, settings, items, results."""
