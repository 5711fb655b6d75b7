"""What the experts benchmarks (bench/fp8_bench.py, bench/mxfp4_bench.py)
share: their common options, compiling an experts bundle here or on the
GPU machine, timing it replayed from a CUDA graph, and the torch
composition an engine's naive backend runs, around the grouped GEMMs each
benchmark gives it."""

import argparse
import os

import torch
import torch.nn.functional as F

from moe_mlir import Bundle
from moe_mlir.testing.compiler import compile_bundle
from moe_mlir.testing.timing import graphed, kernel_times_us, time_us


def argument_parser(description, work, models):
    """The command line of an experts benchmark (`description` its
    docstring) with the options they all have, --work defaulting to `work`
    and --models to `models` (comma-separated); each adds its own."""
    parser = argparse.ArgumentParser(
        description=description,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--compiler", default="build/bin/moe-compile")
    parser.add_argument("--config-db", default="",
                        help="tuned database before the shipped entries")
    parser.add_argument("--work", default=work)
    parser.add_argument("--models", default=models)
    parser.add_argument("--tokens", default="1,16,64,256,1024,4096")
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--seed", type=int, default=2026)
    return parser


def parse_arguments(parser):
    """`parser`'s arguments with `tokens_max`, the largest of --tokens
    (what compile_experts sizes the bundles for), and the --work folder
    made."""
    args = parser.parse_args()
    args.tokens_max = max(int(t) for t in args.tokens.split(","))
    os.makedirs(args.work, exist_ok=True)
    return args


def compile_experts(args, name, arguments, quantization=None,
                    buckets=None):
    """The bundle of the experts of the layer `arguments` name (moe-compile
    --part experts) in `args.work`, with `quantization`'s weights, sized
    for `args.tokens_max` and variants for `buckets` (default
    `args.tokens`), printing moe-tile's warnings."""
    path = os.path.join(args.work, f"{name}-{quantization or 'bf16'}.moeb")
    extra = ["--quantization", quantization] if quantization else []
    for line in compile_bundle(args.compiler,
                               [*arguments, "--part", "experts", *extra,
                                "--tokens-max", str(args.tokens_max),
                                "--token-buckets", buckets or args.tokens],
                               path, args.config_db):
        if "warning" in line:
            print(f"# {name}: {line}", flush=True)
    return path


def time_bundle(path, tokens, tensors, flush, iterations, kernels_of=None):
    """(µs, output as float64) of the bundle at `path` on `tensors`
    (inputs, then the output), replayed from a CUDA graph with the L2
    flushed before each call; with `kernels_of` (a label), also prints the
    time of each of its kernels (kernel_times_us)."""
    bundle = Bundle(path)
    replay, _ = graphed(lambda: bundle.run(tokens, tensors) or tensors[-1])
    microseconds = time_us(replay, flush, iterations)
    if kernels_of:
        for name, kernel_us in kernel_times_us(replay, flush):
            print(f"# {kernels_of}: {name} {kernel_us:.1f} us", flush=True)
    output = tensors[-1].double()
    del replay
    bundle.close()
    return microseconds, output


def torch_experts(x, ids, weights, num_experts, inter, gemm1, gemm2):
    """The experts composed in torch, a function of no arguments: slots
    sorted by expert, rows gathered, ``gemm1``(rows, offs) [M, 2I],
    SiLU-and-mul, ``gemm2``(rows, offs) [M, H], routed weights, index_add_
    (the grouped GEMMs take the rows of each expert up to the cumulative
    counts ``offs``)."""
    device = x.device
    tokens, slots = ids.shape
    flat_ids = ids.reshape(-1).long()
    flat_weights = weights.reshape(-1)
    ones = torch.ones(tokens * slots, dtype=torch.int32, device=device)

    def layer():
        order = flat_ids.argsort(stable=True)
        counts = torch.zeros(num_experts, dtype=torch.int32,
                             device=device).scatter_add_(0, flat_ids, ones)
        offs = counts.cumsum(0, dtype=torch.int32)
        token = order // slots
        h = gemm1(x[token], offs)
        h = F.silu(h[:, :inter]) * h[:, inter:]
        o = gemm2(h, offs).float() * flat_weights[order].unsqueeze(1)
        y = torch.zeros(tokens, x.shape[1], device=device)
        return y.index_add_(0, token, o).to(x.dtype)

    return layer
