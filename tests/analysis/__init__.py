"""Tests of analysis/: the comparison and the gate."""
