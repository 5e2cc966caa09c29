"""``python -m tests.support.prismatic_ref build|predict``: the OpenVLA oracle's CLI.

Run it in the oracle environment (see ``oracle_env.run_oracle``): it imports ``timm``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tests.support.prismatic_ref.checkpoint import (
    BACKBONES,
    DTYPES,
    RESIZE_STRATEGIES,
    BuildOptions,
    build_checkpoint,
)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m tests.support.prismatic_ref")
    sub = parser.add_subparsers(dest="command", required=True)
    build = sub.add_parser("build", help="write an OpenVLA-layout checkpoint; prints its folder")
    build.add_argument("--out", type=Path, required=True)
    build.add_argument("--backbone", default="dinosiglip-vit-so-224px", choices=sorted(BACKBONES))
    build.add_argument("--towers", default="tiny", choices=("tiny", "full"))
    build.add_argument("--dtype", default="float32", choices=sorted(DTYPES))
    build.add_argument("--norm-keys", default="bridge_orig", help="comma-separated")
    build.add_argument("--resize-strategy", default="resize-naive", choices=RESIZE_STRATEGIES)
    build.add_argument("--sharded", action="store_true")
    build.add_argument("--arch-specifier", default=None)
    build.add_argument("--seed", type=int, default=0)
    build.add_argument("--vocab", type=int, default=1024, help="base vocabulary size")
    predict = sub.add_parser("predict", help="predict_action per request; one JSON line each")
    predict.add_argument("--model", type=Path, required=True)
    predict.add_argument("--requests", type=Path, required=True, help="a JSON list of requests")
    predict.add_argument("--dtype", default="float32", choices=sorted(DTYPES))
    predict.add_argument(
        "--threads", type=int, default=None, help="torch CPU threads (default: torch's own)"
    )
    return parser


def _build(args: argparse.Namespace) -> None:
    opts = BuildOptions(
        backbone=args.backbone,
        towers=args.towers,
        dtype=args.dtype,
        norm_keys=tuple(k for k in args.norm_keys.split(",") if k),
        resize_strategy=args.resize_strategy,
        sharded=args.sharded,
        arch_specifier=args.arch_specifier,
        seed=args.seed,
        vocab=args.vocab,
    )
    print(build_checkpoint(args.out, opts))


def _predict(args: argparse.Namespace) -> None:
    import torch

    from tests.support.prismatic_ref.reference import load_reference

    if args.threads:
        torch.set_num_threads(args.threads)
    ref = load_reference(args.model, DTYPES[args.dtype])
    for request in json.loads(args.requests.read_text()):
        print(json.dumps(ref.predict(request)), flush=True)


def main(argv: list[str] | None = None) -> None:
    args = _parser().parse_args(sys.argv[1:] if argv is None else argv)
    if args.command == "build":
        _build(args)
    else:
        _predict(args)


if __name__ == "__main__":
    main()
