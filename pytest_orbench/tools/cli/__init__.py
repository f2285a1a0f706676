"""The `orbench` command: parses the arguments, runs the subcommand's module, meets what any of them can end in."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from importlib import import_module

from pytest_orbench.core.dependencies import CompromisedDependency, compromised_problem
from pytest_orbench.tools.cli.option_checks import fail
from pytest_orbench.tools.cli.parser import build_parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from pytest_orbench.core.store_database import StoreError

    if args.command == "generate":  # every generate calls models (judge-eval: only with an LLM judge)
        problem = compromised_problem()
        if problem:
            return fail(problem)
    try:
        # Each subcommand is the run() of its own module, named after it (judge-eval: judge_eval.py), imported
        # only when it runs: `orbench compare` loads no simulator, no litellm.
        code = int(import_module(f"{__name__}.{args.command.replace('-', '_')}").run(args))
        sys.stdout.flush()  # here, not at exit: a reader that stopped early is met below
        return code
    except CompromisedDependency as exc:  # the last line of defence: litellm is never imported beside one
        return fail(str(exc))
    except StoreError as exc:  # judge-eval, generate, batches: a read-only folder, a full disk
        if exc.says_fix:
            return fail(str(exc).replace("--orbench-store", "--store"))
        return fail(f"{exc}; give --store a folder you can write to, on a disk with free space")
    except KeyboardInterrupt:
        # Ctrl-C: generate and judge-eval store every reply and judgement as it comes, so a rerun continues.
        resumes = args.command in ("generate", "judge-eval")
        print(f"orbench {args.command}: interrupted" + ("; what was received is stored, and running the same command "
                                                        "again continues from there" if resumes else ""), file=sys.stderr)
        return 130
    except BrokenPipeError:
        # `orbench judge-eval ... | head`: the reader stopped reading. Nothing more to print (stdout goes
        # nowhere, so the interpreter's own flush at exit does not fail again); the exit status of SIGPIPE.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
