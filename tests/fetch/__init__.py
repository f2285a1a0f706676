"""Tests of fetch/: the fetch loop, its waits and retries."""
