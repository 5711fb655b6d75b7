#!/usr/bin/env python3
"""One bundle for every token count: the bundle FusedMoE builds by default
(moe-compile --tokens-max 16384: a variant per range of token counts) against
the bundle compiled for the call's T alone (--tokens-max T --token-buckets
max), for the four presets at full size (shared experts fused) and a layer
no preset has (bench/Inputs/e256-top8-no-shared.mlir: DeepSeek-V3's sizes and
router, 256 experts, no shared expert).

Both bundles run the same inputs: random normal weights, hidden states and
router logits, routed two ways: `uniform` (no correction bias: every expert
equally likely) and, for the layers with one, `own` (the layer's router with
a random correction bias, N(0, 0.1), which skews the choice as trained
biases do). Each bundle is checked against the other (the variant the
default bundle picks for T must compute what the per-T bundle does;
||a - b|| / ||b|| <= 1e-2) and timed as CUDA-graph replays, L2 flushed
(256 MiB read) before every timed replay: --iterations CUDA-event
timings of each, the two bundles' calls interleaved (so that the clocks'
drift over a long cell, 6 % at T = 16384 where both bundles run the same
kernels, weighs on both alike), the median of each bundle's. Prints µs for
both, default / per-T (target: <= 1.03) and the floor max(bytes / 3.0
TB/s, flops / 720 TFLOP/s) with ours / floor, the bytes counting the
experts the routing actually hit.

Each layer runs in a process of its own: in one process, a layer measured
after others (Kimi-K2 at T = 1 after three layers' weights had come and
gone) came out 15 % slower in one bundle and not the other.
"""

import argparse
import concurrent.futures
import json
import os
import subprocess
import sys
import tempfile

import torch

from moe_mlir import Bundle
from moe_mlir.testing.compiler import compile_bundle, list_presets
from moe_mlir.testing.gemm import random_weights
from moe_mlir.testing.peers import router_fields, torch_router
from moe_mlir.testing.timing import (L2Flush, floor_us, graphed,
                                     time_interleaved_us)

DEVICE = "cuda"
TOKENS_MAX = 16384
TOLERANCE = 1e-2
EXTRA = "e256-top8-no-shared"
EXTRA_LAYER = {"name": EXTRA, "hidden": 7168, "intermediate": 2048,
               "experts": 256, "top_k": 8, "shared": 0, "bias": True,
               "router": "scoring = sigmoid, top_k = 8, num_groups = 8, "
                         "topk_groups = 4, renormalize = true, "
                         "routed_scaling_factor = 2.5"}
DEFAULT_TOKENS = ("1,2,3,4,8,16,32,64,127,128,256,512,1000,1024,2048,4096,"
                  "8192,16384")


def source_args(name):
    """moe-compile's arguments for a layer of the benchmark."""
    if name == EXTRA:
        here = os.path.dirname(os.path.abspath(__file__))
        return [os.path.join(here, "Inputs", EXTRA + ".mlir")]
    return ["--preset", name]


def compile_all(compiler, names, tokens_list, work, config_db, jobs):
    """{(name, None): the default bundle, (name, T): T's own bundle}."""
    os.makedirs(work, exist_ok=True)

    def one(name, tokens):
        suffix = "default" if tokens is None else f"t{tokens}"
        path = os.path.join(work, f"{name}-{suffix}.moeb")
        sizing = (["--tokens-max", str(TOKENS_MAX)] if tokens is None else
                  ["--tokens-max", str(tokens), "--token-buckets", "max"])
        compile_bundle(compiler, [*source_args(name), *sizing], path,
                       config_db)
        return path

    keys = [(name, tokens) for name in names
            for tokens in [None, *tokens_list]]
    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        futures = {key: pool.submit(one, *key) for key in keys}
        return {key: future.result() for key, future in futures.items()}


def layer_floor_us(layer, tokens, experts_hit):
    """The floor of a layer call whose routed slots hit `experts_hit`."""
    hidden, inter = layer["hidden"], layer["intermediate"]
    slots = layer["top_k"] + layer["shared"]
    active = experts_hit + layer["shared"]
    moved = 2 * (active * 3 * inter * hidden + 2 * tokens * hidden)
    return floor_us(moved, 2 * tokens * slots * 3 * inter * hidden)


