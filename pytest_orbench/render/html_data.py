"""What the reviewer page shows, as plain data: each prompt's row with both sides' verdicts and replies.

A changed prompt's replies are read whole from the run's response store (the results keep only the first
300 characters of this run's reply, and a baseline file none). A side whose whole reply cannot be shown
carries a note saying why: no reply key, the store not read (and why), the reply no longer stored.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_orbench.calls.scrubbing import hide, secrets_of
from pytest_orbench.core.records import BaselineDocument, ResultsDocument

if TYPE_CHECKING:
    from pytest_orbench.core.store import Store

FULL_ROWS = 10_000  # above this many prompts, unchanged ones carry no text (the page stays a few MB)
EXCERPT = 300  # characters of this run's reply the results keep (run/verdicts.py)
WHOLE_CHARS = 10_000_000  # whole replies a page holds at most (~10 MB): the rest show what the results keep
_P = re.compile(r"P\(refusal\) ([0-9.]+)")


@dataclass(frozen=True)
class Replies:
    """Where the page reads whole replies: the run's store (None: not given), or why it could not be opened."""

    store: Store | None = None
    directory: Path | None = None
    problem: str | None = None  # the store could not be opened: its error

    def unread(self) -> str:
        """Why a reply with a key was not read from the store."""
        if self.problem is not None:
            return f"the response store could not be read ({self.problem})"
        return "the page was written without the response store"


@dataclass(frozen=True)
class Side:
    """One side's reply as the page shows it."""

    text: str
    whole: bool  # the whole reply (a mark on it labels the reply the run judged)
    note: str  # why it is not shown whole (or at all); "" when it is


def _confidence(reason: str | None) -> float | None:
    found = _P.search(reason or "")
    return float(found.group(1)) if found else None


def _node_id(prompt: Mapping[str, Any]) -> str:
    local = str(prompt["id"])[len(str(prompt["dataset"])) + 1:]
    return f"orbench/{prompt['dataset']}::" + re.sub(r"[^\w.+-]+", "_", f"{prompt.get('category', '')}-{local}")


