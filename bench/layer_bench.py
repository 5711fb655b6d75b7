#!/usr/bin/env python3
"""Whole-layer benchmark: the moe.fused_moe layer as moe-compile makes it
(router, route, both grouped matmuls with their fused epilogues, combine;
one bundle per T, compiled with --tokens-max T so that moe-tile takes the
config database's entries for that bucket) against the best torch
composition of the same layer: the router in torch (torch_router of
moe_mlir.testing.peers, which bench/router_bench.py times), slots sorted by
expert, torch.nn.functional.grouped_mm for both GEMMs, SiLU-and-mul, the
routed weights and the weighted combine (index_add_). Both sides run as
CUDA-graph replays, L2 flushed (256 MiB read) before every timed replay;
full-size Mixtral-8x7B, Qwen3-30B-A3B, DeepSeek-V3 and Kimi-K2 (shared
experts fused) and a gpt-oss-120b-sized layer in bf16 (its clamped SwiGLU
and the experts' biases, uniform in [-1, 1), which the torch composition
adds to each grouped_mm's output), random normal weights and hidden
states, the layers with a correction bias given one uniform in
[-0.1, 0.1], T in {1, 16, 64, 256, 1024, 2048, 4096}.

Routing (--routing, both by default, a row each): `own` feeds the layer's
router random normal logits; `uniform` crafts the logits so that the
layer's router picks, for each token, top_k distinct experts drawn
uniformly at random (as MoE kernels are usually benchmarked): the chosen
experts' logits 6 down to 4 (descending, so that their weights differ and
are well defined), the rest uniform in [-6, -4). A router with a group
limit (DeepSeek-V3: 8 groups, the best 4 eligible) cannot pick any top_k of
all experts, so there the draw is among what it can pick: topk_groups
groups uniformly, then top_k distinct experts uniformly among those groups'
experts (every expert still gets a token with chance top_k / E). The
correction bias stays, as both sides add it for selection: the crafted
scores (the layers with a bias score by sigmoid: chosen >= sigmoid(4) =
0.982, the rest <= sigmoid(-4) = 0.018) dominate a bias within [-0.1, 0.1],
in each group's top-2 sum too, so it shifts no choice. The experts the
torch router picks from the crafted logits are checked to be the drawn ones
(the run stops if not); ours must match the torch composition's output
(below), so it picked them too. Both routings run the same bundle and the
same torch composition, router included. Without a bias, i.i.d. logits
already pick uniformly, so for Mixtral-8x7B and Qwen3-30B-A3B the two rows
are two draws of one routing (their gap is the run's noise); with a bias
(DeepSeek-V3, Kimi-K2) `own` is skewed by it, as trained biases skew.

Prints µs (median of CUDA-event timings), the speed-up torch / ours, the
floor = max(bytes / 3.0 TB/s, flops / 720 TFLOP/s) (bytes: the weights of the
experts the routing hit plus hidden states in and out), ours / floor and
torch / floor, and our output's error against the torch composition
(||error|| / ||torch||, must be <= 2e-2 for a time to count: the two round
intermediates to bf16 at different points). --json writes the rows (each
with its routing) for bench/plot_layer_bench.py.

Our kernels are launched as programmatic dependents of the kernel before
them (docs/BUNDLE.md, "Dependent launches"), or plainly with
--dependent-launch off; with --dependent-launch both, each layer's bundle
is opened both ways and the two timed with their calls interleaved, and
the table adds the plain launches' µs and their ratio to ours (the gain).
With --kernels each row is followed by our kernels' medians (the profile
that says where a cell's time goes).
"""

import argparse
import concurrent.futures
import json
import os
import sys

import torch
import torch.nn.functional as F

from moe_mlir import Bundle
from moe_mlir.testing.compiler import compile_bundle, list_presets
from moe_mlir.testing.gemm import gated, random_weights
from moe_mlir.testing.peers import (router_fields, torch_router,
                                    uniform_logits)
from moe_mlir.testing.timing import (L2Flush, floor_us, graphed,
                                     kernel_times_us, time_interleaved_us,
                                     time_us)
from moe_mlir.testing.tune_space import swiglu_fields

TOLERANCE = 2e-2
DEVICE = "cuda"
ROUTINGS = {"own": ("own",), "uniform": ("uniform",),
            "both": ("own", "uniform")}


