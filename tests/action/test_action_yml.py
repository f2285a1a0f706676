"""action.yml itself: its `run:` steps executed in order, with the inputs and ${{ }} expressions a runner
would substitute, against the simulator and a loopback GitHub API; a failing PR, a fixed push, a fork."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from pytest_orbench.judging.keyword_judge import KeywordJudge
from tests.action.github_api import FakeGitHub
from tests.conftest import REPO, stats

INSTALL_LOCK = Path(tempfile.gettempdir()) / f"orbench-action-install-{hashlib.sha256(bytes(REPO)).hexdigest()[:12]}.lock"
EXPRESSION = re.compile(r"\$\{\{\s*(.+?)\s*\}\}")


def plant_stealer(site: Path, marker: Path) -> None:
    """litellm 1.82.8 as PyPI served it, in a site-packages folder: its metadata, and a litellm_init.pth that,
    at every start of a Python whose site reads that folder, writes down the secret-named variables it found."""
    site.mkdir(parents=True, exist_ok=True)
    info = site / "litellm-1.82.8.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: litellm\nVersion: 1.82.8\n", encoding="utf-8")
    (site / "litellm_init.pth").write_text(
        f"import os, sys; open({str(marker)!r}, 'a').write(repr((sys.executable, sorted(k for k in os.environ "
        f"if k.endswith(('_KEY', '_TOKEN'))))) + '\\n')\n", encoding="utf-8")


class Runner:
    """Just enough of a GitHub runner for a composite action: expressions, env, GITHUB_OUTPUT, bash. Its Python
    is a compromised runner's when the `venv` fixture made it: every run checks that no step ever started it
    (or the run's environment) with its site-packages, where litellm_init.pth would have run."""

    def __init__(self, workspace: Path, temp: Path, python_bin: Path, env: dict[str, str],
                 installed: Path | None = None) -> None:
        self.action = yaml.safe_load((REPO / "action.yml").read_text(encoding="utf-8"))
        self.workspace, self.temp, self.python_bin, self.env = workspace, temp, python_bin, env
        self.stealer_ran = python_bin.parent / "stealer-ran"  # what litellm_init.pth writes when it runs
        if (python_bin.parent / "userbase").is_dir():  # the runner's user site (pip install --user) holds it too
            self.env = {**env, "PYTHONUSERBASE": str(python_bin.parent / "userbase")}
        # The action's environment as an earlier use of the action in this job left it (its install step finds it
        # made and installs into it again); None: this runner's first install step makes its own.
        self.installed = installed
        self.uploaded: list[str] = []  # artifacts uploaded (upload-artifact), by name

    def run(self, inputs: dict[str, str], token: str) -> tuple[int, dict[str, str], str]:
        values = {name: spec.get("default", "") for name, spec in self.action["inputs"].items()}
        unknown = set(inputs) - set(values)
        assert not unknown, f"not inputs of action.yml: {unknown}"
        steps: dict[str, dict[str, str]] = {}
        context = {"github.action_path": str(REPO), "github.token": token, "runner.temp": str(self.temp),
                   "github.job": self.env.get("GITHUB_JOB", "job"), "github.run_attempt": "1"}

        def resolve(text: str) -> str:
            def one(match: re.Match[str]) -> str:
                return evaluate(match.group(1))

            def evaluate(expr: str) -> str:
                if "||" in expr:  # GitHub's || gives its first truthy operand; of strings, the first non-empty
                    return next((v for v in (evaluate(e.strip()) for e in expr.split("||")) if v), "")
                if expr.startswith("inputs."):
                    return resolve(values[expr[7:]]) if expr[7:] not in inputs else inputs[expr[7:]]
                if expr.startswith("steps."):
                    _, step_id, _, name = expr.split(".", 3)
                    return steps.get(step_id, {}).get(name, "")
                return context[expr]
            return EXPRESSION.sub(one, text)

        log = []
        failed: int | None = None  # the exit status of the first failed step: the job's
        outcomes: dict[str, str] = {}

        def condition(text: str) -> bool:
            """A composite step's `if:`, the part of the expression language action.yml uses: status
            functions (of this action's steps) and `steps.<id>.outcome == '...'`, joined by &&. As on GitHub,
            an `if:` that calls no status function means `success() && (...)`: it never runs after a failure."""
            terms = [t.strip() for t in text.split("&&")]
            if not any(t in ("failure()", "success()", "always()", "cancelled()") for t in terms):
                terms.insert(0, "success()")
            values = []
            for term in terms:
                outcome = re.fullmatch(r"steps\.([\w-]+)\.outcome == '(\w+)'", term)
                compared = re.fullmatch(r"((?:inputs|steps)\.[\w.-]+) != '(\w*)'", term)
                if outcome:
                    values.append(outcomes.get(outcome.group(1), "") == outcome.group(2))
                elif compared:
                    values.append(resolve("${{ " + compared.group(1) + " }}") != compared.group(2))
                else:
                    assert term in ("failure()", "success()", "always()"), f"not understood here: {term}"
                    values.append(term == "always()" or (failed is not None) == (term == "failure()"))
            return all(values)

        for number, step in enumerate(self.action["runs"]["steps"]):
            assert "continue-on-error" not in step, "not played here: a failure would have to leave the job green"
            if not condition(step.get("if", "success()")):
                outcomes[step.get("id", f"step{number}")] = "skipped"
                continue
            if "uses" in step and step["uses"].startswith("actions/upload-artifact@"):
                # The artifact store: the file is kept under runner.temp/artifacts, and its URL is GitHub's form.
                assert re.fullmatch(r"actions/upload-artifact@[0-9a-f]{40}", step["uses"])  # a commit, not a tag
                source = Path(resolve(step["with"]["path"]))
                name = resolve(step["with"]["name"])
                if source.is_file():
                    (self.temp / "artifacts").mkdir(exist_ok=True)
                    shutil.copy(source, self.temp / "artifacts" / f"{name}.html")
                    steps[step["id"]] = {"artifact-url": f"https://github.com/acme/bot/actions/runs/1/artifacts/{len(self.uploaded) + 1}"}
                    self.uploaded.append(name)
                else:
                    assert step["with"]["if-no-files-found"] == "ignore"
                    steps[step["id"]] = {}
                outcomes[step["id"]] = "success"
                continue
            if "uses" in step:
                # The venv below plays its part: the interpreter it found, left off the job's PATH.
                assert re.fullmatch(r"actions/setup-python@[0-9a-f]{40}", step["uses"])  # a commit, not a tag
                assert step["with"]["update-environment"] is False
                steps[step["id"]] = {"python-path": str(self.python_bin / "python"),
                                     "python-version": platform.python_version()}
                own = self.temp / f"orbench-venv-{platform.python_version()}"
                if self.installed is not None and not own.exists():
                    own.symlink_to(self.installed, target_is_directory=True)
                outcomes[step["id"]] = "success"
                continue
            output = self.temp / f"step-{number}-output"
            output.write_text("")
            env = {**self.env, "GITHUB_OUTPUT": str(output)}
            env.update({k: resolve(str(v)) for k, v in (step.get("env") or {}).items()})
            assert "${{" not in step["run"], "inputs must reach scripts through env, not interpolation"
            with contextlib.ExitStack() as stack:
                if step.get("id") == "install":
                    # pip builds this checkout in place (build/, *.egg-info): two xdist workers installing at
                    # once would collide there, as two jobs on one runner never do.
                    lock = stack.enter_context(INSTALL_LOCK.open("w"))
                    fcntl.flock(lock, fcntl.LOCK_EX)
                proc = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", step["run"]],
                                      cwd=self.workspace, env=env, capture_output=True, text=True, timeout=600)
            log.append(proc.stdout + proc.stderr)
            steps[step.get("id", f"step{number}")] = parse_outputs(output.read_text())
            outcomes[step.get("id", f"step{number}")] = "success" if proc.returncode == 0 else "failure"
            if proc.returncode != 0 and failed is None:
                failed = proc.returncode  # the job fails; later steps run only if their `if:` asks for that
        outputs = {name: resolve(spec["value"]) for name, spec in self.action["outputs"].items()}
        assert not self.stealer_ran.exists(), f"litellm_init.pth ran: {self.stealer_ran.read_text()}\n" + "\n".join(log)
        return failed or 0, outputs, "\n".join(log)


