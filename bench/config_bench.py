#!/usr/bin/env python3
"""Config benchmark: chosen #moe.gemm_config fields of one grouped matmul,
side by side, and moe-tile's heuristic, on the same inputs. The layer is
given by --sizes (moe-compile --layer-sizes) and --quantization (none, or
the fp8 weights' scaling); each of --configs (a JSON list of the database's
config fields, docs/CONFIG-DATABASE.md) is compiled by --compiler into a
bundle of the --part at --tokens, checked like moe-tune's candidates
(bf16: against grouped_mm; fp8: against the float32 reference on the
dequantized operands) and timed (median of CUDA-event timings, L2 flushed).
Prints µs and TFLOP/s per config. Routing is uniform: each token's top_k
experts drawn at random; `--sizes experts=4,...,top_k=1` at 32768 tokens
gives DeepGEMM's 4 x 8192 rows.

  PYTHONPATH=build-runtime/python bench/config_bench.py --compiler \\
    moe-compile --sizes experts=4,hidden=4096,intermediate=7168,top_k=1 \\
    --part gemm2 --tokens 32768 --block-m 128 --quantization block \\
    --configs '[{"block_n": 128, "num_stages": 4, "warp_specialized": true,
                 "cluster_m": 2}]'
"""

import argparse
import json
import os
import sys
import tempfile

import torch

from moe_mlir.testing import tune_space
from moe_mlir.testing.gemm import model_cases, random_inputs
from moe_mlir.testing.reference import Reference
from moe_mlir.testing.timing import L2Flush
from moe_mlir.testing.tuner import Budget, measure


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--compiler", required=True)
    parser.add_argument("--build", default="build-runtime")
    parser.add_argument("--sizes", required=True,
                        help="experts=E,hidden=H,intermediate=I,top_k=K")
    parser.add_argument("--part", choices=("gemm1", "gemm2"), required=True)
    parser.add_argument("--tokens", type=int, required=True)
    parser.add_argument("--block-m", type=int, default=64)
    parser.add_argument("--dtype", default="bf16")
    parser.add_argument("--quantization", choices=("tensor", "channel",
                                                   "block"))
    parser.add_argument("--configs", required=True,
                        help="JSON list of config objects")
    parser.add_argument("--seconds", type=float, default=1.0,
                        help="timing budget per config")
    parser.add_argument("--seed", type=int, default=5)
    args = parser.parse_args()
    configs = json.loads(args.configs)
    if not isinstance(configs, list) or not all(isinstance(config, dict)
                                                for config in configs):
        parser.error("--configs must be a JSON list of objects")

    layer = tune_space.resolve_layer(args.compiler, args.sizes, args.dtype,
                                     args.quantization)
    pair = {gemm["part"]: gemm for gemm in tune_space.gemms(
        layer, args.dtype, args.block_m, args.quantization)}
    gemm = pair[args.part]
    torch.manual_seed(args.seed)
    x_all, w13, w2 = random_inputs(pair["gemm1"], args.tokens)
    cases, _ = model_cases(pair, args.tokens, x_all, w13, w2,
                           Reference(args.build),
                           torch.Generator().manual_seed(args.seed))
    case, active = cases[args.part]
    print(f"{layer['name']} {args.part} T={args.tokens} block_m="
          f"{args.block_m} ({active} experts hit, "
          f"{case.flops / 1e12:.2f} TFLOP)", flush=True)
    budget, flush = Budget(), L2Flush()
    device = torch.cuda.get_device_name()
    with tempfile.TemporaryDirectory() as work:
        compiler = tune_space.Compiler(args.compiler, work, device)
        for index, config in enumerate([None] + configs):
            # fp8 tiles: 128 one-byte values span the 128-byte swizzle.
            fields = (dict({"block_k": 128}, **config)
                      if config is not None and args.quantization else config)
            name = "heuristic" if config is None else json.dumps(config)
            path, why = compiler.compile(gemm, f"config-{index}", args.tokens,
                                         fields)
            us = None
            if path:
                us, why = measure(path, case, flush, budget, args.seconds)
            result = (f"{us:9.1f} us {case.flops / us / 1e6:6.0f} TFLOP/s"
                      if us else f"failed: {why}")
            print(f"  {name:70} {result}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
