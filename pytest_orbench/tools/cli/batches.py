"""`orbench batches`: the provider batches in a response store and their last known state."""

from __future__ import annotations

import argparse
from pathlib import Path

from pytest_orbench.tools.cli.option_checks import fail


def run(args: argparse.Namespace) -> int:
    """The store's provider batches: what is still open (the next run polls it, not submits it again)."""
    from datetime import UTC, datetime

    from pytest_orbench.core.store import Store
    from pytest_orbench.core.store_database import STORE_FILE
    from pytest_orbench.render.terminal import term_safe

    folder = Path(args.store)
    if not (folder / STORE_FILE).is_file():
        return fail(f"no response store in {folder}: give the folder your runs use (--store; pytest's "
                     "--orbench-store, default .orbench in the rootdir)")
    store = Store(folder, check=True)
    try:
        rows = store.batches(collected=args.all)
    finally:
        store.close()
    if not rows:
        print(f"no {'' if args.all else 'open '}batches in {folder}")
        return 0
    print("batch  endpoint  status  requests done/total  prompts  submitted (UTC)")
    for row in rows:
        counts = row.counts
        done = f"{counts.get('completed', 0)}/{counts.get('total') or row.prompts}"
        when = datetime.fromtimestamp(row.created, UTC).strftime("%Y-%m-%d %H:%M")
        state = term_safe(row.status, 40) + (" (collected)" if row.collected else "")
        print(f"{term_safe(row.id, 80)}  {term_safe(row.endpoint, 120)}  {state}  {done}  {row.prompts}  {when}")
    open_ones = sum(not r.collected for r in rows)
    if open_ones:
        print(f"{open_ones} open: the next run with this store (and --orbench-batch) polls them instead of "
              "submitting their prompts again")
    return 0
