#!/usr/bin/env python3
"""FP8 benchmark (W8A8, 128 x 128 weight blocks, activations per token and
128 columns): our fp8 experts against our bf16 experts on the same routing,
the torch composition in fp8 and the floor, on the H100.

Two parts, all compiled here by moe-compile (--part experts, --quantization
block; the bf16 ones without) with the tuned configs of --config-db and the
shipped database:

* gemm: one block-scaled grouped matmul of DeepGEMM's shape, 4 experts x
  8192 rows, N = 4096, K = 7168: the first GEMM of an experts bundle of
  E=4, H=7168, I=2048, top-1, T=32768 with uniform routing, its kernel timed
  by the CUDA profiler (median of --iterations calls), in TFLOP/s against
  the 1450 TFLOP/s FP8 dense count; beside it our bf16 GEMM, torch's
  torch._scaled_grouped_mm (rowwise scales: one per row of A and per
  output channel, no blocks) and F.grouped_mm in bf16 on the same shape.
* layers: the DeepSeek-V3 and Kimi-K2 experts (routed and shared) at T in
  --tokens with uniform random routing (each token's top_k distinct routed
  experts drawn uniformly, then the shared one), CUDA-graph replays, L2
  flushed (256 MiB read) before each: ours in fp8, ours in bf16 (same
  ids), and the torch composition in fp8 (slots sorted by expert, rows
  gathered, quantized per row, torch._scaled_grouped_mm for both GEMMs
  with per-channel weight scales, SiLU-and-mul, routed weights,
  index_add_; a different recipe, timed only). Floor = max(bytes / 3.0
  TB/s, flops / 1450 TFLOP/s), bytes = the fp8 weights and scales of the
  experts hit plus the bf16 hidden states in and out. "vs bf16" is our fp8
  output's distance to our bf16 layer on the dequantized weights (the
  activations' quantization; test/GPU/fp8_test.py checks correctness).
  --kernels also prints the µs of each of the fp8 experts' kernels in one
  call (torch.profiler over ten graph replays, the median of each).

  PYTHONPATH=build-runtime/python bench/fp8_bench.py --compiler moe-compile
"""

import statistics
import sys

import torch
import torch.nn.functional as F

from moe_mlir import Bundle
from moe_mlir.testing.compiler import list_presets
from moe_mlir.testing.experts_bench import (argument_parser, compile_experts,
                                            parse_arguments, time_bundle,
                                            torch_experts)
from moe_mlir.testing.gemm import Fp8Rows, random_fp8_weights, random_ids
from moe_mlir.testing.peers import scaled_grouped_mm
from moe_mlir.testing.timing import (FP8_MATH, L2Flush, floor_us,
                                     graphed, time_us)

DEVICE = "cuda"
BLOCK = 128


def dequantized(weights):
    """bf16 values of Fp8Weights, an expert at a time (no float32 copy of
    all experts)."""
    values = torch.empty(weights.shape, dtype=torch.bfloat16, device=DEVICE)
    for expert in range(weights.shape[0]):
        values[expert] = weights[expert].to(torch.bfloat16)
    return values


def rowwise_quantized(rows):
    """rows [M, K] as e4m3 with one scale [M] per row (amax / 448)."""
    quantized = Fp8Rows(rows, "channel")
    return quantized.codes, quantized.scales[:, 0]


def torch_fp8_experts(x, ids, weights, w13, w2, inter):
    """The experts composed in torch with torch._scaled_grouped_mm, rows
    quantized per row, weights with per-channel scales: a function of no
    arguments."""
    experts = w13.shape[0]
    w13_t, w2_t = w13.transpose(1, 2), w2.transpose(1, 2)
    s13 = torch.full((experts, w13.shape[1]), 1e-3, device=DEVICE)
    s2 = torch.full((experts, w2.shape[1]), 1e-3, device=DEVICE)

    def gemm(weights_t, scales):
        def multiply(rows, offs):
            q, qs = rowwise_quantized(rows)
            return scaled_grouped_mm(q, weights_t, qs, scales, offs,
                                     torch.bfloat16)
        return multiply

    return torch_experts(x, ids, weights, experts, inter, gemm(w13_t, s13),
                         gemm(w2_t, s2))


