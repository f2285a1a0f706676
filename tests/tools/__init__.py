"""Tests of tools/: the orbench command, generate, the simulator."""
