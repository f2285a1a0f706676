"""The reviewer page (--orbench-html) at OR-Bench-80K sizes: its size, the time to write it, and how long headless
Chromium takes to load it and to page through it. Prints a Markdown table.

    python benchmarks/html_page.py [--sizes 10000,80000] [--repeats 1]

Every prompt of the run is a flip (the page's heaviest case: each row carries its text). Needs Node.js and
tests/js's packages (`npm ci --prefix tests/js`) and Chromium (ORBENCH_CHROMIUM, default /usr/bin/chromium), as the
browser tests do; tests/render/test_html.py keeps a small page of the same form as a test.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from pytest_orbench.render.html import render_html  # noqa: E402
from tests.action.test_action import many_categories  # noqa: E402
from tests.browser import check_page  # noqa: E402

# What a reviewer does first: the first page, the count, every direction, the next page.
STEPS = [{"rows": "#rows tr"}, {"text": "#count"}, {"select": ["#direction", "all"]}, {"text": "#count"},
         {"click": "#next"}, {"rows": "#rows tr"}]
TARGET_MB, TARGET_LOAD_S = 60.0, 30.0  # issue 37: the page of 80,000 prompts stays usable


def measure(prompts: int, folder: Path) -> tuple[float, float, float, float]:
    """Seconds to render, the page's MB, seconds until the page is ready in Chromium, seconds for the steps."""
    results = many_categories(prompts)
    page = folder / f"page-{prompts}.html"
    started = time.perf_counter()
    page.write_text(render_html(results), encoding="utf-8")
    rendered = time.perf_counter() - started
    started = time.perf_counter()
    seen = check_page(page, STEPS, timeout=600)
    browser = time.perf_counter() - started
    first, count, _, everything, _, second = seen["results"]
    pages = -(-prompts // 100)
    # A measurement of a page that did not work would mean nothing.
    assert seen["errors"] == [] and first == 100 and second == min(100, prompts - 100), seen
    assert count[0] == everything[0] == f"{prompts} prompts; page 1 of {pages}", seen
    return rendered, page.stat().st_size / 1e6, seen["ms"] / 1000, browser - seen["ms"] / 1000


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="10000,80000", help="prompts per page, comma-separated")
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    print(f"{time.strftime('%Y-%m-%d %H:%M')}, {platform.system()} {platform.machine()}, Python "
          f"{platform.python_version()}, median of {args.repeats}\n")
    print("| prompts | page MB | render s | load in Chromium s | steps s | targets |")
    print("|--:|--:|--:|--:|--:|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for prompts in sizes:
            runs = [measure(prompts, Path(tmp)) for _ in range(args.repeats)]
            rendered, mb, load, steps = (statistics.median(r[k] for r in runs) for k in range(4))
            verdict = f"page < {TARGET_MB:.0f} MB: {'yes' if mb < TARGET_MB else 'NO'}; load < {TARGET_LOAD_S:.0f} s: " \
                      f"{'yes' if load < TARGET_LOAD_S else 'NO'}"
            print(f"| {prompts:,} | {mb:.1f} | {rendered:.2f} | {load:.2f} | {steps:.2f} | {verdict} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
