#!/usr/bin/env python3
"""moe-tune: searches the #moe.gemm_config of each grouped matmul of the
given layers on this machine's GPU and writes the config database
(docs/CONFIG-DATABASE.md) that moe-tile reads: the command line of
moe_mlir.testing.tuner.tune_layers, whose description says how.

A layer is a preset (--presets), an MLIR file with one moe.fused_moe
(--layer, in the file's dtype and quantization) or sizes (--sizes,
moe-compile's --layer-sizes text); without any, the presets moe-compile
knows. Each is tuned at every token bucket of --tokens for each routing
block size of --block-m; the database is written after each bucket.

With --quantization tensor|channel|block, presets and sizes have fp8
(e4m3) weights scaled so, as moe-compile --quantization makes them (--dtype
stays the hidden states'): their fp8 grouped matmuls are searched over the
fp8 candidates (block_k 128; for block scales block_n 64 or 128) and
checked against a float32 reference on the dequantized operands; entries
are keyed "f8E4M3FN" with their "quantization".

  tools/moe-tune/moe-tune.py --compiler moe-compile --output configs/gemm-configs.json
  tools/moe-tune/moe-tune.py --layer bench/Inputs/e256-top8-no-shared.mlir --block-m 64,128
  tools/moe-tune/moe-tune.py --sizes experts=64,hidden=2048,intermediate=1408,top_k=6,shared=2
  tools/moe-tune/moe-tune.py --presets deepseek-v3,kimi-k2 --quantization block
"""

import argparse
import os
import pathlib
import sys

import torch

from moe_mlir.testing import tune_space
from moe_mlir.testing.compiler import CompileError, list_presets
from moe_mlir.testing.tuner import Budget, tune_layers


def int_list(text):
    """Comma-separated positive integers."""
    try:
        values = [int(item) for item in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected integers, got {text!r}")
    if not all(value > 0 for value in values):
        raise argparse.ArgumentTypeError(f"expected positive integers, got "
                                         f"{text!r}")
    return values


def block_sizes(text):
    """--block-m: 64, 128 or both."""
    values = int_list(text)
    if not set(values) <= {64, 128} or len(set(values)) != len(values):
        raise argparse.ArgumentTypeError(f"expected 64, 128 or 64,128, got "
                                         f"{text!r}")
    return values


def layer_sizes(text):
    """--sizes: what moe-compile --layer-sizes checks, told apart from a
    preset name."""
    if "=" not in text:
        raise argparse.ArgumentTypeError(
            f"expected experts=E,hidden=H,intermediate=I,top_k=K[,shared=X], "
            f"got {text!r}")
    return text


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--compiler", default="build/bin/moe-compile",
                        help="moe-compile (the static one travels)")
    parser.add_argument("--build", default="build-runtime",
                        help="build directory with libmoe_reference.so")
    parser.add_argument("--presets", default=None,
                        help="comma-separated preset names (default: all "
                             "of them, unless --layer or --sizes is given)")
    parser.add_argument("--layer", action="append", default=[],
                        type=pathlib.Path, metavar="FILE", help="an MLIR file of one "
                        "moe.fused_moe (repeatable)")
    parser.add_argument("--sizes", action="append", default=[],
                        type=layer_sizes, metavar="SIZES", help="a layer's sizes as "
                        "moe-compile --layer-sizes takes them: experts=E,"
                        "hidden=H,intermediate=I,top_k=K[,shared=X] "
                        "(repeatable)")
    parser.add_argument("--tokens", type=int_list,
                        default=list(tune_space.DEFAULT_TOKENS))
    parser.add_argument("--dtype", default="bf16", choices=("bf16", "f16"),
                        help="of presets and sizes (a file has its own); "
                             "with --quantization, of their hidden states")
    parser.add_argument("--quantization", default=None,
                        choices=("tensor", "channel", "block"),
                        help="fp8 weights of presets and sizes, scaled per "
                             "expert, output row or 128 x 128 block (a file "
                             "has its own)")
    parser.add_argument("--block-m", type=block_sizes, default=[64],
                        help="rows per routing block the GEMMs are tuned "
                             "for: 64, 128 or 64,128 (entries record it)")
    parser.add_argument("--output", default="configs/gemm-configs.json",
                        help="database to write; its entries for other "
                             "keys and buckets are kept")
    parser.add_argument("--work", default="out/tune",
                        help="directory for the candidates' bundles")
    parser.add_argument("--jobs", type=int, default=os.cpu_count())
    parser.add_argument("--iterations", type=int, default=15)
    parser.add_argument("--case-budget-s", type=float, default=0.3,
                        help="time of one candidate's timed calls, fewer "
                             "iterations above")
    parser.add_argument("--final-budget-s", type=float, default=1.5,
                        help="time of each finalist's second, longer timing")
    parser.add_argument("--time-limit-s", type=float, default=None,
                        help="leave out the buckets that would end after "
                             "this many seconds (and say which)")
    parser.add_argument("--seed", type=int, default=2026)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("moe-tune: no CUDA device: tuning needs the GPU it tunes for")
    presets = (args.presets.split(",") if args.presets else
               [] if args.layer or args.sizes else
               list(list_presets(args.compiler)))
    try:
        entries = tune_layers(
            presets + args.layer + args.sizes, compiler=args.compiler,
            output=args.output, tokens=args.tokens, dtype=args.dtype,
            quantization=args.quantization, block_m=args.block_m,
            work=args.work, jobs=args.jobs, build=args.build, seed=args.seed,
            budget=Budget(args.iterations, args.case_budget_s,
                          args.final_budget_s),
            time_limit_s=args.time_limit_s)
    except (CompileError, ValueError) as error:
        sys.exit(f"moe-tune: {error}")
    print(f"moe-tune: wrote {len(entries)} entries "
          f"({len(tune_space.read_database(args.output))} in all) to "
          f"{args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