def run_layer(layer, routing, bundles, tokens_list, flush, args):
    """The rows of a layer under `routing` (uniform or own)."""
    experts = layer["experts"] + layer["shared"]
    hidden = layer["hidden"]
    w13, w2 = random_weights(experts, hidden, layer["intermediate"])
    bias = None
    if layer["bias"]:
        bias = (torch.randn(layer["experts"], device=DEVICE) * 0.1
                if routing == "own" else
                torch.zeros(layer["experts"], device=DEVICE))
    route = torch_router(router_fields(layer))
    default = Bundle(bundles[(layer["name"], None)])
    rows = []
    for tokens in tokens_list:
        x = torch.randn(tokens, hidden, dtype=torch.bfloat16, device=DEVICE)
        logits = torch.randn(tokens, layer["experts"], device=DEVICE)
        inputs = [x, logits, w13, w2] + ([bias] if bias is not None else [])
        own = Bundle(bundles[(layer["name"], tokens)])
        outputs = {}

        def runner(bundle, key):
            out = torch.full((tokens, hidden), float("nan"),
                             dtype=torch.bfloat16, device=DEVICE)
            outputs[key] = out

            def run():
                bundle.run(tokens, inputs + [out])
                return out
            return run

        replays = {key: graphed(runner(bundle, key))[0]
                   for key, bundle in (("default", default), ("own", own))}
        for replay in replays.values():
            replay()
        torch.cuda.synchronize()
        a, b = outputs["default"].double(), outputs["own"].double()
        difference = ((a - b).norm() / b.norm()).item()
        times = time_interleaved_us(replays, flush, args.iterations)
        own.close()
        hit = int(torch.unique(route(logits, bias)[1]).numel())
        rows.append({"layer": layer["name"], "routing": routing,
                     "tokens": tokens, "default": times["default"],
                     "own": times["own"],
                     "floor": layer_floor_us(layer, tokens, hit),
                     "difference": difference,
                     "variant": default.variants[default.variant_for(tokens)]})
        print(format_row(rows[-1]), flush=True)
    default.close()
    del w13, w2
    torch.cuda.empty_cache()
    return rows


def run_isolated(name, args):
    """The rows of layer `name`, measured by a process of its own."""
    with tempfile.TemporaryDirectory() as work:
        path = os.path.join(work, "rows.json")
        subprocess.run([sys.executable, os.path.abspath(__file__),
                        *sys.argv[1:],
                        "--layers", name, "--rows", path], check=True)
        with open(path) as rows:
            return json.load(rows)


def measure_layer(args):
    """Measures the layer of --layers under each routing into --rows."""
    name = args.layers
    tokens_list = [int(t) for t in args.tokens.split(",")]
    layer = (EXTRA_LAYER if name == EXTRA else
             dict(list_presets(args.compiler)[name], name=name))
    bundles = compile_all(args.compiler, [name], tokens_list, args.work,
                          args.config_db, args.jobs)
    flush = L2Flush(DEVICE)
    torch.manual_seed(args.seed)
    rows = []
    for routing in args.routing.split(","):
        if routing == "own" and not layer["bias"]:
            continue  # without a bias, the same routing as uniform
        rows += run_layer(layer, routing, bundles, tokens_list, flush, args)
    with open(args.rows, "w") as out:
        json.dump(rows, out)
    return 0


def format_row(row):
    ratio = row["default"] / row["own"]
    return (f"| {row['layer']} | {row['routing']} | {row['tokens']} | "
            f"{row['variant']} | "
            f"{row['default']:.1f} | {row['own']:.1f} | {ratio:.3f} | "
            f"{row['floor']:.1f} | {row['default'] / row['floor']:.2f}x | "
            f"{row['difference']:.1e} |")


def main():
    parser = argparse.ArgumentParser(
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--compiler", default="build/bin/moe-compile")
    parser.add_argument("--config-db", default="")
    parser.add_argument("--work", default="out/variants-bench")
    parser.add_argument("--layers", default="mixtral-8x7b,qwen3-30b-a3b,"
                        f"deepseek-v3,kimi-k2,{EXTRA}")
    parser.add_argument("--tokens", default=DEFAULT_TOKENS)
    parser.add_argument("--routing", default="uniform,own",
                        help="uniform (no correction bias) and/or own (the "
                             "layer's router with a random bias)")
    parser.add_argument("--iterations", type=int, default=30)
    parser.add_argument("--jobs", type=int, default=os.cpu_count())
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument("--rows", default="",
                        help="(internal) measure the one layer of --layers "
                             "and write its rows to this JSON file")
    args = parser.parse_args()
    if args.rows:
        return measure_layer(args)
    names = args.layers.split(",")
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    print("| layer | routing | T | variant (max T) | default µs | per-T µs | "
          "default / per-T | floor µs | default / floor | difference |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|", flush=True)
    rows = []
    for name in names:
        rows += run_isolated(name, args)
    mismatched = [row for row in rows if not row["difference"] <= TOLERANCE]
    worst = max(rows, key=lambda row: row["default"] / row["own"])
    print(f"variants_bench: worst default / per-T "
          f"{worst['default'] / worst['own']:.3f} ({worst['layer']} "
          f"{worst['routing']} T={worst['tokens']}); "
          + (f"{len(mismatched)} mismatch(es)" if mismatched
             else "all outputs matched"))
    return 1 if mismatched else 0


if __name__ == "__main__":
    sys.exit(main())