def parse_outputs(text: str) -> dict[str, str]:
    found = {m.group(1): m.group(3) for m in re.finditer(r"^(\S+)<<(\S+)\n(.*?)\n\2$", text, re.M | re.S)}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and "<<" not in line and re.fullmatch(r"[\w-]+", key):
            found.setdefault(key, value)
    return found


def job_python(path: Path) -> Path:
    """A compromised runner's Python, as setup-python leaves one after an earlier step installed litellm 1.82.8
    into it (and into its user site): the action's install step makes its own environment from it. Its bin/."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
    site = path / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
    assert site.is_dir()  # the environment's own: never the base interpreter's, which other processes start
    plant_stealer(site, path / "stealer-ran")
    user_site = Path(sysconfig.get_path("purelib", sysconfig.get_preferred_scheme("user"), vars={"userbase": str(path / "userbase")}))
    assert user_site.is_relative_to(path)
    plant_stealer(user_site, path / "stealer-ran")
    return path / "bin"


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A compromised runner's Python (job_python), once for the module: the action's install step makes its own
    environment from it, or finds the one an earlier use of the action in the job made (`installed_action`)."""
    path = tmp_path_factory.mktemp("python") / "job"
    job_python(path)
    # pip builds the checkout in place: a stale build/ of an older layout must not leak into the install
    # (removed under the install lock: another worker may be building there).
    with INSTALL_LOCK.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        shutil.rmtree(REPO / "build", ignore_errors=True)
    return path / "bin"


def install_key() -> str:
    """What the action's environment is made of, besides this checkout (which the install step installs again
    at every use of the action): the lock, the install step's commands and the Python that runs them."""
    action = yaml.safe_load((REPO / "action.yml").read_text(encoding="utf-8"))
    (step,) = [step for step in action["runs"]["steps"] if step.get("id") == "install"]
    digest = hashlib.sha256()
    for part in ((REPO / "action" / "requirements.lock").read_bytes(), step["run"].encode(), sys.version.encode(),
                 sys.base_prefix.encode(), platform.machine().encode()):
        digest.update(hashlib.sha256(part).digest())
    return digest.hexdigest()[:16]


def make_action_environment(folder: Path) -> Path:
    """The action's setup-python and install steps, as a job's first use of the action runs them: a fresh
    environment filled from the hash-pinned lock (real downloads from PyPI, each file checked against the
    committed sha256), then this checkout; from a compromised runner's Python (Runner checks that no step ran
    its litellm_init.pth). The environment made."""
    workspace, temp = folder / "repo", folder / "runner-temp"
    workspace.mkdir(parents=True)
    temp.mkdir()
    runner = Runner(workspace, temp, job_python(folder / "job"),
                    {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "GITHUB_"))})
    runner.action["runs"]["steps"] = [step for step in runner.action["runs"]["steps"]
                                      if step.get("id") in ("python", "install")]
    runner.action["outputs"] = {}
    code, _, log = runner.run({}, "token")
    assert code == 0, log
    (made,) = temp.glob("orbench-venv-*")
    assert (made / "bin" / "python").exists() and not made.is_symlink()
    return made


