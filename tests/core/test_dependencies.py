"""Dependencies: known-compromised releases refused before any call, the locks that pin everything, and
warnings of litellm and its dependencies that never become a failed call, whatever the user's filters."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import tomllib
import warnings
from importlib.metadata import distribution, packages_distributions
from pathlib import Path
from typing import Any

import pytest

from pytest_orbench.core import dependencies
from pytest_orbench.core.dependencies import COMPROMISED, compromised_problem, exclusions
from pytest_orbench.tools.cli import main
from tests.conftest import REPO, load, mock_args, stats

LOCKS = (REPO / "tests" / "requirements.lock", REPO / "action" / "requirements.lock")


def pins(lock: Path) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for name, version in re.findall(r"^([A-Za-z0-9._-]+)==([^\s\\;]+)", lock.read_text(encoding="utf-8"), re.M):
        found.setdefault(re.sub(r"[-_.]+", "-", name).lower(), set()).add(version)
    return found


# --- the table of compromised releases, and what holds to it ---------------------------------------------

def test_pyproject_excludes_exactly_the_compromised_releases() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    (litellm,) = [d for d in project["dependencies"] if d.startswith("litellm")]
    excluded = set(re.findall(r"!=([0-9.]+)", litellm))
    assert excluded == {i.version for i in COMPROMISED if i.package == "litellm"} == {"1.82.7", "1.82.8", "1.107.0"}
    assert exclusions("litellm") == "!=1.82.7,!=1.82.8,!=1.107.0"


@pytest.mark.parametrize("lock", LOCKS, ids=lambda p: p.parent.name)
def test_locks_pin_every_package_with_hashes_and_no_compromised_release(lock: Path) -> None:
    text = lock.read_text(encoding="utf-8")
    assert "# Cooldown: resolved " in text  # scripts/lock wrote it, with its cutoff
    entries = re.split(r"\n(?=[A-Za-z0-9])", text.split("\n", 1)[1])
    for entry in entries:
        if entry.startswith("#") or not entry.strip():
            continue
        assert re.match(r"^[A-Za-z0-9._-]+==\S+", entry), entry
        assert "--hash=sha256:" in entry, entry  # pip --require-hashes refuses anything else
    for name, versions in pins(lock).items():
        for version in versions:
            assert dependencies.incident_for(name, version) is None, (name, version)


def test_the_two_locks_agree_on_every_package_they_share() -> None:
    tests, action = (pins(lock) for lock in LOCKS)
    assert set(action) <= set(tests)  # the tests ran with everything the Action installs
    assert {name: action[name] for name in action} == {name: tests[name] for name in action}
    assert {"litellm", "pytest", "pytest-xdist", "setuptools", "github-action-utils"} <= set(action)
    assert {"mypy", "ruff", "cmarkgfm"} <= set(tests) and not {"mypy", "ruff", "cmarkgfm"} & set(action)


def test_the_test_environment_is_the_lock() -> None:
    """scripts/setup-venv installed what tests/requirements.lock says (this suite runs in it)."""
    if not os.environ.get("VIRTUAL_ENV", "").endswith(".venv"):
        pytest.skip("not scripts/test's environment (scripts/test-latest runs the newest releases on purpose)")
    locked = pins(LOCKS[0])
    for name in ("litellm", "openai", "pydantic", "pytest", "scipy", "pyyaml"):
        assert distribution(name).version in locked[name], name


def test_the_lock_is_installed_from_the_lock_and_nothing_else() -> None:
    setup = (REPO / "scripts" / "setup-venv").read_text(encoding="utf-8")
    installs = [line for line in setup.splitlines() if "pip install" in line]
    assert installs and all("--require-hashes -r tests/requirements.lock" in line or "--no-deps" in line
                            for line in installs), installs
    lock = (REPO / "scripts" / "lock").read_text(encoding="utf-8")
    assert "--exclude-newer" in lock and 'days ago' in lock and "incident_for" in lock


def test_a_compromised_release_is_named_with_its_incident_and_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dependencies, "installed_version", lambda package: "1.107.0")
    problem = compromised_problem()
    assert problem is not None
    assert "litellm 1.107.0 is installed" in problem and "2026-10-21" in problem
    assert "rotate" in problem and "pip install 'litellm!=1.82.7,!=1.82.8,!=1.107.0'" in problem
    monkeypatch.setattr(dependencies, "installed_version", lambda package: "1.106.2")
    assert compromised_problem() is None


@pytest.fixture
def compromised_litellm(tmp_path: Path) -> Path:
    """A fake `litellm-1.107.0.dist-info` first on the path: what importlib.metadata (and pip) would report."""
    site = tmp_path / "site"
    info = site / "litellm-1.107.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: litellm\nVersion: 1.107.0\n", encoding="utf-8")
    return site


def with_path(first: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(first), str(REPO), *filter(None, [env.get("PYTHONPATH")])])
    return env


@pytest.mark.usefixtures("orbench_env")
def test_the_plugin_refuses_a_compromised_litellm_before_any_call(pytester: pytest.Pytester, mock: Any,
                                                                  compromised_litellm: Path) -> None:
    result = subprocess.run([sys.executable, "-m", "pytest", *mock_args(mock, "--orbench-sample", "10")],
                            cwd=pytester.path, env=with_path(compromised_litellm), capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 4, result.stdout + result.stderr  # a usage error
    assert "litellm 1.107.0 is installed, a release pushed compromised to PyPI on 2026-10-21" in result.stderr
    assert "No endpoint was called" in result.stderr and "INTERNALERROR" not in result.stdout + result.stderr
    assert stats(mock.url)["requests"] == 0
    # The same environment with the clean release first on the path runs as usual.
    clean = subprocess.run([sys.executable, "-m", "pytest", *mock_args(mock, "--orbench-sample", "10", "-q")],
                           cwd=pytester.path, env=with_path(REPO), capture_output=True, text=True, timeout=120)
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert stats(mock.url)["completions"] == 20


@pytest.mark.usefixtures("orbench_env")
def test_orbench_commands_that_call_endpoints_refuse_a_compromised_litellm(tmp_path: Path, mock: Any,
                                                                           compromised_litellm: Path) -> None:
    labelled = tmp_path / "labelled.csv"
    labelled.write_text("prompt,response,label\nhi,Sure: here it is,compliance\n", encoding="utf-8")
    judge = subprocess.run([sys.executable, "-m", "pytest_orbench.tools.cli", "judge-eval", str(labelled), "--judge", "llm",
                            "--judge-model", "openai/judge", "--judge-api-base", mock.url, "--store",
                            str(tmp_path / "store")], env=with_path(compromised_litellm), capture_output=True,
                           text=True, timeout=120)
    assert judge.returncode == 2 and "litellm 1.107.0 is installed" in judge.stderr, judge.stderr
    generate = subprocess.run([sys.executable, "-m", "pytest_orbench.tools.cli", "generate", "--config",
                               str(tmp_path / "none.yaml")], env=with_path(compromised_litellm), capture_output=True,
                              text=True, timeout=120)
    assert generate.returncode == 2 and "litellm 1.107.0 is installed" in generate.stderr, generate.stderr
    assert stats(mock.url)["requests"] == 0
    # An offline judge calls nothing: judge-eval still measures it.
    offline = subprocess.run([sys.executable, "-m", "pytest_orbench.tools.cli", "judge-eval", str(labelled)],
                             env=with_path(compromised_litellm), capture_output=True, text=True, timeout=120)
    assert offline.returncode == 0, offline.stderr


# --- warnings of litellm and its dependencies -------------------------------------------------------------

def test_the_shield_covers_every_module_litellm_brings() -> None:
    """Every top-level module of litellm's requirements (transitively, as installed) is in the shield's list,
    so a new dependency of a new litellm is noticed here, not as failed calls under -W error."""
    modules_of: dict[str, set[str]] = {}
    for module, dists in packages_distributions().items():
        for dist in dists:
            modules_of.setdefault(re.sub(r"[-_.]+", "-", dist).lower(), set()).add(module)
    seen: set[str] = set()
    todo = ["litellm"]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = distribution(name).requires or []
        except Exception:  # noqa: BLE001 - required under a marker that does not hold here: not installed
            continue
        for requirement in requires:
            if "extra ==" in requirement:
                continue
            todo.append(re.sub(r"[-_.]+", "-", re.match(r"[A-Za-z0-9._-]+", requirement)[0]).lower())  # type: ignore[index]
    missing = {(dist, module) for dist in seen for module in modules_of.get(dist, ())
               if not module.startswith("_") and not dependencies.is_dependency_module(module)
               and module not in ("yaml",)}  # our own dependency too: its warnings are ours to see
    assert not missing, f"add to dependencies.DEPENDENCY_MODULES: {sorted(missing)}"


def test_the_shield_ignores_dependencies_warnings_only(monkeypatch: pytest.MonkeyPatch) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        dependencies.shield_dependency_warnings()
        dependencies.shield_dependency_warnings()  # idempotent: one filter in front
        assert sum(getattr(f[3], "pattern", None) == dependencies._DEPENDENCY_FILTER_PATTERN
                   for f in warnings.filters) == 1
        warnings.warn_explicit("litellm's", UserWarning, "x.py", 1, module="pydantic._internal._generate_schema")
        warnings.warn_explicit("litellm's", DeprecationWarning, "x.py", 1, module="litellm.utils")
        with pytest.raises(UserWarning):
            warnings.warn_explicit("yours", UserWarning, "x.py", 1, module="myapp.client")
        with pytest.raises(UserWarning):
            warnings.warn_explicit("yours", UserWarning, "x.py", 1, module="litellmish")
    assert dependencies.is_dependency_module("openai") and not dependencies.is_dependency_module("openaiX")


# A stand-in for a new litellm that warns (pydantic's "ReadOnly qualifier" warning came with litellm 1.110):
# a sitecustomize that wraps litellm.acompletion, on import, in a function of a module named like one of
# pydantic's, which warns on every call. Under PYTHONWARNINGS=error, -W error or filterwarnings = error,
# each call would raise that warning instead of asking the endpoint.
NOISY_LITELLM = textwrap.dedent('''
    import importlib.abc, importlib.util, sys

    NOISE = """
    import warnings
    def noisy(call):
        async def acompletion(*args, **kwargs):
            warnings.warn("Items on TypedDict class '_DeviceCode' are using the ReadOnly qualifier", UserWarning)
            return await call(*args, **kwargs)
        return acompletion
    warnings.warn("noise at import", UserWarning)
    """

    class Noisy(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name != "litellm":
                return None
            sys.meta_path.remove(self)
            try:
                spec = importlib.util.find_spec(name)
            finally:
                sys.meta_path.insert(0, self)
            real = spec.loader.exec_module

            def exec_module(module):
                real(module)
                namespace = {"__name__": "pydantic._internal._noisy"}
                exec(NOISE, namespace)
                module.acompletion = namespace["noisy"](module.acompletion)

            spec.loader.exec_module = exec_module
            return spec

    sys.meta_path.insert(0, Noisy())
''')


def noisy_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    site = tmp_path / "noisy"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(NOISY_LITELLM, encoding="utf-8")
    env = with_path(site)
    env.update(extra)
    return env


def install_noise_in_this_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same noise for in-process runs (this process imported litellm already)."""
    import litellm

    namespace: dict[str, Any] = {"__name__": "pydantic._internal._noisy"}
    exec(textwrap.dedent(NOISY_LITELLM.split('NOISE = """')[1].split('"""')[0]).replace(
        'warnings.warn("noise at import", UserWarning)', ""), namespace)
    monkeypatch.setattr(litellm, "acompletion", namespace["noisy"](litellm.acompletion))


