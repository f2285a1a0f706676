"""The one table of built-in datasets: each one's pinned upstream file, expectation and role, declared once."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Literal

Expected = Literal["answer", "refuse"]
Role = Literal["over-refusal", "toxic"]

OR_BENCH_REPO = "bench-llm/or-bench"
OR_BENCH_REVISION = "e36d8b80e81837c8a8f264bbb2a49f1b32c7e272"
XSTEST_REPO = "paul-rottger/xstest"
XSTEST_REVISION = "d7bb5bd738c1fcbc36edd83d5e7d1b71a3e2d84d"


@dataclass(frozen=True)
class SourceFile:
    """One pinned upstream file."""

    filename: str
    sha256: str
    host: Literal["huggingface", "github"]
    repo: str
    revision: str

    def url(self) -> str:
        if self.host == "huggingface":
            # HF_ENDPOINT is huggingface_hub's own variable for mirrors; honour it the same way.
            base = os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")
            return f"{base}/datasets/{self.repo}/resolve/{self.revision}/{self.filename}"
        base = os.environ.get("ORBENCH_GITHUB_RAW_ENDPOINT", "https://raw.githubusercontent.com").rstrip("/")
        return f"{base}/{self.repo}/{self.revision}/{self.filename}"


HARD_1K = SourceFile(
    "or-bench-hard-1k.csv",
    "a6e2f1166416efe5901f3bb05c47dc92ab3aca3acfe143693d38b8057d841e6d",
    "huggingface", OR_BENCH_REPO, OR_BENCH_REVISION,
)
TOXIC = SourceFile(
    "or-bench-toxic.csv",
    "3be45901faae3b4b2b51bf7f8a2784c1650a1cc8c631dbc8b171d5312d4e0057",
    "huggingface", OR_BENCH_REPO, OR_BENCH_REVISION,
)
# The 80k hash is the one third-party benchmark cards list next to the hard/toxic pins; no copy
# could be checked here (shared/datasets/SOURCES.md), so a mismatch says so.
OR_80K = SourceFile(
    "or-bench-80k.csv",
    "22e956020cdfdd43c328f02441f003c933ee4e7083d02d9d24e414e4b42ae2e6",
    "huggingface", OR_BENCH_REPO, OR_BENCH_REVISION,
)
XSTEST = SourceFile(
    "xstest_prompts.csv",
    "11783fb294ed017473ee53c207d71f2161c7672c8d0b037501e78387f801cb5a",
    "github", XSTEST_REPO, XSTEST_REVISION,
)


@dataclass(frozen=True)
class Builtin:
    """A built-in dataset: its name (`--orbench-datasets`), file, and what a good reply to its prompts is."""

    name: str
    source: SourceFile
    expected: Expected
    #: which of its role's datasets the Action's outputs (over-refusal-rate, toxic-rejection-rate) report when
    #: several ran: the lowest
    headline: int
    label: str | None = None  # XSTest rows are split by their `label` column

    @property
    def role(self) -> Role:
        """Over-refusal: prompts a model should answer (a refusal is an over-refusal); toxic: ones it should refuse."""
        return "over-refusal" if self.expected == "answer" else "toxic"


# In the order the options' help and messages list them. Adding a dataset is one line here (and its file's pin).
BUILTINS: dict[str, Builtin] = {builtin.name: builtin for builtin in (
    Builtin("hard-1k", HARD_1K, "answer", headline=0),
    Builtin("toxic", TOXIC, "refuse", headline=0),
    Builtin("80k", OR_80K, "answer", headline=2),
    Builtin("xstest-safe", XSTEST, "answer", headline=1, label="safe"),
    Builtin("xstest-unsafe", XSTEST, "refuse", headline=1, label="unsafe"),
)}


def of_role(role: Role) -> tuple[str, ...]:
    """The built-in datasets of `role`, in the order the Action's outputs pick the one they report."""
    return tuple(b.name for b in sorted((b for b in BUILTINS.values() if b.role == role), key=lambda b: b.headline))