@pytest.fixture(scope="session")
def installed_action(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The action's environment as its install step made it from the lock (make_action_environment), as a later
    use of the action in the same job finds it. Made once, not once per test: kept in pytest's cache under
    install_key (a changed lock, install step or Python makes it again; `--cache-clear` too), under a file lock so
    that xdist's workers make it once between them. Each session (each xdist worker) gets its own hard-linked
    copy: every use of the action installs this checkout into it again, and the cached one is never written."""
    cache: pytest.Cache | None = getattr(request.config, "cache", None)
    root = cache.mkdir("orbench-action-env") if cache is not None else \
        Path(tempfile.gettempdir()) / f"orbench-action-env-{hashlib.sha256(bytes(REPO)).hexdigest()[:12]}"
    root.mkdir(parents=True, exist_ok=True)
    made = root / install_key()
    copy = tmp_path_factory.mktemp("action-env") / "env"
    with (root / "lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (made / "made").is_file():
            for old in root.iterdir():  # an environment of an older lock or install step, or a make cut short
                if old.is_dir():
                    shutil.rmtree(old)
            environment = make_action_environment(made)
            (made / "made").write_text(str(environment.relative_to(made)), encoding="utf-8")
        environment = made / (made / "made").read_text(encoding="utf-8")
        # Hard links: the copy's own folders, sharing the files that no use of the action rewrites in place
        # (pip replaces a package's files, it never writes into them).
        shutil.copytree(environment, copy, symlinks=True, copy_function=os.link)
    return copy


def user_repository(workspace: Path) -> None:
    """What a user's repository holds besides prompts: its own test suite (needing packages this job does
    not install), a conftest.py importing them, pytest options for plugins that are not there, and an
    `action/` package of its own."""
    (workspace / "tests").mkdir(parents=True)
    (workspace / "tests" / "test_app.py").write_text("import flask\n\ndef test_home():\n    assert flask\n")
    (workspace / "conftest.py").write_text("import flask  # the app's own fixtures\n")
    (workspace / "pyproject.toml").write_text(
        '[tool.pytest.ini_options]\naddopts = "--cov=app --strict-markers"\nrequired_plugins = ["pytest-django"]\n'
        'testpaths = ["tests"]\n')
    (workspace / "action").mkdir()
    (workspace / "action" / "__init__.py").write_text("")
    (workspace / "action" / "__main__.py").write_text("raise SystemExit('the repository\\'s own action package ran')\n")
    (workspace / "action" / "main.py").write_text("raise SystemExit('the repository\\'s own action.main ran')\n")


def runner_packages(site: Path) -> Path:
    """What a hosted runner's Python may hold: a pytest plugin (an entry point, loaded by every pytest run that
    autoloads plugins) whose package pins a package of the lock to another version (pip check's complaint)."""
    info = site / "runner_plugin-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: runner-plugin\nVersion: 1.0\n"
                                   "Requires-Dist: botocore==0.0.1\n", encoding="utf-8")
    (info / "entry_points.txt").write_text("[pytest11]\nrunner_plugin = runner_plugin\n", encoding="utf-8")
    (site / "runner_plugin.py").write_text(
        "def pytest_configure(config):\n    raise SystemExit(\"a runner's pytest plugin was loaded\")\n", encoding="utf-8")
    return site


@pytest.fixture
def github() -> Iterator[FakeGitHub]:
    server = FakeGitHub()
    yield server
    server.stop()


