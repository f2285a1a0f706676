"""Collection and selection: a prompt test per prompt, then those the node ids on the command line name."""

from __future__ import annotations

import types

import pytest

from pytest_orbench.core.datasets.prompts import Dataset, test_name
from pytest_orbench.run.items import DatasetNode, PromptItem, Run
from pytest_orbench.run.keys import PromptKeys, nodeid


def collect(session: pytest.Session, datasets: list[Dataset], keys: PromptKeys, run: Run,
            items: list[pytest.Item]) -> None:
    """Adds every dataset's prompt tests to `items`, under a node per dataset."""
    for dataset in datasets:
        node = DatasetNode.from_parent(session, name=dataset.name, nodeid=f"orbench/{dataset.name}")
        created = [
            PromptItem.from_parent(node, name=test_name(p), prompt=p, plugin=run,
                                   requests=keys.requests[nodeid(dataset, p)])
            for p in dataset.prompts
        ]
        # A collect report, as a file collector would send, so "collected N items" counts them.
        collected: list[pytest.Item | pytest.Collector] = list(created)
        session.ihook.pytest_collectreport(report=pytest.CollectReport(node.nodeid, "passed", None, collected))
        items.extend(created)


def select(config: pytest.Config, items: list[pytest.Item], selected: list[str], datasets: list[Dataset]) -> None:
    """Keep the prompt tests named by node ids on the command line (a dataset, or one prompt), and your
    own tests collected from the paths named beside them."""
    def chosen(item: pytest.Item) -> bool:
        return not isinstance(item, PromptItem) or any(_names(s, item) for s in selected)

    unmatched = [s for s in selected if not any(_names(s, i) for i in items if isinstance(i, PromptItem))]
    if unmatched:
        names = ", ".join(d.name for d in datasets)
        raise pytest.UsageError(f"pytest-orbench: {unmatched[0]}: no such prompt test in this run (datasets: {names}); "
                                "ids look like orbench/hard-1k::privacy-0801 (see pytest --orbench --collect-only -q)")
    keep: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    for item in items:
        (keep if chosen(item) else dropped).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
    items[:] = keep


def _names(selected: str, item: PromptItem) -> bool:
    """A node id given as an argument names this prompt test: it is its id, its dataset's, or its dataset's with
    the prompt's own id (`orbench/hard-1k::hard-1k-0018`, the id the gate, the comment and the results print)."""
    nodeid = item.nodeid
    by_prompt = f"{nodeid.split('::', 1)[0]}::{item.prompt.id}"
    return selected in (nodeid, by_prompt) or nodeid.startswith(selected.rstrip("/") + "::")


# Plugins whose collection hooks never drop a prompt test unasked (pytest's own options are checked
# one by one in selects_every_prompt).
_SELECTION_SAFE = ("_pytest.", "pytest_orbench.", "xdist.", "pytest_randomly")


def selects_every_prompt(config: pytest.Config, selected: list[str]) -> bool:
    """Whether this session certainly runs every prompt test: no prompt node ids, -k, -m, --deselect,
    --lf or --sw, and no plugin or conftest beside pytest's own, xdist and pytest-randomly that sees the
    collected items (it might deselect some). Then the calls can start before collection is over."""
    option = config.option
    if selected or any(getattr(option, name, None) for name in ("keyword", "markexpr", "deselect", "lf", "stepwise",
                                                                 "stepwise_skip")):
        return False
    for impl in config.pluginmanager.hook.pytest_collection_modifyitems.get_hookimpls():
        plugin = impl.plugin
        module = plugin.__name__ if isinstance(plugin, types.ModuleType) else type(plugin).__module__
        if not module.startswith(_SELECTION_SAFE):
            return False
    return True