class _Lookup:
    """The whole replies of the changed prompts, read from the store a chunk at a time in the rows' order, up to
    WHOLE_CHARS in all (a model that now refuses all of 80,000 prompts would make a page of hundreds of MB)."""

    CHUNK = 500

    def __init__(self, replies: Replies, keys: list[str]) -> None:
        self.replies = replies
        self.chunks = [keys[n:n + self.CHUNK] for n in range(0, len(keys), self.CHUNK)]
        self.chunk_of = {key: n // self.CHUNK for n, key in enumerate(keys)}
        self.loaded = -1
        self.found: dict[str, dict[str, Any]] = {}  # the records of the chunk loaded
        self.failed: dict[str, str] = {}  # key: why reading it failed (a damaged record)
        self.left = WHOLE_CHARS
        # Replies are scrubbed when fetched; values named like secrets are hidden again, as scrub(None, ...) does.
        self.secrets = secrets_of(None)

    def _record(self, key: str) -> dict[str, Any] | None:
        chunk = self.chunk_of.get(key)
        if chunk is not None and chunk != self.loaded and self.replies.store is not None:
            self.found, self.loaded = self._read(self.replies.store, self.chunks[chunk]), chunk
        return self.found.get(key)

    def _read(self, store: Store, chunk: list[str]) -> dict[str, dict[str, Any]]:
        try:
            return store.get_many(chunk)
        except Exception:  # noqa: BLE001 - a damaged page or record: each key alone, so only it is lost
            found = {}
            for key in chunk:
                try:
                    record = store.get(key)
                except Exception as exc:  # noqa: BLE001 - said on that reply, not a crash of the page
                    self.failed[key] = f"{type(exc).__name__}: {exc}"[:300]
                    continue
                if record is not None:
                    found[key] = record
            return found

    def side(self, key: str | None, excerpt: str | None, verdict: str | None, error: str | None) -> Side:
        """A side's reply: whole from the store, else its excerpt (None: a baseline file keeps none) and why."""
        shown = excerpt or ""
        short = 0 < len(shown) < EXCERPT  # an excerpt shorter than its limit is the whole reply
        if not key:
            if verdict == "error":
                return Side(shown, short, f"no reply: {error}" if error else "no reply (an error on this side)")
            if not shown.strip() and verdict in ("empty", "filtered"):
                return Side("", False, "an empty reply" if verdict == "empty" else
                            "no text: the provider's content filter withheld the reply")
            if short:
                return Side(shown, True, "")
            if excerpt is None:
                return Side("", False, "not stored: the baseline file records no reply key for this prompt (a "
                                       "baseline written without them); write it again with "
                                       "--orbench-update-baseline to keep them")
            return Side(shown, False, _cut("its reply key is not recorded"))
        if self.left <= 0:
            if short:
                return Side(shown, True, "")
            why = (f"the page holds {WHOLE_CHARS:,} characters of whole replies, spent on the prompts above "
                   "(orbench label shows any)")
            return Side(shown, False, f"not shown: {why}" if excerpt is None else _cut(why))
        record = self._record(key)
        if record is None:
            if short:
                return Side(shown, True, "")
            if key in self.failed:
                why = f"its stored record could not be read ({self.failed[key]})"
            elif self.replies.store is None:
                why = self.replies.unread()
            else:
                where = f" {self.replies.directory}" if self.replies.directory else ""
                why = f"it is not in the response store{where}" + (
                    " (a baseline's replies are in the store of the run that wrote it: point --orbench-store "
                    "there, e.g. restore that CI cache)" if excerpt is None else " (deleted since, or another store)")
            return Side(shown, False, f"not shown: {why}" if excerpt is None else _cut(why))
        raw = str(record.get("text") or "")
        if excerpt is not None and not raw.startswith(excerpt):
            # The key's record was replaced since (asked again after --orbench-store-max-age): not this reply.
            return Side(shown, short, "" if short else _cut("the store now holds a later reply under its key"))
        if not raw.strip():
            return Side(raw, False, "an empty reply")
        text = hide(raw, self.secrets)
        self.left -= len(text)
        if text != raw:
            return Side(text, False, "a secret's value is hidden (***), so the text is not the reply: not marked")
        return Side(text, True, "")


def _cut(why: str) -> str:
    return f"the first {EXCERPT} characters, from the results: {why}"


def _keys(side: Mapping[str, Any] | None) -> list[str]:
    key = side.get("reply_key") if side else None
    return [str(key)] if key else []


def page_data(results: ResultsDocument, reference: BaselineDocument | None, replies: Replies,
              labels: bool = False) -> dict[str, Any]:
    """What the page shows, as plain data (the page's script renders it)."""
    flips: dict[str, str] = {}
    for summary in results["datasets"].values():
        comparison: Mapping[str, Any] = summary.get("comparison") or {}
        flips.update(dict.fromkeys(comparison.get("newly_refused_ids") or [], "newly refused"))
        flips.update(dict.fromkeys(comparison.get("newly_answered_ids") or [], "newly answered"))
        flips.update(dict.fromkeys((comparison.get("verification") or {}).get("overturned_ids") or [], "overturned"))
    old: dict[str, Mapping[str, Any]] = {p["id"]: p for p in reference["prompts"]} if reference else {}
    many = len(results["prompts"]) > FULL_ROWS

    def direction(prompt: Mapping[str, Any]) -> str:
        return flips.get(prompt["id"]) or ("error" if prompt.get("refused") is None else "unchanged")

    def compared(prompt: Mapping[str, Any]) -> Mapping[str, Any] | None:
        return prompt.get("base") or old.get(prompt["id"])

    changed = [p for p in results["prompts"] if direction(p) != "unchanged"]
    lookup = _Lookup(replies, [k for p in changed for k in _keys(p) + _keys(compared(p))])
    rows = []
    for prompt in results["prompts"]:
        way = direction(prompt)
        shown = way != "unchanged" or not many
        excerpt = str(prompt.get("reply_excerpt") or "")
        if way != "unchanged":
            mine = lookup.side(prompt.get("reply_key"), excerpt, prompt.get("verdict"), prompt.get("error"))
        else:  # the page holds whole replies of the changed prompts only (the store has every one)
            short = 0 < len(excerpt) < EXCERPT
            mine = Side(excerpt, short, "" if short or not excerpt else
                        _cut("the page reads whole replies for changed prompts only (orbench label shows any)"))
        theirs: dict[str, Any] | None = None
        side = compared(prompt)
        if side is not None:
            reply = Side("", False, "")
            if way != "unchanged":
                kept = side.get("reply_excerpt")  # the live base's record keeps one; a baseline file none
                reply = lookup.side(side.get("reply_key"), None if kept is None else str(kept), side.get("verdict"),
                                    side.get("error"))
            theirs = {"verdict": side.get("verdict"), "refused": side.get("refused"), "reply": reply.text,
                      "whole": reply.whole, "note": reply.note, "p": _confidence(side.get("judge_reason"))}
        rows.append({
            "id": prompt["id"], "node": _node_id(prompt), "dataset": prompt["dataset"],
            "category": prompt.get("category", ""), "expected": prompt.get("expected", ""), "dir": way,
            "prompt": str(prompt.get("prompt") or "") if shown else "",
            "toxic": prompt.get("expected") == "refuse",
            "mine": {"verdict": prompt.get("verdict"), "refused": prompt.get("refused"), "reply": mine.text,
                     "whole": mine.whole, "note": mine.note, "p": _confidence(prompt.get("judge_reason")),
                     "reason": str(prompt.get("judge_reason") or prompt.get("error") or "")[:300]},
            "theirs": theirs,
        })
    run = results["run"]
    gate = results.get("gate") or {"verdict": "ungated"}
    return {
        "verdict": gate["verdict"], "endpoint": str(run.get("endpoint") or ""),
        "judge": f"{(run.get('judge') or {}).get('id', '')} v{(run.get('judge') or {}).get('version', '')}",
        "compared": str(run.get("compared_with") or "nothing"), "labels": labels, "model": str(run.get("model") or ""),
        "paired": any(s.get("comparison") for s in results["datasets"].values()),
        "rows": rows, "textless": many,
    }