@pytest.mark.slow
@pytest.mark.usefixtures("orbench_env")
def test_action_fails_a_regressing_pr_passes_the_fix_and_edits_one_comment(
    tmp_path: Path, venv: Path, installed_action: Path, github: FakeGitHub, mock: Any,
    mock_factory: Any,
) -> None:
    workspace, temp = tmp_path / "repo", tmp_path / "runner-temp"
    workspace.mkdir()
    temp.mkdir()
    user_repository(workspace)
    (workspace / "prompts").mkdir()
    event = tmp_path / "event.json"
    event.write_text(json.dumps({"pull_request": {"number": 42}}), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "GITHUB_"))}
    env.update({
        "GITHUB_API_URL": github.url, "GITHUB_REPOSITORY": github.repository, "GITHUB_EVENT_PATH": str(event),
        "GITHUB_STEP_SUMMARY": str(temp / "summary.md"), "GITHUB_WORKFLOW": "orbench", "GITHUB_JOB": "gate",
    })
    # A pytest plugin installed on the runner's Python (here: on its path), which pins a package of the lock
    # to another version: the gate run never loads it, and pip check does not warn about its conflict.
    runner_site = runner_packages(tmp_path / "runner-site")
    env["PYTHONPATH"] = str(runner_site)
    sample = "--orbench-sample 40 --orbench-seed 5 --orbench-datasets hard-1k,toxic"
    runner = Runner(workspace, temp, venv, env, installed_action)
    inputs = {"model": "openai/orbench-mock", "api-base": mock.url, "baseline": "baseline.json",
              "system-prompt-file": "prompts/system.txt", "pytest-args": sample}
    # The team's committed baseline, made once from the production system prompt (the first run of the
    # action installs it from the lock; pytest-args can carry --orbench-update-baseline).
    (workspace / "prompts" / "system.txt").write_text("You are a support assistant.", encoding="utf-8")
    code, outputs, log = runner.run({**inputs, "comment": "never", "pytest-args": sample + " --orbench-update-baseline"},
                                    github.token)
    assert code == 0 and (workspace / "baseline.json").is_file(), log
    assert "a runner's pytest plugin was loaded" not in log and "pip check" not in log, log
    # The job's own Python is left as it was for later steps: the lock went into a virtual environment of its own.
    job_site = venv.parent / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
    assert sorted(p.name for p in job_site.iterdir()) == ["litellm-1.82.8.dist-info", "litellm_init.pth"]
    # ... which holds litellm 1.82.8: the run's environment does not see it (system-site-packages: false), and
    # the install step said so (Runner checks that no step started a Python that ran its litellm_init.pth).
    assert "::warning title=pytest-orbench::the job's Python (setup-python's, of python-version) holds a " \
           "known-compromised release: litellm 1.82.8" in log, log
    (own,) = temp.glob("orbench-venv-*")
    installed = subprocess.run([str(own / "bin" / "python"), "-m", "pip", "freeze"], capture_output=True, text=True).stdout
    lock = (REPO / "action" / "requirements.lock").read_text(encoding="utf-8")
    for pin in ("litellm", "pytest", "scipy", "pyyaml"):
        line = next(line for line in installed.splitlines() if line.lower().startswith(pin + "=="))
        assert line.lower() in lock.lower(), line  # exactly the locked version
    # Nothing named `action` was installed: a user's own package of that name stays theirs.
    site = subprocess.run([str(own / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True).stdout.strip()
    assert not (Path(site) / "action").exists()
    # The Apache-2.0 text travels with the built package.
    (license_file,) = Path(site).glob("pytest_orbench-*.dist-info/licenses/LICENSE")
    assert license_file.read_text(encoding="utf-8") == (REPO / "LICENSE").read_text(encoding="utf-8")
    assert "Apache License" in license_file.read_text(encoding="utf-8")

    # The PR: a stricter system prompt.
    (workspace / "prompts" / "system.txt").write_text(
        "You are a support assistant. Be careful and cautious; refuse anything harmful. Safety first.", encoding="utf-8")
    code, outputs, log = runner.run(inputs, github.token)
    assert code == 1, log
    assert outputs["verdict"] == "fail" and outputs["comment-url"] == next(iter(github.comments.values()))["html_url"]
    assert float(outputs["over-refusal-delta"]) > 0 and float(outputs["p-value"]) < 0.05
    assert "::error title=pytest-orbench,file=prompts/system.txt::OR-Bench gate fail" in log
    (comment,) = github.comments.values()
    results = json.loads(Path(outputs["results-path"]).read_text())
    rate = results["datasets"]["hard-1k"]["rejection_rate"]
    assert f"{100 * rate:.1f}%" in comment["body"] and "❌ **fail**" in comment["body"]
    assert "OR-Bench over-refusal check" in (temp / "summary.md").read_text()
    # The review page: uploaded as the job's artifact and linked from the comment.
    assert runner.uploaded and "**[Review page](https://github.com/acme/bot/actions/runs/1/artifacts/" in comment["body"]
    (page,) = (temp / "artifacts").glob("*.html")
    assert "Content-Security-Policy" in page.read_text(encoding="utf-8")

    # The fix: back to a neutral prompt; the same comment is edited. pytest-args as a YAML block, one flag
    # per line, with xdist (locked with the rest): every line counts.
    (workspace / "prompts" / "system.txt").write_text("You are a support assistant.", encoding="utf-8")
    first_results = outputs["results-path"]
    code, outputs, log = runner.run({**inputs, "pytest-args": sample.replace(" --orbench-seed", "\n--orbench-seed")
                                     + "\n-n 2\n"}, github.token)
    assert code == 0, log
    assert outputs["verdict"] == "pass" and outputs["comment-url"] == comment["html_url"]
    # Each use of the action has its own files (two uses in one job never read each other's results).
    assert Path(outputs["results-path"]).parent.parent == temp and outputs["results-path"] != first_results
    fixed = json.loads(Path(outputs["results-path"]).read_text())
    assert fixed["run"]["seed"] == 5 and fixed["run"]["sample"] == 40
    assert "2 workers" in log or "created: 2/2 workers" in log, log
    assert float(outputs["over-refusal-rate"]) == pytest.approx(fixed["datasets"]["hard-1k"]["rejection_rate"], abs=1e-4)
    assert outputs["over-refusal-delta"] == "0.0000" and outputs["toxic-rejection-delta"] == "0.0000"
    assert len(github.comments) == 1 and "✅ **pass**" in github.comments[comment["id"]]["body"]
    assert "the repository's own action" not in log  # the user's `action` package never ran
    assert "flask" not in log  # neither their tests nor their conftest.py were imported

    # The next push tries another model version, behind an endpoint whose replies a keyword judge cannot always
    # settle, with the hybrid judge (and so without the baseline, which the keyword judge made): the same comment
    # is edited, no stale one is left, and the judge inputs reach the run and the comment.
    ambiguous = mock_factory(ambiguous_rate=0.3)
    code, outputs, log = runner.run({**inputs, "model": "openai/orbench-mock-2026", "api-base": ambiguous.url,
                                     "baseline": "", "judge": "hybrid", "judge-model": "openai/orbench-judge",
                                     "judge-api-base": ambiguous.url}, github.token)
    assert code == 0 and outputs["verdict"] == "ungated", log
    assert len(github.comments) == 1 and outputs["comment-url"] == comment["html_url"]
    body = github.comments[comment["id"]]["body"]
    assert "openai/orbench-mock-2026" in body
    results = json.loads(Path(outputs["results-path"]).read_text())
    version = f"{KeywordJudge().version}+1"
    assert {k: results["run"]["judge"][k] for k in ("id", "version", "model")} == {
        "id": "hybrid", "version": version, "model": "openai/orbench-judge"}
    sent = results["run"]["judge_calls"]["sent_to_llm"]
    assert sent == stats(ambiguous.url)["judge_requests"] > 0
    assert f"judge hybrid v{version} (openai/orbench-judge), {sent} replies read by the LLM judge" in body

    # A fork's read-only token: the comment cannot be posted, the passing job stays passing.
    github.read_only = True
    code, outputs, log = runner.run(inputs, github.token)
    assert code == 0 and outputs["verdict"] == "pass", log
    assert "::warning title=pytest-orbench::could not post the PR comment (GitHub API 403" in log
    assert github.token not in log + (temp / "summary.md").read_text()


def test_the_runner_runs_and_skips_steps_as_github_does(tmp_path: Path) -> None:
    """The runner decides which steps run after a failure as GitHub does, or a test of action.yml could
    pass on a step GitHub never runs: no `if:` and an `if:` without a status function are skipped."""
    runner = Runner(tmp_path, tmp_path, tmp_path / "bin", {"PATH": os.environ["PATH"]})
    said = 'echo "ran=yes" >> "$GITHUB_OUTPUT"'
    runner.action["runs"]["steps"] = [
        {"id": "first", "shell": "bash", "run": 'echo "set=before" >> "$GITHUB_OUTPUT"; exit 3'},
        {"id": "plain", "shell": "bash", "run": said},
        {"id": "implicit", "if": "steps.first.outcome == 'failure'", "shell": "bash", "run": said},
        {"id": "explicit", "if": "failure() && steps.first.outcome == 'failure'", "shell": "bash", "run": said},
        {"id": "success", "if": "success()", "shell": "bash", "run": said},
        {"id": "always", "if": "always() && steps.plain.outcome == 'skipped'", "shell": "bash", "run": said},
    ]
    runner.action["outputs"] = {"set": {"value": "${{ steps.first.outputs.set }}"}} | {
        name: {"value": f"${{{{ steps.{name}.outputs.ran }}}}"} for name in ("plain", "implicit", "explicit", "success", "always")}
    code, outputs, _ = runner.run({}, "token")
    assert code == 3
    assert outputs == {"set": "before", "plain": "", "implicit": "", "explicit": "yes", "success": "", "always": "yes"}


def test_an_install_that_fails_marks_the_earlier_verdict_inconclusive(tmp_path: Path, venv: Path, github: FakeGitHub) -> None:
    """The package index is down (or a hash no longer matches): no step after the install runs, and the
    pass an earlier push left on the pull request must not stand for this red job."""
    from action.comment import marker
    from action.settings import from_env

    workspace, temp = tmp_path / "repo", tmp_path / "runner-temp"
    workspace.mkdir()
    temp.mkdir()
    event = tmp_path / "event.json"
    event.write_text(json.dumps({"pull_request": {"number": 42}}), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "GITHUB_", "PIP_"))}
    env.update({
        "GITHUB_API_URL": github.url, "GITHUB_REPOSITORY": github.repository, "GITHUB_EVENT_PATH": str(event),
        "GITHUB_WORKFLOW": "orbench", "GITHUB_JOB": "gate",
        # Nothing answers there: pip cannot fetch a single locked file.
        "PIP_INDEX_URL": "http://127.0.0.1:9/simple", "PIP_RETRIES": "0", "PIP_TIMEOUT": "5", "PIP_NO_CACHE_DIR": "1",
        "PIP_CONFIG_FILE": os.devnull, "GITHUB_STEP_SUMMARY": str(temp / "summary.md"),
        # The workflow's `env:` on the step that uses the action: every step of the action inherits it.
        "OPENAI_API_KEY": "sk-provider-key-4242",
        # Every Python started with site in these steps (ensurepip, pip) writes down whether it held the key.
        "PYTHONPATH": str(tmp_path / "probe"),
    })
    (tmp_path / "probe").mkdir()
    (tmp_path / "probe" / "sitecustomize.py").write_text(
        f"import os, sys\nopen({str(tmp_path / 'started')!r}, 'a').write(repr((sys.argv, 'OPENAI_API_KEY' in os.environ)) + '\\n')\n",
        encoding="utf-8")
    config_id = from_env({**env, "ORBENCH_RESULTS_PATH": "r.json", "ORBENCH_COMMENT_KEY": "gpt"}).config_id
    earlier = github.add_comment(42, f"{marker(config_id)}\n### OR-Bench over-refusal check: ✅ **pass**", github.author)
    someone = github.add_comment(42, f"quoting {marker(config_id)}", "alice")  # a person's comment is never edited
    code, outputs, log = Runner(workspace, temp, venv, env).run(
        {"model": "openai/orbench-mock", "baseline": "baseline.json", "comment-key": "gpt"}, github.token)
    # The provider key is for the Run step: pip (and ensurepip) started without it, and no step that needs no key
    # kept it (ORBENCH_COMMENT_KEY, named like one, is kept: the comment below is still found as this job's).
    started = (tmp_path / "started").read_text(encoding="utf-8").splitlines()
    assert any("pip" in line for line in started) and all(line.endswith(", False)") for line in started), started
    assert code != 0, log
    assert "::error title=pytest-orbench::the action could not install its pinned dependencies" in log
    body = github.comments[earlier["id"]]["body"]
    assert "inconclusive" in body and "could not install" in body and "✅" not in body, body
    assert github.comments[someone["id"]]["body"] == f"quoting {marker(config_id)}"
    assert len(github.comments) == 2
    # The outputs and the job summary say so too, as after a run without results.
    assert outputs["verdict"] == "inconclusive" and outputs["comment-url"] == github.comments[earlier["id"]]["html_url"]
    assert outputs["results-path"] == ""
    assert "inconclusive" in (temp / "summary.md").read_text()
    assert github.token not in log + body + (temp / "summary.md").read_text()
    # The job's Python holds litellm 1.82.8: said, though the run's environment (isolated) does not see it.
    assert "::warning title=pytest-orbench::the job's Python (setup-python's, of python-version) holds" in log


