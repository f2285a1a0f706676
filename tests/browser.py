"""Node and headless Chromium for the tests: Mermaid's own parser, and a real browser (tests/js, installed by
scripts/test with `npm ci` from its lock; Chromium from Debian's package)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

JS = Path(__file__).parent / "js"
CHROMIUM = os.environ.get("ORBENCH_CHROMIUM", "/usr/bin/chromium")


def _node(script: str, *args: str, stdin: str | None = None, timeout: float = 120) -> Any:
    node = shutil.which("node")
    assert node is not None, "node is not on PATH: the browser and Mermaid tests need Node.js"
    assert (JS / "node_modules").is_dir(), f"{JS / 'node_modules'} is missing: run scripts/test (npm ci --prefix tests/js)"
    done = subprocess.run([node, str(JS / script), *args], input=stdin, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "ORBENCH_CHROMIUM": CHROMIUM})
    assert done.returncode == 0, f"{script} failed: {done.stderr[-2000:]}"
    return json.loads(done.stdout)


def mermaid_errors(diagrams: list[str]) -> list[str | None]:
    """Mermaid's parser on each diagram (the text inside a ```mermaid block): None, or its error."""
    result: list[str | None] = _node("mermaid-parse.mjs", stdin=json.dumps(diagrams))
    return result


def mermaid_blocks(markdown: str) -> list[str]:
    blocks = markdown.split("```mermaid\n")[1:]
    return [block.split("```", 1)[0] for block in blocks]


def render_mermaid(diagram: str, screenshot: Path) -> dict[str, Any]:
    """The diagram drawn in headless Chromium (offline), saved as a PNG: {"error": ..., "svg": bool}."""
    source = screenshot.with_suffix(".mmd")
    source.write_text(diagram, encoding="utf-8")
    result: dict[str, Any] = _node("render-mermaid.mjs", str(source), str(screenshot))
    return result


def check_page(page: Path, steps: list[dict[str, Any]], timeout: float = 180) -> dict[str, Any]:
    """The page loaded in headless Chromium, offline, with the steps played (tests/js/check-html.mjs)."""
    result: dict[str, Any] = _node("check-html.mjs", str(page), stdin=json.dumps(steps), timeout=timeout)
    return result