def uniform_bf16(*shape):
    """bf16 uniform in [-1, 1): the experts' biases of gpt-oss's layers."""
    return (torch.rand(*shape, device=DEVICE) * 2 - 1).to(torch.bfloat16)


def torch_layer(preset, x, logits, bias, w13, w2, biases):
    """The layer composed in torch, as a function of no arguments; `biases`
    the experts' (b13 [E, 2I], b2 [E, H]) of gpt-oss's layers, or ()."""
    route = torch_router(router_fields(preset))
    swiglu = (swiglu_fields(preset["swiglu"]) if "swiglu" in preset
              else None)
    experts, shared = preset["experts"], preset["shared"]
    tokens = x.shape[0]
    slots = preset["top_k"] + shared
    shared_ids = torch.arange(experts, experts + shared, dtype=torch.int32,
                              device=DEVICE).expand(tokens, shared)
    shared_weights = torch.ones(tokens, shared, device=DEVICE)
    w13_t, w2_t = w13.transpose(1, 2), w2.transpose(1, 2)
    ones = torch.ones(tokens * slots, dtype=torch.int32, device=DEVICE)

    def layer():
        weights, ids = route(logits, bias)
        ids = torch.cat([ids, shared_ids], dim=1).reshape(-1)
        weights = torch.cat([weights, shared_weights], dim=1).reshape(-1)
        order = ids.argsort(stable=True)
        counts = torch.zeros(experts + shared, dtype=torch.int32,
                             device=DEVICE).scatter_add_(0, ids.long(), ones)
        offs = counts.cumsum(0, dtype=torch.int32)
        token = order // slots
        h = F.grouped_mm(x[token], w13_t, offs=offs)
        if biases:
            row_experts = ids[order]
            h = h + biases[0][row_experts]
        h = gated(h, swiglu)
        o = F.grouped_mm(h, w2_t, offs=offs)
        if biases:
            o = o + biases[1][row_experts]
        o = o.float() * weights[order].unsqueeze(1)
        y = torch.zeros(tokens, x.shape[1], device=DEVICE)
        return y.index_add_(0, token, o).to(x.dtype)

    return layer


def open_bundle(path, dependent):
    """The bundle at `path`, launching its kernels as programmatic
    dependents or (dependent False) plainly: the runtime reads
    MOE_DEPENDENT_LAUNCH when a bundle opens."""
    previous = os.environ.get("MOE_DEPENDENT_LAUNCH")
    os.environ["MOE_DEPENDENT_LAUNCH"] = "1" if dependent else "0"
    try:
        return Bundle(path)
    finally:
        if previous is None:
            del os.environ["MOE_DEPENDENT_LAUNCH"]
        else:
            os.environ["MOE_DEPENDENT_LAUNCH"] = previous


def compile_bundles(compiler, presets, tokens_list, work, config_db, block_m,
                    jobs):
    """{(preset, T): bundle path}, compiled in parallel."""
    os.makedirs(work, exist_ok=True)

    def one(name, tokens):
        path = os.path.join(work, f"{name}-{tokens}.moeb")
        for line in compile_bundle(
                compiler, ["--preset", name, "--tokens-max", str(tokens),
                           "--token-buckets", "max",
                           "--block-m", str(block_m)], path, config_db):
            print(f"# {name} T={tokens}: {line}", flush=True)
        return path

    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        futures = {(name, tokens): pool.submit(one, name, tokens)
                   for name in presets for tokens in tokens_list}
        return {key: future.result() for key, future in futures.items()}


def router_logits(preset, tokens, routing, bias):
    """(router logits [T, E], the routed ids [T, top_k] the torch router
    picks from them) for `routing` "own" (random normal logits) or
    "uniform" (moe_mlir.testing.peers.uniform_logits: the ids picked
    checked to be the ones drawn)."""
    fields = router_fields(preset)
    if routing == "own":
        logits = torch.randn(tokens, preset["experts"], device=DEVICE)
        return logits, torch_router(fields)(logits, bias)[1]
    return uniform_logits(fields, preset["experts"], tokens, bias, DEVICE)