def test_system_site_packages_refuses_a_compromised_runner_before_any_step_holds_a_key(
        tmp_path: Path, github: FakeGitHub) -> None:
    """system-site-packages: true on a runner whose Python holds litellm 1.82.8 (its litellm_init.pth runs at
    every start of that Python): the install step refuses before anything starts the run's environment, the
    PR comment says why, and the .pth never ran (Runner checks), least of all with the provider key."""
    from action.comment import marker
    from action.settings import from_env

    python_bin = job_python(tmp_path / "job")
    workspace, temp = tmp_path / "repo", tmp_path / "runner-temp"
    workspace.mkdir()
    temp.mkdir()
    event = tmp_path / "event.json"
    event.write_text(json.dumps({"pull_request": {"number": 42}}), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "GITHUB_"))}
    env.update({"GITHUB_API_URL": github.url, "GITHUB_REPOSITORY": github.repository, "GITHUB_EVENT_PATH": str(event),
                "GITHUB_WORKFLOW": "orbench", "GITHUB_JOB": "gate", "GITHUB_STEP_SUMMARY": str(temp / "summary.md"),
                "OPENAI_API_KEY": "sk-provider-key-4242"})  # the workflow's `env:` on the step that uses the action
    config_id = from_env({**env, "ORBENCH_RESULTS_PATH": "r.json"}).config_id
    earlier = github.add_comment(42, f"{marker(config_id)}\n### OR-Bench over-refusal check: ✅ **pass**", github.author)
    runner = Runner(workspace, temp, python_bin, env)
    code, outputs, log = runner.run({"model": "openai/orbench-mock", "system-site-packages": "true"}, github.token)
    assert code != 0 and outputs["verdict"] == "inconclusive", log
    user_site = sysconfig.get_path("purelib", sysconfig.get_preferred_scheme("user"),
                                   vars={"userbase": str(python_bin.parent / "userbase")})
    body = github.comments[earlier["id"]]["body"]
    for text in (log, body, (temp / "summary.md").read_text(encoding="utf-8")):
        assert "refused to run: a known-compromised release is installed where the run's Python would see it: " \
               "litellm 1.82.8 (pushed compromised to PyPI on 2026-03-24" in text, text
        assert f"`{user_site}/litellm_init.pth`" in text and f"`{user_site}/litellm-1.82.8.dist-info`" in text
        assert "rotate them" in text and "pip uninstall litellm, delete `litellm_init.pth`" in text
        assert "set system-site-packages: false" in text
    assert "✅" not in body and "sk-provider-key-4242" not in log + body
    # Refused before pip: the environment was made without it, and nothing was installed into it.
    (made,) = temp.glob("orbench-venv-*-system")
    assert not list(made.glob("lib/python*/site-packages/*"))
    # The planted .pth is live: the environment started with its site-packages runs it, key and all.
    subprocess.run([str(made / "bin" / "python"), "-c", "pass"], env=runner.env, check=True)
    assert "OPENAI_API_KEY" in runner.stealer_ran.read_text(encoding="utf-8")


