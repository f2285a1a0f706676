"""`orbench mock-server`: checks the simulator's options, then serves it until stopped."""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path

from pytest_orbench.tools.cli.parser import FAULT_KINDS


def run(args: argparse.Namespace) -> int:
    # only this subcommand needs the simulator
    from pytest_orbench.tools.simulator.config import MockConfig
    from pytest_orbench.tools.simulator.server import MockServer

    defaults = MockConfig()
    faults = tuple(f.strip() for f in args.faults.split(",") if f.strip())
    unknown = sorted(set(faults) - set(FAULT_KINDS))
    if unknown:
        print(f"orbench mock-server: unknown fault kind(s) {unknown}; use {','.join(FAULT_KINDS)}", file=sys.stderr)
        return 2
    problem = _mock_problem(args)
    if problem:
        print(f"orbench mock-server: {problem}", file=sys.stderr)
        return 2
    config = MockConfig(
        strictness=defaults.strictness if args.strictness is None else args.strictness, latency=args.latency, jitter=args.jitter,
        api_key=os.environ.get(args.api_key_env) if args.api_key_env else None,
        fault_rate=args.fault_rate, faults=faults, fault_attempts=args.fault_attempts,
        retry_after=args.retry_after, hang=args.hang, content_filter_rate=args.content_filter_rate,
        empty_rate=args.empty_rate, reasoning_tokens=args.reasoning_tokens, noise=args.noise, ambiguous_rate=args.ambiguous_rate,
        judge_unscored_rate=args.judge_unscored_rate, judge_overturn=args.judge_overturn,
        gen_toxic_share=args.gen_toxic_share,
        gen_duplicate_rate=args.gen_duplicate_rate, gen_moderator_flip=args.gen_moderator_flip,
        gen_unparseable_rate=args.gen_unparseable_rate, batch_polls=args.batch_polls,
        batch_fail_rate=args.batch_fail_rate, batch_expire_share=args.batch_expire_share,
        batch_expire_count=args.batch_expire_count,
        served_model=defaults.served_model if args.served_model is None else args.served_model,
        system_fingerprint=(defaults.system_fingerprint if args.system_fingerprint is None
                            else args.system_fingerprint or None),
        required_header=((args.require_header, os.environ.get(args.require_header_env, ""))
                         if args.require_header and args.require_header_env else None),
    )
    try:
        server = MockServer(config, host=args.host, port=args.port)
    except (OSError, OverflowError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        print(f"orbench mock-server: cannot listen on {args.host}:{args.port} ({reason}); pick another --port "
              "(0: any free port, written to --port-file) or --host", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    print(f"orbench mock-server (a simulator, not a model) listening on {server.url}", flush=True)
    if args.port_file:
        with open(args.port_file, "w", encoding="utf-8") as fh:
            fh.write(str(server.httpd.server_address[1]))
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.httpd.server_close()
    return 0


RATES = ("fault_rate", "content_filter_rate", "empty_rate", "noise", "ambiguous_rate", "judge_unscored_rate", "judge_overturn",
         "gen_toxic_share", "gen_duplicate_rate", "gen_moderator_flip", "gen_unparseable_rate", "batch_fail_rate",
         "batch_expire_share", "strictness")


def _mock_problem(args: argparse.Namespace) -> str | None:
    """The simulator's options checked before it listens: shares in [0, 1], a port that exists, a key
    variable that is set (an unset one would silently accept any key), a --port-file that can be written."""
    from pytest_orbench.core.jsonfile import output_problem

    for name in RATES:
        value = getattr(args, name)
        if value is not None and not 0 <= value <= 1:
            return f"--{name.replace('_', '-')} is a share between 0 and 1, got {value}"
    for name in ("latency", "jitter", "retry_after", "hang"):
        if getattr(args, name) < 0:
            return f"--{name.replace('_', '-')} must be 0 or more seconds, got {getattr(args, name)}"
    if not 0 <= args.port <= 65535:
        return f"--port must be between 0 and 65535 (0: any free port, written to --port-file), got {args.port}"
    for flag, var in (("--api-key-env", args.api_key_env), ("--require-header-env", args.require_header_env)):
        if var and not os.environ.get(var):
            return f"{flag} names ${var}, which is not set: export {var}=... first"
    if bool(args.require_header) != bool(args.require_header_env):
        return "--require-header and --require-header-env go together: the header's name and the variable holding its value"
    return output_problem({"--port-file": Path(args.port_file) if args.port_file else None})
