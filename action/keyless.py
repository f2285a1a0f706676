"""Run a command without the secrets of the job's environment: `python -I -S keyless.py [--keep NAME]... CMD...`

A composite action's steps all inherit the environment of the workflow step that uses it, provider keys
included (OPENAI_API_KEY under `env:`). Only the Run step calls the endpoints, and the Report step hides the
keys' values from the text it quotes; the other steps (marking the comment, installing, reporting a failed
install) start Python, pip and the build without them. A variable is a secret by its name, as the plugin
scrubs them (calls/scrubbing.py): a name with KEY, TOKEN, SECRET, PASSWORD, PASSWD or CREDENTIAL(S) as a
word; `--keep` keeps one a step needs (GITHUB_TOKEN for the comment). Standard library only.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Mapping

# The same pattern as pytest_orbench/calls/scrubbing.py's _SECRET_NAME (tests/action/test_keyless.py holds the two together).
SECRET_NAME = re.compile(r"(?:KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIALS?)(?:_|$)", re.IGNORECASE)


def keyless(environ: Mapping[str, str], keep: set[str]) -> dict[str, str]:
    """`environ` without the variables named like secrets, but for those in `keep`."""
    return {name: value for name, value in environ.items() if name in keep or not SECRET_NAME.search(name)}


def main(argv: list[str]) -> int:
    keep: set[str] = set()
    while len(argv) >= 2 and argv[0] == "--keep":
        keep.add(argv[1])
        argv = argv[2:]
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if not argv:
        print("usage: python -I -S keyless.py [--keep NAME]... COMMAND [ARG]...", file=sys.stderr)
        return 2
    # A child, not exec: on Windows os.execve does not replace the process, and the step waits on this one.
    return subprocess.run(argv, env=keyless(os.environ, keep), check=False).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