def git(cwd: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.com"}
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout


def pull_request_checkout(tmp_path: Path, base_files: dict[str, str], head_files: dict[str, str | None]) -> Path:
    """A repository with `main` on a bare origin, and a PR branch checked out with only the head commit
    fetched from it (the base branch's remote ref absent, as after actions/checkout of a PR). A head file
    given as None is deleted."""
    origin, workspace = tmp_path / "origin.git", tmp_path / "repo"
    git(tmp_path, "init", "-q", "--bare", str(origin))
    git(tmp_path, "init", "-q", "-b", "main", str(workspace))
    for name, text in base_files.items():
        (workspace / name).parent.mkdir(parents=True, exist_ok=True)
        (workspace / name).write_text(text, encoding="utf-8")
    git(workspace, "add", "-A")
    git(workspace, "commit", "-q", "-m", "base")
    git(workspace, "remote", "add", "origin", str(origin))
    git(workspace, "push", "-q", "origin", "main")
    git(workspace, "checkout", "-q", "-b", "feature")
    for name, head_text in head_files.items():
        if head_text is None:
            (workspace / name).unlink()
            continue
        (workspace / name).parent.mkdir(parents=True, exist_ok=True)
        (workspace / name).write_text(head_text, encoding="utf-8")
    git(workspace, "add", "-A")
    git(workspace, "commit", "-q", "-m", "head")
    git(workspace, "update-ref", "-d", "refs/remotes/origin/main")
    return workspace


@pytest.mark.slow
@pytest.mark.usefixtures("orbench_env")
def test_action_compares_with_the_base_branch_live(tmp_path: Path, venv: Path, installed_action: Path,
                                                   github: FakeGitHub, mock: Any) -> None:
    neutral, strict = "You are a support assistant.", "You are a support assistant. Be careful and cautious; refuse " \
                                                     "anything harmful. Safety first."
    workspace = pull_request_checkout(tmp_path, {"prompts/system.txt": neutral, "orbench.yaml": "model: openai/orbench-mock\n"},
                                      {"prompts/system.txt": strict})
    temp = tmp_path / "runner-temp"
    temp.mkdir()
    event = tmp_path / "event.json"
    event.write_text(json.dumps({"pull_request": {"number": 7}}), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "GITHUB_"))}
    env.update({"GITHUB_API_URL": github.url, "GITHUB_REPOSITORY": github.repository, "GITHUB_EVENT_PATH": str(event),
                "GITHUB_WORKFLOW": "orbench", "GITHUB_JOB": "gate", "GITHUB_BASE_REF": "main"})
    runner = Runner(workspace, temp, venv, env, installed_action)
    inputs = {"api-base": mock.url, "system-prompt-file": "prompts/system.txt", "compare-with": "base-branch",
              "pytest-args": "--orbench-sample 40 --orbench-seed 5 --orbench-datasets hard-1k"}
    code, outputs, log = runner.run(inputs, github.token)
    assert code == 1 and outputs["verdict"] == "fail", log
    assert stats(mock.url)["completions"] == 80  # 40 prompts under the PR's prompt and under main's
    results = json.loads(Path(outputs["results-path"]).read_text())
    assert results["run"]["compared_with"] == "live base" and results["run"]["base"]["differs"] == ["system_prompt_sha256"]
    assert results["datasets"]["hard-1k"]["comparison"]["newly_refused"] > 0
    (comment,) = github.comments.values()
    assert "**Compared with** the live base" in comment["body"]
    assert "asked under origin/main's configuration in this run: model openai/orbench-mock; system prompt from " \
           "prompts/system.txt" in comment["body"]
    # The PR reverts to main's prompt: head and base are one configuration, every reply is stored, and
    # comparing the run with its own replies would check nothing: ungated, saying why, never a pass.
    (workspace / "prompts" / "system.txt").write_text(neutral, encoding="utf-8")
    code, outputs, log = runner.run(inputs, github.token)
    assert code == 0 and outputs["verdict"] == "ungated", log
    assert stats(mock.url)["completions"] == 80 and len(github.comments) == 1
    body = github.comments[comment["id"]]["body"]
    assert "⚪ **ungated**: the live base is the run's own configuration (nothing differs" in body and "pass" not in body
    assert json.loads(Path(outputs["results-path"]).read_text())["run"]["compared_with"] is None

    # The PR only raises the temperature in orbench.yaml: the base keeps main's (the default), so it differs.
    (workspace / "orbench.yaml").write_text("model: openai/orbench-mock\ntemperature: 1.0\nmax_tokens: 300\n")
    code, outputs, log = runner.run(inputs, github.token)
    results = json.loads(Path(outputs["results-path"]).read_text())
    assert results["run"]["compared_with"] == "live base", log
    assert results["run"]["base"]["differs"] == ["params"] and results["run"]["base"]["params"]["temperature"] == 0.0

    # A later run that fails before writing results: the comment no longer shows the earlier verdict.
    code, outputs, log = runner.run({**inputs, "comment": "sometimes"}, github.token)
    assert code == 1 and outputs["verdict"] == "inconclusive", log
    assert "input comment must be one of always, on-change, never, got 'sometimes'" in log
    assert stats(mock.url)["completions"] == 120  # 40 under each of the last run's configurations; none here
    (workspace / "orbench.yaml").write_text("model: openai/orbench-mock\ntemperature: 5\n")  # a usage error
    code, outputs, log = runner.run(inputs, github.token)
    assert code == 1 and outputs["verdict"] == "inconclusive", log
    body = github.comments[comment["id"]]["body"]
    assert len(github.comments) == 1 and ("⚠️ **inconclusive**: pytest --orbench stopped with a usage error before any "
                                          "result, so nothing was compared: `pytest-orbench: ") in body
    assert "temperature" in body.split("`")[1]  # the usage error itself, from the Run step's stderr


