"""What the plugin knows of its third-party dependencies: releases known to be compromised, and the
warnings that litellm and its dependencies raise, which are not our users' problem."""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass


@dataclass(frozen=True)
class Incident:
    """A release pushed to PyPI with malicious code in it."""

    package: str
    version: str
    published: str  # the day the release was pushed (UTC)
    what: str
    # Startup files it installs into site-packages (a .pth runs at every start of that Python, before any
    # check of ours): the Action refuses a runner whose Python shows one (action/site_scan.py).
    files: tuple[str, ...] = ()


# The one table of known-compromised releases. pyproject.toml excludes each of them (a test holds the two
# together), `scripts/lock` refuses to write a lock with one, and the plugin and the `orbench` commands
# that call endpoints refuse to run beside one: the run would hand it the provider keys.
COMPROMISED: tuple[Incident, ...] = (
    Incident("litellm", "1.82.7", "2026-03-24",
             "a credential stealer in litellm/proxy/proxy_server.py, run on `import litellm.proxy` "
             "(BerriAI/litellm#24518)"),
    Incident("litellm", "1.82.8", "2026-03-24",
             "the same credential stealer, and litellm_init.pth, which runs it at every start of Python, "
             "litellm imported or not (BerriAI/litellm#24518)", files=("litellm_init.pth",)),
    Incident("litellm", "1.107.0", "2026-10-21",
             "pushed compromised to PyPI (PyPI now serves 1.106.12 and then 1.108.0)"),
)


def exclusions(package: str) -> str:
    """The version specifier that leaves out every compromised release of `package`: '!=1.82.7,!=...'."""
    return ",".join(f"!={incident.version}" for incident in COMPROMISED if incident.package == package)


def incident_for(package: str, version: str) -> Incident | None:
    return next((i for i in COMPROMISED if i.package == package and i.version == version), None)


def installed_version(package: str) -> str | None:
    """The version of `package` that `import` would find first, or None when it is not installed."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return None


def compromised_problem(package: str = "litellm") -> str | None:
    """Why this environment must not run: the installed `package` is a known-compromised release."""
    found = installed_version(package)
    incident = incident_for(package, found) if found else None
    if incident is None:
        return None
    return (f"{package} {incident.version} is installed, a release pushed compromised to PyPI on "
            f"{incident.published}: {incident.what}. No endpoint was called. Treat the secrets this "
            f"environment can read (provider keys, tokens) as exposed and rotate them, then install a "
            f"clean release: pip install '{package}{exclusions(package)}' (or this project's hash-pinned lock)")


class CompromisedDependency(RuntimeError):
    """Raised instead of importing a known-compromised release."""


def refuse_compromised(package: str = "litellm") -> None:
    problem = compromised_problem(package)
    if problem:
        raise CompromisedDependency(problem)


# The modules of litellm and of what it imports (its requirements, transitively, as pinned in the lock;
# tests/core/test_dependencies.py checks the list against the installed metadata). A warning raised in them
# while litellm is imported or called (pydantic's "ReadOnly qualifier" on litellm's own types, litellm's
# deprecations, ...) is not the user's: under PYTHONWARNINGS=error, -W error or a `filterwarnings = error`
# it would turn a call into an error, and a run into INCONCLUSIVE. Warnings raised in the user's own code,
# their target callable and their tests, are untouched.
DEPENDENCY_MODULES = (
    "litellm", "litellm_proxy", "litellm_enterprise", "litellm_cli", "openai", "pydantic", "pydantic_core", "pydantic_settings",
    "annotated_types", "typing_inspection", "httpx", "httpcore", "h11", "h2", "hpack", "hyperframe", "anyio",
    "sniffio", "httpx2", "httpcore2", "httpx2_jsfetch", "truststore", "aiohttp", "aiosignal", "aiohappyeyeballs", "frozenlist", "multidict", "yarl", "propcache", "attr",
    "attrs", "tiktoken", "tiktoken_ext", "tokenizers", "huggingface_hub", "hf_xet", "fsspec", "filelock", "tqdm", "jinja2",
    "markupsafe", "jsonschema", "jsonschema_specifications", "referencing", "rpds", "importlib_metadata", "zipp",
    "click", "dotenv", "fastuuid", "boto3", "botocore", "s3transfer", "jmespath", "dateutil", "six", "urllib3",
    "requests", "certifi", "charset_normalizer", "idna", "distro", "jiter", "typing_extensions", "regex",
    "packaging",
)
_DEPENDENCY_FILTER_PATTERN = "(?:" + "|".join(DEPENDENCY_MODULES) + r")(?:\.|$)"


def shield_dependency_warnings() -> None:
    """Put "ignore warnings raised in litellm and its dependencies" in front of the warning filters.

    Called before litellm is imported and before each call into it, because warning filters are
    process-wide and pytest replaces them around every test phase with the configured ones (an "error"
    in front). Idempotent and cheap: a look at the first filter. Not a `catch_warnings()` block: those
    restore a saved list when they end, which concurrent calls on one event loop would interleave."""
    filters = warnings.filters
    if filters and filters[0][0] == "ignore" and getattr(filters[0][3], "pattern", None) == _DEPENDENCY_FILTER_PATTERN:
        return
    warnings.filterwarnings("ignore", module=_DEPENDENCY_FILTER_PATTERN)


def is_dependency_module(module: str) -> bool:
    return re.match(_DEPENDENCY_FILTER_PATTERN, module) is not None
