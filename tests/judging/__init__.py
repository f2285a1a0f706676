"""Tests of judging/: the judges, their registry, training and labels."""