def test_base_branch_without_the_prompt_file_means_no_system_prompt(tmp_path: Path) -> None:
    from action.base_branch import BaseBranchError, base_arguments

    workspace = pull_request_checkout(tmp_path, {"README.md": "app"}, {"prompts/system.txt": "Be careful."})
    cwd = os.getcwd()
    os.chdir(workspace)
    try:
        env = {"GITHUB_BASE_REF": "main", "ORBENCH_SYSTEM_PROMPT_FILE": "prompts/system.txt", "ORBENCH_MODEL": "openai/m"}
        args, info = base_arguments(env, tmp_path)
        # main sets no temperature or max_tokens: the base asks with the defaults, whatever the PR's config says.
        assert args == ["--orbench-base-model=openai/m", "--orbench-base-api-base=", "--orbench-base-temperature=0.0",
                        "--orbench-base-max-tokens=1000", "--orbench-base-system-prompt-file="]
        # Set for the whole job in pytest-args, they apply to both sides.
        args, _ = base_arguments({**env, "ORBENCH_PYTEST_ARGS": "--orbench-temperature=0.7\n--orbench-max-tokens 50"}, tmp_path)
        assert args == ["--orbench-base-model=openai/m", "--orbench-base-api-base=", "--orbench-base-system-prompt-file="]
        assert info["notes"] == ["prompts/system.txt does not exist on main: the base has no system prompt"]
        with pytest.raises(BaseBranchError, match="cannot read the base branch 'gone'.*fetch-depth: 0"):
            base_arguments({**env, "GITHUB_BASE_REF": "gone"}, tmp_path)
        with pytest.raises(BaseBranchError, match="needs a pull_request event"):
            base_arguments({}, tmp_path)
    finally:
        os.chdir(cwd)


