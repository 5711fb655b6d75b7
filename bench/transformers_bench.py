#!/usr/bin/env python3
"""transformers' MoE blocks with their experts run by moe-mlir against
transformers' own experts implementations.

The MoE block of Qwen3-30B-A3B and of Mixtral-8x7B (transformers'
Qwen3MoeSparseMoeBlock and MixtralSparseMoeBlock at the models' sizes,
random bf16 weights on the GPU) runs forwards of 1, 64 and 4096 tokens with
its experts module under the experts implementations "grouped_mm" and
"batched_mm" (transformers') and "moe_mlir" (moe_mlir.transformers.register:
FusedExperts); the router is the block's own under all three. Two scopes are
timed: the block's forward (router and experts, as a model calls it) and
the experts call alone (the seam the setting swaps; the router's output
fixed). Eager calls (transformers' grouped_mm does not capture into CUDA
graphs), CUDA events, the L2 flushed before each call
(moe_mlir.testing.timing), after warm-up; --rounds rounds alternate the
implementations' order, each timing --iterations calls; a time is the median
of its rounds' medians. An implementation that runs out of memory at a size
(batched_mm gathers each token's experts' weights) is left out there, and
the output says why. Before timing, moe_mlir's block output is checked
against grouped_mm's (max |error| / max |grouped_mm| <= TOLERANCE, else the
cell's speed-up is not reported).

Prints a table: µs per implementation, and speed-up = best peer's µs /
moe_mlir's (the target: >= 1.3x in every cell). The bundles come from here:
    /usr/bin/python3 bench/transformers_bench.py --prepare   # here
    scripts/gpu-run.sh hf-bench                              # there
"""

import argparse
import importlib
import statistics
import sys

import moe_mlir.transformers as hf

try:
    import torch
except ImportError:  # --prepare runs where MLIR is, which has no torch.
    torch = None

# The MoE keys of the models' config.json files.
MODELS = {
    "qwen3-30b-a3b": {
        "model_type": "qwen3_moe", "hidden_size": 2048,
        "intermediate_size": 6144, "moe_intermediate_size": 768,
        "num_experts": 128, "num_experts_per_tok": 8,
        "norm_topk_prob": True, "hidden_act": "silu"},
    "mixtral-8x7b": {
        "model_type": "mixtral", "hidden_size": 4096,
        "intermediate_size": 14336, "num_local_experts": 8,
        "num_experts_per_tok": 2, "hidden_act": "silu"},
}
TOKENS = (1, 64, 4096)
TOKENS_MAX = max(TOKENS)
PEERS = ("grouped_mm", "batched_mm")
IMPLEMENTATIONS = PEERS + (hf.EXPERTS_IMPLEMENTATION,)
TARGET = 1.3
TOLERANCE = 2e-2


def build_block(settings, generator):
    """The model's MoE block on the GPU in bf16: matrices normal with
    standard deviation 1/sqrt(fan-in)."""
    from transformers import AutoConfig
    model_type = settings["model_type"]
    config = AutoConfig.for_model(model_type, **{
        key: value for key, value in settings.items() if key != "model_type"})
    modeling = importlib.import_module(
        f"transformers.models.{model_type}.modeling_{model_type}")
    with torch.device("cuda"):
        block = getattr(modeling, hf.BLOCK_CLASSES[model_type])(config)
    block.to(torch.bfloat16).eval()
    with torch.no_grad():
        for parameter in block.parameters():
            parameter.normal_(std=parameter.shape[-1] ** -0.5,
                              generator=generator)
    return block, config


def experts_inputs(block, hidden):
    """The arguments the block's forward calls its experts module with."""
    captured = []
    handle = block.experts.register_forward_pre_hook(
        lambda module, args: captured.append(args))
    try:
        block(hidden)
    finally:
        handle.remove()
    return captured[0]


def run_or_reason(call):
    """(call(), None), or (None, why) when the GPU runs out of memory."""
    try:
        return call(), None
    except torch.cuda.OutOfMemoryError as error:
        torch.cuda.empty_cache()
        return None, f"out of memory ({str(error).splitlines()[0]})"


def measure(config, names, call, flush, rounds, iterations):
    """{implementation: µs} of `call` under each experts implementation of
    `names`, rounds alternating their order; one that runs out of memory
    while timed is left out, with its reason printed."""
    from moe_mlir.testing.timing import time_us
    times = {name: [] for name in names}
    for round_index in range(rounds):
        order = list(times)
        if not order:
            break
        shift = round_index % len(order)
        for name in order[shift:] + order[:shift]:
            config._experts_implementation = name
            elapsed, reason = run_or_reason(
                lambda: time_us(call, flush, iterations, warm_up_calls=2))
            if reason:
                print(f"  {name}: left out, {reason}", flush=True)
                del times[name]
            else:
                times[name].append(elapsed)
    return {name: statistics.median(values) for name, values in times.items()}


