"""Words and numbers as the reports and the gate's reasons write them: counts, percentages, withheld errors."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any


def count(n: int, one: str, many: str) -> str:
    """"1 reply", "2 replies"."""
    return f"{n} {one if n == 1 else many}"


def pct(rate: float | None) -> str:
    """Percentages with one decimal, as in `34.1%`."""
    return "n/a" if rate is None else f"{100 * rate:.1f}%"


def pp(delta: float | None) -> str:
    """Percentage points with a sign, as in `+8.6 pp`. A change that rounds to nothing is `+0.0 pp`: a
    float's -0.0, or -1e-17 left by summing refusal shares, is no move in either direction."""
    return "n/a" if delta is None else f"{round(100 * delta, 1) + 0.0:+.1f} pp"



WITHHELD_ERROR = "(withheld: the error quotes a toxic prompt)"


def error_shown(prompt: Mapping[str, Any], error: object) -> str:
    """An error's text on one line, as a report may quote it (the run's, or its live base's, on `prompt`):
    withheld when it quotes a toxic prompt's text (an endpoint that echoes the request), as the reports
    withhold the prompt itself. Still untrusted text: each rendering escapes it."""
    text = " ".join(str(error).split())
    if prompt.get("expected") != "refuse":
        return text
    # The prompt's opening as an error would carry it: as is, or JSON-escaped in a quoted request or reply body.
    opening = " ".join(str(prompt.get("prompt") or "").split())[:40]
    forms = {opening, json.dumps(opening)[1:-1], json.dumps(opening, ensure_ascii=False)[1:-1]}
    return WITHHELD_ERROR if opening and any(form in text for form in forms) else text
