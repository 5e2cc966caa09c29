"""`vla-server` command line: serve, make-demo-model."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from vla_server.config import ServerArgs
from vla_server.process_utils import configure_logging


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="vla-server")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="start the node (HTTP server + scheduler + detokenizer)")
    ServerArgs.add_cli_args(serve)
    demo = sub.add_parser("make-demo-model", help="write the embedded demo VLA checkpoint")
    demo.add_argument("out_dir", type=Path)
    ns = parser.parse_args(argv)
    if ns.command == "serve":
        args = ServerArgs.from_cli_args(ns)
        configure_logging(args.log_level)
        from vla_server.entrypoints.engine import StartupError
        from vla_server.entrypoints.serve import run_server

        try:
            run_server(args)
        except StartupError as e:
            # One line that names the problem; the children's logs above it have the details.
            print(f"vla-server: error: {e}", file=sys.stderr)
            raise SystemExit(1) from None
    else:
        from vla_server.policies.registry import build_demo_checkpoint

        print(build_demo_checkpoint(ns.out_dir))


if __name__ == "__main__":
    main()
