"""Durations as settings write them ('7d', '12h', 'never') and as reports print them."""

from __future__ import annotations

import re
from typing import Any

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*$", re.IGNORECASE)
_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_age(value: Any, where: str = "--orbench-store-max-age") -> float | None:
    """'7d', '12h', '30m', '45s', '0' -> seconds; 'never' -> None (no limit). ValueError naming the fix."""
    text = str(value).strip().lower()
    if text in ("never", "none", "inf", "forever"):
        return None
    match = _DURATION.match(text)
    if not match:
        raise ValueError(f"{where} {value!r}: use a number with a unit (7d, 12h, 30m, 45s), 0 to always ask "
                         "again, or never")
    number, unit = float(match.group(1)), match.group(2).lower()
    if not unit and number:
        # `store_max_age: 7` meant a week more often than 7 seconds (which asks, and pays for, everything again).
        raise ValueError(f"{where} {value!r} has no unit: write {match.group(1)}d, {match.group(1)}h, "
                         f"{match.group(1)}m or {match.group(1)}s (0 always asks again; never: no limit)")
    return number * _UNITS[unit]


def format_age(seconds: float | None) -> str:
    if seconds is None:
        return "never"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"