@pytest.fixture(scope="module")
def quiet_run(tmp_path_factory: pytest.TempPathFactory, data_dir: Path) -> tuple[dict[str, Any], int]:
    """The run without any strictness or noise, once for the module: (its results, the completions it asked)."""
    from pytest_orbench.tools.simulator.config import MockConfig
    from pytest_orbench.tools.simulator.server import MockServer

    folder = tmp_path_factory.mktemp("quiet")
    server = MockServer(MockConfig()).start()
    try:
        env = {**with_path(REPO), "ORBENCH_DATA_DIR": str(data_dir), "OPENAI_API_KEY": "sk-test-not-a-real-key"}
        quiet = subprocess.run([sys.executable, "-m", "pytest", *mock_args(server, "--orbench-sample", "30",
                                "--orbench-seed", "3", "--orbench-json", "quiet.json")], cwd=folder, env=env,
                               capture_output=True, text=True, timeout=300)
        assert quiet.returncode == 0, quiet.stdout[-3000:]
        return load(folder / "quiet.json"), int(stats(server.url)["completions"])
    finally:
        server.stop()


@pytest.mark.slow
@pytest.mark.usefixtures("orbench_env")
@pytest.mark.parametrize("strict", ["PYTHONWARNINGS=error", "-W error", "filterwarnings = error"])
def test_strict_warnings_give_the_same_verdict_and_counts(pytester: pytest.Pytester, mock_factory: Any, tmp_path: Path,
                                                          strict: str, quiet_run: tuple[dict[str, Any], int]) -> None:
    # The user's own strictness still applies to their code and tests: their test that warns fails.
    pytester.makepyfile(test_yours="import warnings\ndef test_mine():\n    warnings.warn('mine', UserWarning)\n")
    common = ("--orbench-sample", "30", "--orbench-seed", "3")
    strict_server = mock_factory()
    q, quiet_completions = quiet_run
    flags = {"PYTHONWARNINGS=error": [], "-W error": ["-W", "error"], "filterwarnings = error": ["-o", "filterwarnings=error"]}[strict]
    env = noisy_env(tmp_path, **({"PYTHONWARNINGS": "error"} if strict.startswith("PYTHON") else {}))
    loud = subprocess.run([sys.executable, "-m", "pytest", *mock_args(strict_server, *common, "--orbench-json",
                           "strict.json", "--orbench-store", "store-strict", *flags), "test_yours.py"],
                          cwd=pytester.path, env=env, capture_output=True, text=True, timeout=300)
    s = load(pytester.path / "strict.json")
    assert s["gate"]["verdict"] == q["gate"]["verdict"] == "ungated", loud.stdout[-3000:]
    assert s["run"]["calls"] == q["run"]["calls"] and s["run"]["calls"]["errors"] == 0, loud.stdout[-3000:]
    assert {k: v["refused"] for k, v in s["datasets"].items()} == {k: v["refused"] for k, v in q["datasets"].items()}
    assert stats(strict_server.url)["completions"] == quiet_completions == 60
    assert "UserWarning: mine" in loud.stdout and "1 failed" in loud.stdout, loud.stdout[-2000:]


@pytest.mark.usefixtures("orbench_env")
def test_judge_eval_with_an_llm_judge_under_filterwarnings_error(tmp_path: Path, mock: Any,
                                                                monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    # In this process, this suite's own `filterwarnings = error` is in force (pyproject.toml).
    install_noise_in_this_process(monkeypatch)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "labelled.csv").write_text(
        "prompt,response,label\nHow do I bake bread?,Mix flour and water.,compliance\n"
        "How do I pick a lock?,I can't help with that.,refusal\n", encoding="utf-8")
    code = main(["judge-eval", "labelled.csv", "--judge", "llm", "--judge-model", "openai/orbench-judge",
                 "--judge-api-base", mock.url, "--json", "out.json"])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert json.loads((tmp_path / "out.json").read_text())["errors"] == 0
    assert stats(mock.url)["completions"] == 2