def kernel_us(function, iterations, flush):
    """{kernel name: median µs} of `function`'s CUDA kernels, in the order
    they first ran."""
    function()
    torch.cuda.synchronize()
    times = {}
    with torch.profiler.profile(
            activities=[torch.profiler.ProfilerActivity.CUDA]) as profile:
        for _ in range(iterations):
            flush()
            function()
        torch.cuda.synchronize()
    for event in profile.events():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            times.setdefault(event.name, []).append(event.device_time_total)
    return {name: statistics.median(values) for name, values in times.items()}


def gemm_part(args, flush):
    """The DeepGEMM-shape cell."""
    experts, hidden, inter, tokens = 4, 7168, 2048, 32768
    sizes = (f"experts={experts},hidden={hidden},intermediate={inter},"
             "top_k=1")
    saved = args.tokens_max
    args.tokens_max = tokens
    paths = {fp8: compile_experts(args, "gemm", ["--layer-sizes", sizes],
                                  "block" if fp8 else None, buckets="max")
             for fp8 in (True, False)}
    args.tokens_max = saved
    generator = torch.Generator(DEVICE).manual_seed(args.seed)
    flops = 2 * tokens * 2 * inter * hidden
    x = torch.randn(tokens, hidden, dtype=torch.bfloat16, device=DEVICE,
                    generator=generator)
    # Exactly tokens / experts rows each: DeepGEMM's 8192 per expert.
    ids = torch.arange(tokens, device=DEVICE, dtype=torch.int32)[:, None] % \
        experts
    weights = torch.ones(tokens, 1, device=DEVICE)
    w13, w2 = random_fp8_weights(experts, hidden, inter, "block")
    print(f"\ngrouped matmul: {experts} experts x {tokens // experts} rows, "
          f"N={2 * inter}, K={hidden} ({flops / 1e12:.2f} TFLOP)")
    for fp8, path in paths.items():
        bundle = Bundle(path)
        out = torch.empty(tokens, hidden, dtype=torch.bfloat16, device=DEVICE)
        operands = ([x, ids, weights, w13.codes, w2.codes, w13.scales,
                     w2.scales] if fp8 else
                    [x, ids, weights, dequantized(w13), dequantized(w2)])
        times = kernel_us(lambda: bundle.run(tokens, operands + [out]),
                          args.iterations, flush)
        gemm = next(name for name in times if "grouped_matmul" in name)
        us = times[gemm]
        print(f"  ours {'fp8 ' if fp8 else 'bf16'}             {us:9.1f} us "
              f"{flops / us / 1e6:7.0f} TFLOP/s  ({gemm})")
        bundle.close()
    a, a_scales = rowwise_quantized(x)
    b_scales = torch.full((experts, 2 * inter), 1e-3, device=DEVICE)
    offs = torch.arange(1, experts + 1, dtype=torch.int32,
                        device=DEVICE) * (tokens // experts)
    peers = {
        "torch._scaled_grouped_mm": lambda: scaled_grouped_mm(
            a, w13.codes.transpose(1, 2), a_scales, b_scales, offs,
            torch.bfloat16),
    }
    w13_bf16 = dequantized(w13)
    peers["F.grouped_mm bf16"] = lambda: F.grouped_mm(
        x, w13_bf16.transpose(1, 2), offs=offs)
    for name, peer in peers.items():
        us = time_us(peer, flush, args.iterations)
        print(f"  {name:24} {us:9.1f} us {flops / us / 1e6:7.0f} TFLOP/s")
    print(f"  floor (1450 TFLOP/s)     {flops / FP8_MATH * 1e6:9.1f} us")


def experts_floor_us(ids, hidden, inter, tokens, slots):
    """fp8 weights and scales of the experts hit, bf16 rows in and out."""
    active = int(torch.unique(ids).numel())
    weight_bytes = 3 * inter * hidden * (1 + 4 / BLOCK ** 2)
    moved = active * weight_bytes + 2 * 2 * tokens * hidden
    flops = 2 * tokens * slots * 3 * inter * hidden
    return floor_us(moved, flops, math=FP8_MATH)


def model_rows(args, flush, name, preset):
    """The rows of one model's experts at each T of --tokens (a function
    of its own, so that its weights, bundles and graphs go with it)."""
    routed, shared = preset["experts"], preset["shared"]
    hidden, inter, top_k = (preset["hidden"], preset["intermediate"],
                            preset["top_k"])
    stored, slots = routed + shared, top_k + shared
    arguments = ["--preset", name]
    if args.block_m:
        arguments += ["--block-m", str(args.block_m)]
    paths = {fp8: compile_experts(args, name, arguments,
                                  "block" if fp8 else None)
             for fp8 in (True, False)}
    generator = torch.Generator(DEVICE).manual_seed(args.seed)
    id_generator = torch.Generator().manual_seed(args.seed)
    routing = {"experts": stored, "shared": shared, "slots": slots}
    w13, w2 = random_fp8_weights(stored, hidden, inter, "block")
    operands_of = {True: [w13.codes, w2.codes, w13.scales, w2.scales],
                   False: [dequantized(w13), dequantized(w2)]}
    rows = []
    for tokens in [int(t) for t in args.tokens.split(",")]:
        x = torch.randn(tokens, hidden, dtype=torch.bfloat16, device=DEVICE,
                        generator=generator)
        ids = random_ids(tokens, routing, id_generator).to(DEVICE)
        weights = torch.rand(tokens, slots, device=DEVICE,
                             generator=generator)
        row = {"model": name, "tokens": tokens,
               "floor": experts_floor_us(ids, hidden, inter, tokens, slots)}
        outputs = {}
        for fp8, path in paths.items():
            tensors = [x, ids, weights, *operands_of[fp8],
                       torch.full((tokens, hidden), float("nan"),
                                  dtype=torch.bfloat16, device=DEVICE)]
            row["fp8" if fp8 else "bf16"], outputs[fp8] = time_bundle(
                path, tokens, tensors, flush, args.iterations,
                f"{name} fp8 T={tokens}" if fp8 and args.kernels else None)
        row["vs_bf16"] = ((outputs[True] - outputs[False]).norm() /
                          outputs[False].norm()).item()
        try:
            replay, _ = graphed(torch_fp8_experts(x, ids, weights, w13.codes,
                                                  w2.codes, inter))
            row["torch"] = time_us(replay, flush, args.iterations)
            del replay
        except Exception as error:  # report, time ours still
            row["torch"] = None
            print(f"# torch fp8 composition failed: {error}")
        rows.append(row)
        print(format_row(row), flush=True)
    return rows


def layer_part(args, flush, presets):
    print(f"\n{'experts':12} {'T':>5} {'fp8':>9} {'bf16':>9} {'fp8 gain':>8} "
          f"{'torch fp8':>9} {'floor':>8} {'fp8/floor':>9} {'vs bf16':>8}  "
          "(us, CUDA graphs, uniform routing)", flush=True)
    rows = []
    for name in args.models.split(","):
        rows += model_rows(args, flush, name, presets[name])
        torch.cuda.empty_cache()
    print("\n| experts | T | ours fp8 µs | ours bf16 µs | fp8 gain | torch fp8 "
          "µs | floor µs | fp8 / floor | vs bf16 |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        torch_us = f"{row['torch']:.1f}" if row["torch"] else "-"
        print(f"| {row['model']} | {row['tokens']} | {row['fp8']:.1f} | "
              f"{row['bf16']:.1f} | {row['bf16'] / row['fp8']:.2f}x | "
              f"{torch_us} | {row['floor']:.1f} | "
              f"{row['fp8'] / row['floor']:.2f}x | {row['vs_bf16']:.1e} |")
    return rows


def format_row(row):
    torch_us = f"{row['torch']:9.1f}" if row["torch"] else f"{'-':>9}"
    return (f"{row['model']:12} {row['tokens']:>5} {row['fp8']:9.1f} "
            f"{row['bf16']:9.1f} {row['bf16'] / row['fp8']:7.2f}x "
            f"{torch_us} {row['floor']:8.1f} "
            f"{row['fp8'] / row['floor']:8.2f}x {row['vs_bf16']:8.1e}")


def main():
    parser = argument_parser(__doc__, "out/fp8-bench", "deepseek-v3,kimi-k2")
    parser.add_argument("--parts", default="gemm,layers")
    parser.add_argument("--block-m", type=int, default=0,
                        help="layers: rows per routing block (default: "
                             "moe-compile's choice for each T)")
    parser.add_argument("--kernels", action="store_true",
                        help="layers: also print each fp8 kernel's µs "
                             "(torch.profiler)")
    args = parse_arguments(parser)
    flush = L2Flush(DEVICE)
    torch.manual_seed(args.seed)  # random_fp8_weights draws from it
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    if "gemm" in args.parts:
        gemm_part(args, flush)
    if "layers" in args.parts:
        layer_part(args, flush, list_presets(args.compiler))
    return 0


if __name__ == "__main__":
    sys.exit(main())
