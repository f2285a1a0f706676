"""Tests of core/: datasets, the store, statistics, dependencies."""
