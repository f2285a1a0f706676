"""Whether the run checked everything it selected, and whether it may become the baseline."""

from __future__ import annotations

from collections.abc import Collection

import pytest

from pytest_orbench.analysis.baseline import BaselineError, load_baseline
from pytest_orbench.analysis.summary import summarize
from pytest_orbench.core.datasets.prompts import Dataset
from pytest_orbench.core.records import BaselineDocument, PromptRecord
from pytest_orbench.run.settings import Settings


def stopped(session: pytest.Session, exitstatus: int, scheduled: set[str] | None, datasets: list[Dataset],
            ran_ids: Collection[str]) -> str | None:
    """Why the run ended before its selected prompts were done (None: it did not). A stop after every
    selected prompt ran (-x on one of your own tests that came later) left nothing unchecked."""
    ran = len(ran_ids)
    total = len(scheduled) if scheduled is not None else sum(len(d.prompts) for d in datasets)
    if scheduled is not None and scheduled <= set(ran_ids) and exitstatus != pytest.ExitCode.INTERNAL_ERROR:
        return None
    if session.shouldstop or session.shouldfail:  # (a reason of ours, the damaged store's, ends as "interrupted")
        return f"the run stopped early ({session.shouldfail or session.shouldstop}) after {ran} of {total} prompts"
    if exitstatus == pytest.ExitCode.INTERRUPTED:
        return f"the run was interrupted after {ran} of {total} prompts"
    if exitstatus == pytest.ExitCode.INTERNAL_ERROR:
        return f"the run crashed (internal error) after {ran} of {total} prompts"
    if scheduled is not None:
        # Selected, and yet no result came back: an xdist worker killed while running it (the OOM killer, a
        # segfault in the user's code) reports a failure without one. The gate passed on the prompts that
        # were left, with only the warning meant for -k deselection.
        missing = sorted(scheduled - set(ran_ids))
        if missing:
            return (f"no result came back for {len(missing)} of the run's {total} selected prompts ({missing[0]}"
                    f"{', ...' if len(missing) > 1 else ''}: an xdist worker that crashed running it?)")
    return None

def incomplete(settings: Settings, datasets: list[Dataset], records: list[PromptRecord]) -> str | None:
    """Why this run, which was not stopped (`stopped`), may not become a baseline (None: it may). A
    baseline is only ever a complete, trustworthy run: every selected prompt answered, within the
    error budget, not a sample of a full baseline."""
    total = sum(len(d.prompts) for d in datasets)
    if len(records) < total:
        return (f"only {len(records)} of the run's {total} prompts ran (-k/-m deselection, -x or an interruption); "
                "a baseline needs every prompt")
    budget = settings.gate.error_budget
    for name, summary in summarize(records, {d.name: d.expected for d in datasets}).items():
        missing = summary["errors"] + summary["unscored"]
        if summary["total"] and missing / summary["total"] > budget:
            return (f"{name}: {missing} of {summary['total']} prompts errored or went unscored, over the error budget "
                    f"({100 * budget:.1f}%); fix the endpoint and run again")
    old = _existing_baseline(settings)
    if old is None:
        return None
    # Updated from a run that covers less, the baseline would check less from then on, unannounced.
    if settings.sample and not old["run"].get("sample"):
        return (f"this run is a sample ({settings.sample} per dataset) and {settings.baseline} holds a full run; "
                "update it from a full run, or delete it first to start a sampled baseline")
    if settings.sample and settings.sample < int(old["run"]["sample"] or 0):
        return (f"this run is a sample of {settings.sample} per dataset and {settings.baseline} holds "
                f"{old['run']['sample']} per dataset; update it from a sample at least as large, or delete it first "
                "to start a smaller one")
    dropped = [name for name in old["datasets"] if name not in {d.name for d in datasets}]
    if dropped:
        return (f"{settings.baseline} holds {', '.join(dropped)}, which this run did not ask; run "
                f"{'it' if len(dropped) == 1 else 'them'} too, or delete the file first to start a baseline without "
                f"{'it' if len(dropped) == 1 else 'them'}")
    return None

def _existing_baseline(settings: Settings) -> BaselineDocument | None:
    path = settings.baseline
    if path is None or not path.is_file():
        return None
    try:
        return load_baseline(path)
    except BaselineError:
        return None  # unreadable: replacing it is what the user asked for
