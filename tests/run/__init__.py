"""Tests of run/: settings, records, what a run says."""
