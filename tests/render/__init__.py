"""Tests of render/: charts and the HTML page in a real browser."""
