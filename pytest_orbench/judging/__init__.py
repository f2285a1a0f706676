"""Judges: the registry, the keyword judge (features and weights), LLM judge calls, labels, adaptation, audit."""