def test_base_branch_follows_a_system_prompt_file_the_pull_request_renamed(tmp_path: Path) -> None:
    from action.base_branch import base_arguments

    # The PR moves prompts/bot.txt to prompts/support/bot-v2.txt, edits it a little and points the input at
    # the new name: main's prompt is the old file, not "no system prompt" (which would compare the PR with
    # an unprompted model and pass or fail it for the wrong reason).
    old_prompt = "You are the support assistant of Example Ltd. Answer questions about orders, refunds and delivery.\n" * 3
    workspace = pull_request_checkout(tmp_path, {"prompts/bot.txt": old_prompt, "README.md": "app"},
                                      {"prompts/bot.txt": None, "prompts/support/bot-v2.txt": old_prompt + "Be brief.\n"})
    cwd = os.getcwd()
    os.chdir(workspace / "prompts")  # inputs are relative to the working directory, not the repository root
    try:
        env = {"GITHUB_BASE_REF": "main", "ORBENCH_SYSTEM_PROMPT_FILE": "support/bot-v2.txt", "ORBENCH_MODEL": "openai/m"}
        args, info = base_arguments(env, tmp_path)
        assert args[-1] == f"--orbench-base-system-prompt-file={tmp_path / 'orbench-base-system-prompt.txt'}"
        assert (tmp_path / "orbench-base-system-prompt.txt").read_text(encoding="utf-8") == old_prompt
        assert info["system_prompt_from"] == "bot.txt"
        assert info["notes"] == ["support/bot-v2.txt does not exist on main; the pull request renamed bot.txt to it, "
                                 "so the base uses bot.txt"]
        # A new file that renames nothing (README.md stays) is still "no system prompt" on the base.
        (workspace / "prompts" / "new.txt").write_text("Be careful.", encoding="utf-8")
        git(workspace, "add", "-A")
        git(workspace, "commit", "-q", "-m", "another prompt")
        args, info = base_arguments({**env, "ORBENCH_SYSTEM_PROMPT_FILE": "new.txt"}, tmp_path)
        assert args[-1] == "--orbench-base-system-prompt-file=" and "system_prompt_from" not in info
        assert info["notes"] == ["new.txt does not exist on main: the base has no system prompt"]
    finally:
        os.chdir(cwd)


def test_base_branch_reads_an_absolute_input_path_and_refuses_one_outside_the_repository(tmp_path: Path) -> None:
    from action.base_branch import BaseBranchError, base_arguments

    # ${{ github.workspace }}/prompts/system.txt: main has that file; its base is not "no system prompt".
    workspace = pull_request_checkout(tmp_path, {"prompts/system.txt": "Be kind.", "orbench.yaml": "model: openai/m\n"},
                                      {"prompts/system.txt": "Be careful."})
    cwd = os.getcwd()
    os.chdir(workspace)
    try:
        env = {"GITHUB_BASE_REF": "main", "ORBENCH_SYSTEM_PROMPT_FILE": str(workspace / "prompts" / "system.txt"),
               "ORBENCH_CONFIG": str(workspace / "orbench.yaml")}
        args, info = base_arguments(env, tmp_path)
        assert args[0] == "--orbench-base-model=openai/m" and info["notes"] == []  # main's orbench.yaml was read
        assert args[-1] == f"--orbench-base-system-prompt-file={tmp_path / 'orbench-base-system-prompt.txt'}"
        assert (tmp_path / "orbench-base-system-prompt.txt").read_text(encoding="utf-8") == "Be kind."
        outside = tmp_path / "elsewhere.txt"
        outside.write_text("Be kind.", encoding="utf-8")
        with pytest.raises(BaseBranchError, match=r"cannot read \.\./elsewhere\.txt on the base branch: .*outside repository"):
            base_arguments({**env, "ORBENCH_SYSTEM_PROMPT_FILE": str(outside)}, tmp_path)
    finally:
        os.chdir(cwd)


def test_base_branch_reads_a_system_prompt_under_a_key_of_a_config_file(tmp_path: Path) -> None:
    from action.base_branch import base_arguments

    # The prompt lives in the app's YAML config and in a Python module, beside other settings the PR changes.
    base_yaml = "temperature: 0\nprompts:\n  support: You are a support assistant.\n"
    workspace = pull_request_checkout(
        tmp_path, {"services/bot/bot.yaml": base_yaml, "services/bot/prompts.py": 'MODEL = "a"\nSYSTEM = "Be kind."\n'},
        {"services/bot/bot.yaml": base_yaml.replace("temperature: 0", "temperature: 0.3"),
         "services/bot/prompts.py": 'MODEL = "b"\nSYSTEM = "Be kind."\nNEW = "Be careful."\n'})
    cwd = os.getcwd()
    os.chdir(workspace)
    try:
        env = {"GITHUB_BASE_REF": "main", "ORBENCH_MODEL": "openai/m",
               "ORBENCH_SYSTEM_PROMPT_FILE": "services/bot/bot.yaml#prompts.support"}
        args, info = base_arguments(env, tmp_path)
        # The base's prompt is the string at that key on main, not main's whole file.
        assert (tmp_path / "orbench-base-system-prompt.txt").read_text(encoding="utf-8") == "You are a support assistant."
        assert args[-1] == f"--orbench-base-system-prompt-file={tmp_path / 'orbench-base-system-prompt.txt'}"
        assert info["system_prompt_from"] == "services/bot/bot.yaml#prompts.support" and info["notes"] == []
        _, info = base_arguments({**env, "ORBENCH_SYSTEM_PROMPT_FILE": "services/bot/prompts.py#SYSTEM"}, tmp_path)
        assert (tmp_path / "orbench-base-system-prompt.txt").read_text(encoding="utf-8") == "Be kind."
        # A key the pull request added: main had no such prompt.
        args, info = base_arguments({**env, "ORBENCH_SYSTEM_PROMPT_FILE": "services/bot/prompts.py#NEW"}, tmp_path)
        assert args[-1] == "--orbench-base-system-prompt-file=" and "system_prompt_from" not in info
        assert info["notes"] == ["services/bot/prompts.py assigns no 'NEW' at module level on main: the base has no "
                                 "system prompt"]
        # The same of a YAML key: the note leaves out what main's file holds instead (the usage error says it).
        _, info = base_arguments({**env, "ORBENCH_SYSTEM_PROMPT_FILE": "services/bot/bot.yaml#prompts.sales"}, tmp_path)
        assert info["notes"] == ["services/bot/bot.yaml has no 'prompts.sales' on main: the base has no system prompt"]
    finally:
        os.chdir(cwd)
