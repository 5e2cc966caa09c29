"""The command lines of `vla-bridge node` and `vla-bridge param` (argparse only: `vla-bridge`
builds every command's parser before importing the one command it runs)."""

from __future__ import annotations

import argparse


def _common(parser: argparse.ArgumentParser, timeout_s: float) -> None:
    parser.add_argument("--timeout", type=float, default=timeout_s, help="seconds to wait")


def add_node_args(parser: argparse.ArgumentParser) -> None:
    verbs = parser.add_subparsers(dest="verb", required=True)
    listing = verbs.add_parser("list", help="the nodes of the domain")
    listing.add_argument("-a", "--all", action="store_true", help="hidden nodes (_name) too")
    _common(listing, 1.0)


def add_param_args(parser: argparse.ArgumentParser) -> None:
    verbs = parser.add_subparsers(dest="verb", required=True)
    for verb, names in (("get", ("name",)), ("set", ("name", "value")), ("list", ())):
        sub = verbs.add_parser(verb)
        sub.add_argument("node", help="node name, e.g. /vla_bridge")
        for name in names:
            sub.add_argument(name)
        _common(sub, 5.0)
