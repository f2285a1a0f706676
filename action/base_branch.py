"""`compare-with: base-branch`: the live base configuration from the pull request's base branch.

Run by action.yml before pytest: reads, with git, the base branch's version of the system-prompt
file and of orbench.yaml (model, api_base, temperature, max_tokens, system_prompt / system_prompt_file),
writes the base system prompt to a file, and prints the pytest arguments for the live base,
NUL-separated, on stdout. What it found
goes to a JSON file the Report step adds to the PR comment. A system-prompt file the pull request
renamed is read under its old name on the base branch (git's rename detection); a file absent on the
base branch means "no system prompt" there. The comment says which.

Exit status 1 with a ::error line when the base branch cannot be read (not a pull request, no git,
the branch not fetchable).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from pytest_orbench.core.prompt_file import KeyAbsent, PromptFileError, extract, split
from pytest_orbench.run.options import BY_KEY


class BaseBranchError(RuntimeError):
    """The base branch cannot be read; the message names the fix."""


def _git(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], capture_output=True, text=True, timeout=timeout)


def base_commit(base_ref: str) -> str:
    """`origin/<base_ref>`, fetched (depth 1) when the checkout does not have it."""
    ref = f"refs/remotes/origin/{base_ref}"
    if _git("rev-parse", "--verify", "--quiet", ref).returncode != 0:
        fetched = _git("fetch", "--no-tags", "--depth=1", "origin", f"+refs/heads/{base_ref}:{ref}", timeout=300)
        if fetched.returncode != 0:
            raise BaseBranchError(
                f"cannot read the base branch {base_ref!r}: git fetch origin {base_ref} failed "
                f"({' '.join(fetched.stderr.split())[:200]}). Check out the repository with git history "
                "(actions/checkout with fetch-depth: 0) or let the job's token read contents")
    return ref


# What git says when a path is simply not in that commit (anything else is an error, not "no file").
_ABSENT = ("does not exist in", "exists on disk, but not in")


def show(ref: str, path: str) -> str | None:
    """The file's text on `ref`, or None when it does not exist there. `path` is relative to the working
    directory, as the inputs are, or absolute (`${{ github.workspace }}/prompts/bot.txt`); one git cannot
    read (outside the repository) raises, so it is never mistaken for a base without the file."""
    if Path(path).is_absolute():
        path = os.path.relpath(path)  # git reads `ref:./x` relative to the working directory only
    path = path.replace(os.sep, "/")  # and with / only: on Windows relpath gives prompts\bot.txt
    proc = _git("show", f"{ref}:./{path}")
    if proc.returncode == 0:
        return proc.stdout
    message = " ".join(proc.stderr.split())
    if any(text in message for text in _ABSENT):
        return None
    raise BaseBranchError(f"cannot read {path} on the base branch: {message[:200]}; give the input as a path "
                          "inside the repository")


def renamed_from(ref: str, path: str) -> str | None:
    """Where `path` was on `ref` when the pull request renamed (or moved) the file: git's rename detection
    between the two trees, as `git diff -M` shows it; None when it was not renamed, or git cannot tell.
    The result is relative to the working directory, like `path`."""
    top = _git("rev-parse", "--show-toplevel")
    if top.returncode != 0:
        return None
    root = top.stdout.strip()
    wanted = os.path.relpath(os.path.abspath(path), root).replace(os.sep, "/")
    diff = _git("diff", "-M", "--name-status", "-z", ref, "HEAD")
    if diff.returncode != 0:
        return None
    fields = diff.stdout.split("\0")
    i = 0
    while i + 2 < len(fields):
        status = fields[i]
        if status.startswith(("R", "C")):  # a rename or copy names two paths, every other change one
            if status.startswith("R") and fields[i + 2] == wanted:
                return os.path.relpath(os.path.join(root, fields[i + 1]))
            i += 3
        else:
            i += 2
    return None


def _flags(pytest_args: str) -> set[str]:
    """The long options named in the job's pytest-args (`--flag value` or `--flag=value`), split on
    whitespace as the Run step splits them."""
    return {w.split("=", 1)[0] for w in pytest_args.split() if w.startswith("--")}


def base_arguments(env: Mapping[str, str], temp: Path) -> tuple[list[str], dict[str, Any]]:
    base_ref = env.get("GITHUB_BASE_REF", "").strip()
    if not base_ref:
        raise BaseBranchError("compare-with: base-branch needs a pull_request event (GITHUB_BASE_REF is empty); "
                              "use compare-with: baseline on other events")
    ref = base_commit(base_ref)
    info: dict[str, Any] = {"base_ref": base_ref, "notes": []}
    config_path = env.get("ORBENCH_CONFIG") or "orbench.yaml"
    config_text = show(ref, config_path)
    config: dict[str, Any] = {}
    if config_text is not None:
        loaded = yaml.safe_load(config_text)
        config = loaded if isinstance(loaded, dict) else {}
    elif env.get("ORBENCH_CONFIG"):
        info["notes"].append(f"{config_path} does not exist on {base_ref}")
    args: list[str] = []
    model = env.get("ORBENCH_MODEL") or config.get("model")
    if isinstance(model, str) and model:
        args.append(f"--orbench-base-model={model}")
        info["model"] = model
    api_base = env.get("ORBENCH_API_BASE") or config.get("api_base")
    if isinstance(api_base, str) and api_base:
        args.append(f"--orbench-base-api-base={api_base}")
    elif "model" in info:
        # The base branch names no api_base: its model was asked at the provider's default endpoint (or, the
        # same model as the PR's, at the PR's api_base). Said explicitly, so that a PR that moves to another
        # model behind its own api_base is not refused as a base sent elsewhere by mistake.
        args.append("--orbench-base-api-base=")
    # Sampling parameters as the base branch sets them (or their defaults there), unless pytest-args sets
    # them for the whole job: a pull request that only raises the temperature must show up as a difference.
    flags = _flags(env.get("ORBENCH_PYTEST_ARGS", ""))
    for key in ("temperature", "max_tokens"):
        flag = f"--orbench-{key.replace('_', '-')}"
        if flag in flags:
            continue
        value = config.get(key, BY_KEY[key].default)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            args.append(f"--orbench-base-{key.replace('_', '-')}={value}")
            if key in config:
                info.setdefault("params", {})[key] = value
    prompt_file = env.get("ORBENCH_SYSTEM_PROMPT_FILE")
    text: str | None = None
    selector: str | None = None  # a prompt under a key of a YAML / JSON / TOML file or a Python module (prompt_file.py)
    if prompt_file:
        where, selector = split(prompt_file)
        text = show(ref, where)
        moved = renamed_from(ref, where) if text is None else None
        if moved is not None:
            # Renamed in the pull request (the input names the new path): the base's prompt is the old file.
            text = show(ref, moved)
            if text is not None:
                info["notes"].append(f"{where} does not exist on {base_ref}; the pull request renamed "
                                     f"{moved} to it, so the base uses {moved}")
                where = moved
    elif isinstance(config.get("system_prompt"), str):
        text, where = config["system_prompt"], f"{config_path} system_prompt"
    elif isinstance(config.get("system_prompt_file"), str):
        where, selector = split(str(Path(config_path).parent / config["system_prompt_file"]))
        text = show(ref, where)
    else:
        where = ""
    absent = f"{where} does not exist on {base_ref}"
    if text is not None and selector is not None:
        try:
            text = extract(text, where, selector)
        except KeyAbsent as exc:  # the pull request added the key: the base had no such prompt
            text, absent = None, f"{exc.what} on {base_ref}"
        except PromptFileError as exc:
            raise BaseBranchError(f"cannot read the system prompt on the base branch: {exc}") from None
    if selector:
        where = f"{where}#{selector}"
    if text is None:
        args.append("--orbench-base-system-prompt-file=")
        if where:
            info["notes"].append(f"{absent}: the base has no system prompt")
    else:
        target = temp / "orbench-base-system-prompt.txt"
        target.write_text(text, encoding="utf-8")
        args.append(f"--orbench-base-system-prompt-file={target}")
        info["system_prompt_from"] = where
    return args, info


def main(env: Mapping[str, str] | None = None) -> int:
    env = os.environ if env is None else env
    temp = Path(env.get("ORBENCH_TEMP") or env.get("RUNNER_TEMP") or ".")
    try:
        args, info = base_arguments(env, temp)
    except (BaseBranchError, OSError, subprocess.TimeoutExpired, yaml.YAMLError) as exc:
        text = " ".join(str(exc).split())
        print(f"::error title=pytest-orbench::{text}", file=sys.stderr)
        # For the Report step's comment (action/settings.py RUN_ERROR; run by path, this script cannot import it).
        (temp / "orbench-run-error").write_text(text, encoding="utf-8")
        return 1
    (temp / "orbench-base.json").write_text(json.dumps(info), encoding="utf-8")
    sys.stdout.write("".join(a + "\0" for a in args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
