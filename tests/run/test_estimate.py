"""The cost estimate's parts that need no run: the flip verification expected after a run."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.usefixtures("orbench_env")


@pytest.mark.parametrize(("prompts", "flipped", "compared", "calls"), [
    (5, 0, 0, 2),      # 10% of 5 prompts assumed to flip: one flip, both sides (it was round(0.5) = 0 calls)
    (40, 0, 0, 8),     # 10% of 40: 4 flips
    (30, 1, 25, 4),    # measured: 1 of 25 flipped, 4% of 30 = 1.2 flips, so 2
    (30, 0, 25, 0),    # measured: none flipped
])
def test_verification_calls_expected_are_never_rounded_down_to_none(pytester: pytest.Pytester, prompts: int, flipped: int,
                                                                    compared: int, calls: int) -> None:
    from pytest_orbench.run.estimate import verification_part
    from pytest_orbench.run.setting_build import build_settings

    pytester.path.joinpath("b.json").write_text("{}", encoding="utf-8")
    settings = build_settings(pytester.parseconfig("--orbench", "--orbench-model", "openai/x", "--orbench-verify-flips",
                                                   "--orbench-judge-model", "openai/gpt-4o", "--orbench-baseline=b.json"))
    part = verification_part(settings, [f"prompt {i}" for i in range(prompts)], flipped, compared, sides=2)
    assert part is not None and part.calls == calls
