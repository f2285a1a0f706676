"""The `orbench` command: mock-server, and the commands that work on results files."""

from __future__ import annotations

import argparse
import os
import signal
import sys
from typing import Sequence

from pytest_orbench.mock import DEFAULT_STRICTNESS, MockConfig, MockServer


def _mock_server(args: argparse.Namespace) -> int:
    faults = tuple(f.strip() for f in args.faults.split(",") if f.strip())
    unknown = sorted(set(faults) - {"429", "500", "502", "503", "timeout", "malformed", "disconnect"})
    if unknown:
        print(f"orbench mock-server: unknown fault kind(s) {unknown}; use 429,500,502,503,timeout,malformed,disconnect", file=sys.stderr)
        return 2
    config = MockConfig(
        strictness=args.strictness, latency=args.latency, jitter=args.jitter,
        api_key=os.environ.get(args.api_key_env) if args.api_key_env else None,
        fault_rate=args.fault_rate, faults=faults, fault_attempts=args.fault_attempts,
        retry_after=args.retry_after, hang=args.hang, content_filter_rate=args.content_filter_rate,
        empty_rate=args.empty_rate, noise=args.noise,
    )
    server = MockServer(config, host=args.host, port=args.port)
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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="orbench", description="OR-Bench over-refusal tooling (see also: pytest --orbench)")
    sub = parser.add_subparsers(dest="command", required=True)

    mock = sub.add_parser("mock-server", help="run a local OpenAI-compatible simulator with a refusal policy")
    mock.add_argument("--host", default="127.0.0.1")
    mock.add_argument("--port", type=int, default=8000, help="0 picks a free port (see --port-file)")
    mock.add_argument("--port-file", help="write the bound port here once listening")
    mock.add_argument("--strictness", type=float, default=DEFAULT_STRICTNESS,
                      help="base refusal strictness in [0, 1]; the system prompt moves it")
    mock.add_argument("--latency", type=float, default=0.0, help="seconds added to every reply")
    mock.add_argument("--jitter", type=float, default=0.0, help="up to this many extra random seconds")
    mock.add_argument("--api-key-env", help="require `Authorization: Bearer $VAR` (the variable's name, not the key)")
    mock.add_argument("--fault-rate", type=float, default=0.0, help="share of prompts whose first attempts fail")
    mock.add_argument("--faults", default="429", help="fault kinds: 429,500,502,503,timeout,malformed,disconnect")
    mock.add_argument("--fault-attempts", type=int, default=1, help="failing attempts per faulty prompt")
    mock.add_argument("--retry-after", type=float, default=1.0, help="Retry-After seconds sent with 429")
    mock.add_argument("--hang", type=float, default=30.0, help="seconds a timeout fault waits")
    mock.add_argument("--content-filter-rate", type=float, default=0.0, help="share of refusals sent as content_filter")
    mock.add_argument("--empty-rate", type=float, default=0.0, help="share of answers sent empty")
    mock.add_argument("--noise", type=float, default=0.0, help="chance per request that the decision flips")
    mock.set_defaults(func=_mock_server)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
