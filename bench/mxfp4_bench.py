#!/usr/bin/env python3
"""MXFP4 benchmark (W4A16: e2m1 weights with an e8m0 scale per 32 values,
bf16 activations): our MXFP4 experts against our bf16 experts on the
weights they decode to, the torch composition in bf16 and the floor, on the
H100.

The experts of gpt-oss-20b (E=32) and gpt-oss-120b (E=128) (top-4, H = I =
2880), compiled here by moe-compile (--layer-sizes ... --part experts,
--quantization mxfp4; the bf16 ones without), at T in --tokens with uniform
random routing (each token's top_k distinct experts drawn uniformly), CUDA-
graph replays, L2 flushed (256 MiB read) before each: ours in MXFP4, ours
in bf16 (same ids), and the torch composition in bf16 (slots sorted by
expert, rows gathered, F.grouped_mm for both GEMMs, SiLU-and-mul, routed
weights, index_add_). Floor = max(bytes / 3.0 TB/s, flops / 720 TFLOP/s),
bytes = the MXFP4 weights of the experts hit (4.25 bits per weight with the
scales) plus the bf16 hidden states in and out. "vs bf16" is our MXFP4
output's distance to our bf16 layer (the same values: only the summation
order differs; test/GPU/mxfp4_test.py checks correctness).

  PYTHONPATH=build-runtime/python bench/mxfp4_bench.py --compiler moe-compile
"""

import sys

import torch

from moe_mlir.testing.experts_bench import (argument_parser, compile_experts,
                                            parse_arguments, time_bundle,
                                            torch_experts)
from moe_mlir.testing.gemm import random_ids
from moe_mlir.testing.mxfp4 import decode, random_mxfp4
from moe_mlir.testing.peers import grouped_mm
from moe_mlir.testing.timing import L2Flush, floor_us, graphed, time_us

DEVICE = "cuda"
MODELS = {"gpt-oss-20b": 32, "gpt-oss-120b": 128}
HIDDEN = INTER = 2880
TOP_K = 4
BITS_PER_WEIGHT = 4 + 8 / 32


def experts_floor_us(ids, tokens):
    active = int(torch.unique(ids).numel())
    weight_bytes = 3 * INTER * HIDDEN * BITS_PER_WEIGHT / 8
    moved = active * weight_bytes + 2 * 2 * tokens * HIDDEN
    return floor_us(moved, 2 * tokens * TOP_K * 3 * INTER * HIDDEN)


def model_rows(args, flush, name, experts):
    sizes = (f"experts={experts},hidden={HIDDEN},intermediate={INTER},"
             f"top_k={TOP_K}")
    paths = {mxfp4: compile_experts(args, name, ["--layer-sizes", sizes],
                                    "mxfp4" if mxfp4 else None)
             for mxfp4 in (True, False)}
    generator = torch.Generator(DEVICE).manual_seed(args.seed)
    id_generator = torch.Generator().manual_seed(args.seed)
    routing = {"experts": experts, "shared": 0, "slots": TOP_K}
    w13 = random_mxfp4(generator, experts, 2 * INTER, HIDDEN, DEVICE)
    w2 = random_mxfp4(generator, experts, HIDDEN, INTER, DEVICE)
    w13_values = decode(*w13, dtype=torch.bfloat16)
    w2_values = decode(*w2, dtype=torch.bfloat16)
    w13_t, w2_t = w13_values.transpose(1, 2), w2_values.transpose(1, 2)
    operands_of = {True: [w13[0], w2[0], w13[1], w2[1]],
                   False: [w13_values, w2_values]}
    rows = []
    for tokens in [int(t) for t in args.tokens.split(",")]:
        x = torch.rand(tokens, HIDDEN, device=DEVICE, generator=generator
                       ).mul(2).sub(1).to(torch.bfloat16)
        ids = random_ids(tokens, routing, id_generator).to(DEVICE)
        weights = torch.rand(tokens, TOP_K, device=DEVICE,
                             generator=generator)
        row = {"model": name, "tokens": tokens,
               "floor": experts_floor_us(ids, tokens)}
        outputs = {}
        for mxfp4, path in paths.items():
            tensors = [x, ids, weights, *operands_of[mxfp4],
                       torch.full((tokens, HIDDEN), float("nan"),
                                  dtype=torch.bfloat16, device=DEVICE)]
            row["mxfp4" if mxfp4 else "bf16"], outputs[mxfp4] = time_bundle(
                path, tokens, tensors, flush, args.iterations)
        row["vs_bf16"] = ((outputs[True] - outputs[False]).norm() /
                          outputs[False].norm()).item()
        replay, _ = graphed(torch_experts(
            x, ids, weights, experts, INTER,
            lambda rows, offs: grouped_mm(rows, w13_t, offs),
            lambda rows, offs: grouped_mm(rows, w2_t, offs)))
        row["torch"] = time_us(replay, flush, args.iterations)
        del replay
        rows.append(row)
        print(format_row(row), flush=True)
    return rows


def format_row(row):
    return (f"{row['model']:13} {row['tokens']:>5} {row['mxfp4']:9.1f} "
            f"{row['bf16']:9.1f} {row['bf16'] / row['mxfp4']:7.2f}x "
            f"{row['torch']:9.1f} {row['floor']:8.1f} "
            f"{row['mxfp4'] / row['floor']:8.2f}x {row['vs_bf16']:8.1e}")


def main():
    args = parse_arguments(argument_parser(__doc__, "out/mxfp4-bench",
                                           "gpt-oss-20b,gpt-oss-120b"))
    flush = L2Flush(DEVICE)
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    print(f"\n{'experts':13} {'T':>5} {'mxfp4':>9} {'bf16':>9} {'gain':>8} "
          f"{'torch':>9} {'floor':>8} {'ours/floor':>9} {'vs bf16':>8}  "
          "(us, CUDA graphs, uniform routing)", flush=True)
    rows = []
    for name in args.models.split(","):
        rows += model_rows(args, flush, name, MODELS[name])
        torch.cuda.empty_cache()
    print("\n| experts | T | ours MXFP4 µs | ours bf16 µs | MXFP4 gain | "
          "torch bf16 µs | floor µs | MXFP4 / floor | vs bf16 |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        print(f"| {row['model']} | {row['tokens']} | {row['mxfp4']:.1f} | "
              f"{row['bf16']:.1f} | {row['bf16'] / row['mxfp4']:.2f}x | "
              f"{row['torch']:.1f} | {row['floor']:.1f} | "
              f"{row['mxfp4'] / row['floor']:.2f}x | {row['vs_bf16']:.1e} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