def layer_floor_us(preset, tokens, ids):
    """The layer's floor with the routed experts `ids` (and the shared)."""
    hidden, inter = preset["hidden"], preset["intermediate"]
    active = int(torch.unique(ids).numel()) + preset["shared"]
    slots = preset["top_k"] + preset["shared"]
    biases = 2 * inter + hidden if preset.get("expert_biases") else 0
    moved = 2 * (active * (3 * inter * hidden + biases) + 2 * tokens * hidden)
    flops = 2 * tokens * slots * 3 * inter * hidden
    return floor_us(moved, flops)


def measure(preset, tokens, routing, layer, opened, flush, iterations,
            per_kernel):
    """The row of one cell: the layer (x, w13, w2, bias) at `tokens` tokens
    under `routing`, ours through each of the `opened` bundles ({dependent
    launches: Bundle}, the first the one reported as ours) against the
    torch composition; with `per_kernel`, also our kernels' medians
    (torch.profiler, eager calls, L2 flushed before each)."""
    x, w13, w2, bias, biases = layer
    hidden = preset["hidden"]
    logits, routed = router_logits(preset, tokens, routing, bias)
    out = torch.full((tokens, hidden), float("nan"), dtype=torch.bfloat16,
                     device=DEVICE)
    tensors = ([x, logits, w13, w2] + ([bias] if bias is not None else [])
               + list(biases) + [out])

    def runner(bundle):
        def ours():
            bundle.run(tokens, tensors)
            return out
        return ours

    # Eager first (each side checked on its own), then the graphs, whose
    # replays must give the same outputs.
    ways = list(opened)
    runner(opened[ways[0]])()
    torch.cuda.synchronize()
    composed = torch_layer(preset, x, logits, bias, w13, w2, biases)
    expected = composed().double()
    torch.cuda.synchronize()
    error = ((out.double() - expected).norm() / expected.norm()).item()
    our_replays = {dependent: graphed(runner(bundle))[0]
                   for dependent, bundle in opened.items()}
    torch_replay, torch_out = graphed(composed)
    torch_replay()
    for replay in our_replays.values():
        out.fill_(float("nan"))
        replay()
        torch.cuda.synchronize()
        error = max(error, ((out.double() - torch_out.double()).norm() /
                            torch_out.double().norm()).item())
    row = {"layer": preset["name"], "routing": routing, "tokens": tokens,
           "error": error, "floor": layer_floor_us(preset, tokens, routed),
           "torch": time_us(torch_replay, flush, iterations), "ours": None}
    if error <= TOLERANCE:
        times = time_interleaved_us(our_replays, flush, iterations)
        row["ours"] = times[ways[0]]
        if len(ways) > 1:
            row["plain"] = times[False]
        if per_kernel:
            row["kernels"] = kernel_times_us(runner(opened[ways[0]]), flush,
                                             iterations)
    return row


