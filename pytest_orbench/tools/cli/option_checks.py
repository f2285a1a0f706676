"""How a subcommand refuses: the message with exit status 2, and the range check of an integer option."""

from __future__ import annotations

import argparse
import sys


def fail(message: str) -> int:
    print(f"orbench: {message}", file=sys.stderr)
    return 2


def at_least(args: argparse.Namespace, name: str, low: int) -> str | None:
    """The problem with an integer option below its smallest sensible value, or above the largest the plugin's
    setting of the same name takes (options.RANGES): None when there is none."""
    from pytest_orbench.run.options import RANGES

    value = getattr(args, name)
    high = RANGES.get(name, (low, float("inf")))[1]
    if value is not None and value < low:
        return f"--{name.replace('_', '-')} must be at least {low}, got {value}"
    if value is not None and value > high:
        return f"--{name.replace('_', '-')} must be between {low} and {high:g}, got {value}"
    return None