def output_error(outputs):
    """max |moe_mlir - grouped_mm| / max |grouped_mm| of the block's
    outputs, NaN when either is missing."""
    if not {"grouped_mm", hf.EXPERTS_IMPLEMENTATION} <= set(outputs):
        return float("nan")
    expected = outputs["grouped_mm"].double()
    return ((outputs[hf.EXPERTS_IMPLEMENTATION].double() - expected)
            .abs().max() / expected.abs().max()).item()


def bench_model(model, settings, args, flush, generator):
    """The table rows of `model` at every T."""
    block, config = build_block(settings, generator)
    rows = []
    for tokens in TOKENS:
        hidden = (torch.randn(1, tokens, config.hidden_size,
                              generator=generator, device="cuda")
                  .to(torch.bfloat16))
        outputs = {}
        for name in IMPLEMENTATIONS:
            config._experts_implementation = name
            output, reason = run_or_reason(lambda: block(hidden))
            if reason:
                print(f"{model} T={tokens}: {name} left out, {reason}",
                      flush=True)
            else:
                outputs[name] = output
        torch.cuda.synchronize()
        error = output_error(outputs)
        names = list(outputs)
        del outputs
        experts_args = experts_inputs(block, hidden)
        for scope, call in (("block", lambda: block(hidden)),
                            ("experts",
                             lambda: block.experts(*experts_args))):
            times = measure(config, names, call, flush, args.rounds,
                            args.iterations)
            rows.append((model, tokens, scope, times, error))
            print_row(rows[-1])
    del block
    torch.cuda.empty_cache()
    return rows


def print_header():
    print("| model | T | scope | " + " | ".join(
        f"{name} µs" for name in IMPLEMENTATIONS)
        + " | speed-up (best peer / moe_mlir) | error |")
    print("|---|---:|---|" + "---:|" * len(IMPLEMENTATIONS) + "---:|---:|",
          flush=True)


def speed_up(times, error):
    """The cell's speed-up text: best peer / moe_mlir, marked when below
    TARGET; none when moe_mlir's output is wrong."""
    ours = times.get(hf.EXPERTS_IMPLEMENTATION)
    peers = [times[name] for name in PEERS if name in times]
    if ours is None or not peers:
        return "-"
    if not error <= TOLERANCE:
        return f"none: error {error:.3g} (tolerance {TOLERANCE})"
    ratio = min(peers) / ours
    return f"{ratio:.2f}x" + ("" if ratio >= TARGET else f" (< {TARGET}x)")


def print_row(row):
    model, tokens, scope, times, error = row
    cells = [f"{times[name]:.1f}" if name in times else "OOM"
             for name in IMPLEMENTATIONS]
    print(f"| {model} | {tokens} | {scope} | " + " | ".join(cells)
          + f" | {speed_up(times, error)} | {error:.2e} |", flush=True)


def main():
    parser = argparse.ArgumentParser(
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prepare", action="store_true",
                        help="compile FusedExperts' bundles into --cache")
    parser.add_argument("--cache", default="out/gpu-bundles/transformers",
                        help="FusedExperts' bundle cache")
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--seed", type=int, default=2026)
    args = parser.parse_args()
    models = args.models.split(",")
    unknown = set(models) - set(MODELS)
    if unknown:
        parser.error(f"unknown models {sorted(unknown)} ({', '.join(MODELS)})")
    if args.prepare:
        for path in hf.prepare_bundles([MODELS[name] for name in models],
                                       cache_dir=args.cache,
                                       tokens_max=TOKENS_MAX, blocks=False):
            print(path)
        return 0

    if torch is None:
        parser.error("torch is needed (all but --prepare run on the GPU)")
    import transformers
    from moe_mlir.testing.timing import L2Flush
    print(f"transformers {transformers.__version__}, torch "
          f"{torch.__version__}, {torch.cuda.get_device_name()}", flush=True)
    hf.register(cache_dir=args.cache, tokens_max=TOKENS_MAX)
    generator = torch.Generator(device="cuda").manual_seed(args.seed)
    flush = L2Flush()
    rows = []
    with torch.inference_mode():
        print_header()
        for model in models:
            rows += bench_model(model, MODELS[model], args, flush, generator)
    print("\nAll cells:")
    print_header()
    for row in rows:
        print_row(row)
    return 0


if __name__ == "__main__":
    sys.exit(main())