def cells(row):
    """(ours, speed-up, ours / floor, plain launches' µs, plain / ours) as
    table text; the last two only with --dependent-launch both."""
    ours, plain = row["ours"], row.get("plain")
    if not ours:
        return "mismatch", "-", "-", "-", "-"
    return (f"{ours:.1f}", f"{row['torch'] / ours:.2f}x",
            f"{ours / row['floor']:.2f}x", f"{plain:.1f}" if plain else "-",
            f"{plain / ours:.3f}" if plain else "-")


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--compiler", default="build/bin/moe-compile")
    parser.add_argument("--config-db", default="",
                        help="tuned database before the shipped entries")
    parser.add_argument("--work", default="out/layer-bench")
    parser.add_argument("--presets",
                        default="mixtral-8x7b,qwen3-30b-a3b,deepseek-v3,"
                                "kimi-k2,gpt-oss-120b")
    parser.add_argument("--tokens", default="1,16,64,256,1024,2048,4096")
    parser.add_argument("--routing", default="both", choices=tuple(ROUTINGS),
                        help="the layer's router on random logits (own), "
                             "on logits crafted for uniform random experts "
                             "(uniform), or both, one row each")
    parser.add_argument("--block-m", type=int, default=0,
                        help="rows per routing block of our layers (0: "
                             "moe-compile's choice for each T)")
    parser.add_argument("--iterations", type=int, default=30)
    parser.add_argument("--dependent-launch", default="on",
                        choices=("on", "off", "both"),
                        help="launch our kernels as programmatic dependents "
                             "(on), plainly (off), or time both ways (both)")
    parser.add_argument("--kernels", action="store_true",
                        help="also print each of our kernels' median µs "
                             "under its row (eager calls, torch.profiler)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count())
    parser.add_argument("--json", default="", help="write the rows here")
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument("--flush", default="read", choices=("read", "zero"),
                        help="evict the L2 before each timed call by reading "
                             "256 MiB, or by zeroing them as the tables "
                             "before session 18 did (timing.L2Flush)")
    args = parser.parse_args()
    tokens_list = [int(t) for t in args.tokens.split(",")]
    presets = list_presets(args.compiler)
    names = args.presets.split(",")
    bundles = compile_bundles(args.compiler, names, tokens_list, args.work,
                              args.config_db, args.block_m, args.jobs)
    flush = L2Flush(DEVICE, args.flush)
    torch.manual_seed(args.seed)
    device = torch.cuda.get_device_name()
    print(f"device: {device}, torch {torch.__version__}")
    ways = {"on": (True,), "off": (False,),
            "both": (True, False)}[args.dependent_launch]
    both = len(ways) > 1
    print(f"{'layer':14} {'routing':7} {'T':>5} {'ours':>9} {'torch':>9} "
          f"{'speed-up':>8} {'floor':>8} {'ours/floor':>10} "
          f"{'torch/floor':>11} {'error':>8}"
          + (f" {'plain':>9} {'plain/ours':>10}" if both else "")
          + "  (us, CUDA graphs)", flush=True)
    rows, failed = [], 0
    for name in names:
        preset = presets[name]
        experts = preset["experts"] + preset["shared"]
        hidden, inter = preset["hidden"], preset["intermediate"]
        w13, w2 = random_weights(experts, hidden, inter)
        # Bounded, so that uniform_logits' scores dominate it.
        bias = (torch.rand(preset["experts"], device=DEVICE) * 0.2 - 0.1
                if preset["bias"] else None)
        biases = ((uniform_bf16(experts, 2 * inter),
                   uniform_bf16(experts, hidden))
                  if preset.get("expert_biases") else ())
        for tokens in tokens_list:
            x = torch.randn(tokens, hidden, dtype=torch.bfloat16,
                            device=DEVICE)
            opened = {dependent: open_bundle(bundles[(name, tokens)],
                                             dependent)
                      for dependent in ways}
            for routing in ROUTINGS[args.routing]:
                row = measure(preset, tokens, routing,
                              (x, w13, w2, bias, biases),
                              opened, flush, args.iterations, args.kernels)
                row.update(device=device, block_m=args.block_m,
                           dependent_launch=args.dependent_launch)
                failed += row["ours"] is None
                rows.append(row)
                text = cells(row)
                print(f"{name:14} {routing:7} {tokens:>5} {text[0]:>9} "
                      f"{row['torch']:9.1f} {text[1]:>8} "
                      f"{row['floor']:8.1f} {text[2]:>10} "
                      f"{row['torch'] / row['floor']:10.2f}x "
                      f"{row['error']:8.1e}"
                      + (f" {text[3]:>9} {text[4]:>10}" if both else ""),
                      flush=True)
                for kernel, us in row.get("kernels", ()):
                    print(f"    {kernel:44} {us:9.1f}", flush=True)
            for bundle in opened.values():
                bundle.close()
        del w13, w2, biases
        torch.cuda.empty_cache()
    print("\n| layer | routing | T | ours µs | torch µs | speed-up | "
          "floor µs | ours / floor | torch / floor | error |"
          + (" plain µs | plain / ours |" if both else ""))
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"
          + ("---:|---:|" if both else ""))
    for row in rows:
        text = cells(row)
        print(f"| {row['layer']} | {row['routing']} | {row['tokens']} | "
              f"{text[0]} | {row['torch']:.1f} | {text[1]} | "
              f"{row['floor']:.1f} | {text[2]} | "
              f"{row['torch'] / row['floor']:.2f}x | {row['error']:.1e} |"
              + (f" {text[3]} | {text[4]} |" if both else ""))
    if args.json:
        with open(args.json, "w") as file:
            json.dump(rows, file, indent=1)
    print(f"layer_bench: {'all outputs matched' if not failed else f'{failed} mismatch(es)'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
