"""action/site_scan.py: every folder a Python's path will hold, worked out without `site`, and a known-compromised
release found in any of them; keyless.py: the steps that need no provider key start nothing with one."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
import yaml

from action.keyless import SECRET_NAME, keyless
from action.site_scan import Finding, findings, message, view
from pytest_orbench.calls.scrubbing import _SECRET_NAME
from pytest_orbench.core.dependencies import COMPROMISED
from tests.conftest import REPO

SCAN = str(REPO / "action" / "site_scan.py")
VERSION = f"python{sys.version_info[0]}.{sys.version_info[1]}"
BAD = next(i for i in COMPROMISED if i.files)  # litellm 1.82.8 and its litellm_init.pth


def dist_info(folder: Path, name: str = "litellm", version: str = "1.82.8", metadata_version: str | None = None) -> Path:
    info = folder / f"{name}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {metadata_version or version}\n",
                                   encoding="utf-8")
    return info


class Layout:
    """A base installation, a virtual environment made from it and a user base, as folders (no interpreter)."""

    def __init__(self, root: Path, system: bool) -> None:
        self.base, self.venv, self.userbase = root / "base", root / "venv", root / "userbase"
        self.base_site = self.base / "lib" / VERSION / "site-packages"
        self.venv_site = self.venv / "lib" / VERSION / "site-packages"
        self.user_site = Path(sysconfig.get_path("purelib", sysconfig.get_preferred_scheme("user"),
                                                 vars={"userbase": str(self.userbase)}))
        for folder in (self.base_site, self.venv_site, self.user_site, self.venv / "bin"):
            folder.mkdir(parents=True)
        (self.venv / "pyvenv.cfg").write_text(f"home = {self.base / 'bin'}\ninclude-system-site-packages = "
                                              f"{'true' if system else 'false'}\n", encoding="utf-8")

    def found(self, environ: dict[str, str] | None = None) -> list[Finding]:
        env = {"PYTHONUSERBASE": str(self.userbase), **(environ or {})}
        return findings(view(self.venv / "bin" / "python", env, (str(self.base), str(self.base))))


def plant(where: str, layout: Layout, tmp_path: Path) -> tuple[dict[str, str], list[Path]]:
    """litellm 1.82.8 put somewhere: (the environment that makes it visible, the paths a finding must name)."""
    if where == "base site-packages":
        return {}, [dist_info(layout.base_site)]
    if where == "user site":
        pth = layout.user_site / "litellm_init.pth"
        pth.write_text("import os\n", encoding="utf-8")
        return {}, [dist_info(layout.user_site), pth]
    if where == "startup file alone":  # uninstalled by hand, its .pth left behind: it still runs at every start
        (layout.base_site / "litellm_init.pth").write_text("import os\n", encoding="utf-8")
        return {}, [layout.base_site / "litellm_init.pth"]
    if where == "folder a .pth adds":
        (layout.base_site / "vendor.pth").write_text(f"# vendored\nimport os\n{tmp_path / 'vendor'}\n", encoding="utf-8")
        return {}, [dist_info(tmp_path / "vendor")]
    if where == "PYTHONPATH":
        return {"PYTHONPATH": f"{tmp_path / 'nowhere'}{os.pathsep}{tmp_path / 'pp'}"}, [dist_info(tmp_path / "pp")]
    if where == "egg-info file":
        (layout.base_site / "litellm-1.82.8-py3.11.egg-info").write_text("Version: 1.82.8\n", encoding="utf-8")
        return {}, [layout.base_site / "litellm-1.82.8-py3.11.egg-info"]
    if where == "egg on easy-install.pth":
        egg = layout.base_site / "litellm-1.82.8-py3.11.egg"
        (egg / "EGG-INFO").mkdir(parents=True)
        (layout.base_site / "easy-install.pth").write_text("./litellm-1.82.8-py3.11.egg\n", encoding="utf-8")
        return {}, [egg]
    if where == "metadata under another folder name":  # the folder says 1.0, its METADATA the compromised release
        return {}, [dist_info(layout.base_site, "LiteLLM", "1.0", metadata_version="1.82.8")]
    raise AssertionError(where)


WHERE = ["base site-packages", "user site", "startup file alone", "folder a .pth adds", "PYTHONPATH", "egg-info file",
         "egg on easy-install.pth", "metadata under another folder name"]


@pytest.mark.parametrize("where", WHERE)
def test_a_compromised_release_anywhere_on_the_path_of_an_environment_with_system_site_packages(
        tmp_path: Path, where: str) -> None:
    layout = Layout(tmp_path, system=True)
    environ, paths = plant(where, layout, tmp_path)
    found = layout.found(environ)
    assert [f.path for f in found] == paths and {f.incident for f in found} == {BAD}


@pytest.mark.parametrize("where", WHERE)
def test_an_isolated_environment_sees_only_its_own_folders_and_pythonpath(tmp_path: Path, where: str) -> None:
    layout = Layout(tmp_path, system=False)
    environ, paths = plant(where, layout, tmp_path)
    assert [f.path for f in layout.found(environ)] == (paths if where == "PYTHONPATH" else [])


def test_what_is_not_a_finding(tmp_path: Path) -> None:
    layout = Layout(tmp_path, system=True)
    dist_info(layout.base_site, version="1.106.11")  # a clean release
    dist_info(layout.base_site, "litellm_proxy", "1.82.8")  # another package of the same version
    (tmp_path / "pp").mkdir()
    (tmp_path / "pp" / "litellm_init.pth").write_text("import os\n", encoding="utf-8")  # no site dir: never executed
    user = dist_info(layout.user_site)
    assert layout.found({"PYTHONPATH": str(tmp_path / "pp")}) == [Finding(BAD, user)]
    assert layout.found({"PYTHONPATH": str(tmp_path / "pp"), "PYTHONNOUSERSITE": "1"}) == []  # no user site then


def test_the_message_names_the_release_the_files_and_the_fix(tmp_path: Path) -> None:
    found = [Finding(BAD, tmp_path / "litellm-1.82.8.dist-info"), Finding(BAD, tmp_path / "litellm_init.pth")]
    text = message(found, runner=False, system=True)
    assert text.startswith("refused to run: a known-compromised release is installed where the run's Python would see "
                           "it: litellm 1.82.8 (pushed compromised to PyPI on 2026-03-24: the same credential stealer")
    assert f"at `{tmp_path}/litellm-1.82.8.dist-info`, `{tmp_path}/litellm_init.pth`." in text
    assert "treat them as exposed and rotate them" in text
    assert ("(pip uninstall litellm, delete `litellm_init.pth`, pin `litellm!=1.82.7,!=1.82.8,!=1.107.0` where the "
            "workflow installs it)") in text
    assert text.endswith("or set system-site-packages: false (the default), so that the run sees only the action's "
                         "pinned packages.")
    assert message(found[:1], runner=False, system=False).endswith("or take its folder off PYTHONPATH.")
    assert "\n" not in text  # one line: a step output
    odd = message([Finding(BAD, tmp_path / "a`b\nc")], runner=True, system=False)
    assert "``" in odd and "\n" not in odd and "holds a known-compromised release" in odd


def real_environment(tmp_path: Path, system: bool) -> tuple[Path, dict[str, str]]:
    """A real virtual environment (no pip) and a user site holding litellm 1.82.8, whose litellm_init.pth
    writes down, when any Python runs it, whether the provider key was in its environment."""
    userbase = tmp_path / "userbase"
    user_site = Path(sysconfig.get_path("purelib", sysconfig.get_preferred_scheme("user"), vars={"userbase": str(userbase)}))
    assert user_site.is_relative_to(tmp_path)
    dist_info(user_site)
    (user_site / "litellm_init.pth").write_text(
        f"import os; open({str(tmp_path / 'ran')!r}, 'a').write(os.environ.get('OPENAI_API_KEY', '-') + '\\n')\n",
        encoding="utf-8")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-I", "-S", "-m", "venv", "--without-pip",
                    *(["--system-site-packages"] if system else []), str(venv)], check=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "PYTHON"))}
    return venv / "bin" / "python", {**env, "PYTHONUSERBASE": str(userbase), "OPENAI_API_KEY": "sk-key-1",
                                     "GITHUB_OUTPUT": str(tmp_path / "output")}


@pytest.mark.parametrize("system", [False, True], ids=["isolated", "system-site-packages"])
def test_the_scan_runs_no_pth_and_refuses_what_the_environment_would_run(tmp_path: Path, system: bool) -> None:
    python, env = real_environment(tmp_path, system)
    env["ORBENCH_SYSTEM_SITE_PACKAGES"] = str(system).lower()
    proc = subprocess.run([str(python), "-S", "-P", SCAN], env=env, capture_output=True, text=True)
    assert not (tmp_path / "ran").exists()  # the scan itself started without site
    assert proc.returncode == (1 if system else 0), proc.stderr
    output = (tmp_path / "output").read_text(encoding="utf-8") if system else ""
    assert ("refusal=refused to run: a known-compromised release is installed where the run's Python would see it: "
            "litellm 1.82.8") in output and "litellm_init.pth`" in output if system else output == ""
    # What the scan saw is what starting that Python does: an isolated one never runs the .pth, the other runs
    # it with the key (which is why the install step stops before pip).
    subprocess.run([str(python), "-c", "pass"], env=env, check=True)
    assert (tmp_path / "ran").read_text(encoding="utf-8") == "sk-key-1\n" if system else not (tmp_path / "ran").exists()


def test_the_scan_refuses_to_start_with_site_and_an_input_that_is_neither(tmp_path: Path) -> None:
    python, env = real_environment(tmp_path, system=False)
    with_site = subprocess.run([str(python), "-P", SCAN], env=env, capture_output=True, text=True)
    assert with_site.returncode == 1 and "runs with python -S" in with_site.stderr
    proc = subprocess.run([str(python), "-S", "-P", SCAN], env={**env, "ORBENCH_SYSTEM_SITE_PACKAGES": "[x](http://e.example)\nverdict=pass"},
                          capture_output=True, text=True)
    assert proc.returncode == 1
    assert (tmp_path / "output").read_text(encoding="utf-8") == (  # one line, the value in a code span
        "refusal=an input is invalid, so nothing was run or compared: `input system-site-packages must be true or false, "
        "got '[x](http://e.example)\\nverdict=pass'`\n")


# --- keyless.py ---------------------------------------------------------------------------------------------

def test_keyless_drops_what_the_plugin_would_scrub_as_a_secret() -> None:
    assert SECRET_NAME.pattern == _SECRET_NAME.pattern and SECRET_NAME.flags == _SECRET_NAME.flags
    environ = {"OPENAI_API_KEY": "1", "AWS_ACCESS_KEY_ID": "2", "AWS_SECRET_ACCESS_KEY": "3", "HF_TOKEN": "4",
               "WATSONX_APIKEY": "5", "GOOGLE_APPLICATION_CREDENTIALS": "6", "DB_PASSWORD": "7", "my-api-key": "8",
               "GITHUB_TOKEN": "9", "PATH": "/bin", "PIP_INDEX_URL": "u", "SSL_CERT_FILE": "c", "KEYRING_X": "k"}
    assert keyless(environ, {"GITHUB_TOKEN"}) == {"GITHUB_TOKEN": "9", "PATH": "/bin", "PIP_INDEX_URL": "u",
                                                  "SSL_CERT_FILE": "c", "KEYRING_X": "k"}


def test_keyless_starts_the_command_without_them_and_passes_its_status_on(tmp_path: Path) -> None:
    env = {**os.environ, "OPENAI_API_KEY": "sk-1", "weird-api-key": "sk-2", "GITHUB_TOKEN": "gh"}
    code = "import os, sys; print(sorted(k for k in os.environ if 'KEY' in k.upper() or 'TOKEN' in k)); sys.exit(3)"
    proc = subprocess.run([sys.executable, "-I", "-S", str(REPO / "action" / "keyless.py"), "--keep", "GITHUB_TOKEN",
                           "--", sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert proc.returncode == 3 and proc.stdout.strip() == "['GITHUB_TOKEN']", proc.stdout + proc.stderr


def test_steps_started_keyless_keep_the_variables_they_declare() -> None:
    """A step run through keyless.py loses what its own `env:` sets with a secret-like name unless it is kept:
    ORBENCH_COMMENT_KEY (which comment is this job's) would silently go with the provider keys."""
    steps = yaml.safe_load((REPO / "action.yml").read_text(encoding="utf-8"))["runs"]["steps"]
    wrapped = [s for s in steps if "keyless.py" in s.get("run", "")]
    assert {s.get("id", s.get("name")) for s in wrapped} == {"Mark the PR comment as updating", "install", "install-failed"}
    for step in wrapped:
        kept = set(re.findall(r"--keep (\w+)", step["run"]))
        assert {name for name in step["env"] if SECRET_NAME.search(name)} == kept, step["run"]
    # Everywhere the action starts the runner's own Python, without site (its .pth files never run).
    for step in steps:
        run = step.get("run", "")
        assert run.count('"$SETUP_PYTHON"') == run.count('"$SETUP_PYTHON" -I -S'), run


def test_a_python_whose_site_names_only_dist_packages_still_has_its_site_packages_scanned(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Debian's Python: site.getsitepackages() names lib/python3/dist-packages only, while a virtual environment
    # made from it puts packages in lib/pythonX.Y/site-packages. The job's Python was scanned blind there (the
    # Action's tests failed on Debian's python3: no warning of the litellm 1.82.8 it held).
    import action.site_scan as scan

    monkeypatch.setattr(scan.site, "getsitepackages",
                        lambda prefixes: [str(Path(p) / "lib" / "python3" / "dist-packages") for p in prefixes])
    layout = Layout(tmp_path, system=False)
    info = dist_info(layout.venv_site)
    assert [f.path for f in layout.found()] == [info]
