"""Pure analysis of results: summaries, baselines, the gate."""
