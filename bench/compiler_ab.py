#!/usr/bin/env python3
"""Two or more moe-compile builds against each other on whole layers: each
cell's bundle (a preset at T tokens, --tokens-max T) compiled by every
compiler, then the bundles run on the same inputs, their outputs checked bit
for bit against the first compiler's (a change that should not move a
number, an L2 policy or a schedule, must not), and timed with their calls
interleaved (a, b, a, b, ...; median of --iterations CUDA-event timings, L2
flushed before each), so that a drift of the GPU's clocks over the run
weighs on every build alike. Prints each build's µs and its change against
the first. Inputs as bench/profile_layer.sh draws them: router logits N(0, 1)
(near-uniform routing), everything else N(0, 0.02); fp8 weights N(0, 1) in
e4m3, their scales |N(0, 0.02)|; MXFP4's bytes (packed values and e8m0
scales alike) in [118, 130], finite values of scales 2^-9 to 2^3.
--compile-args go to moe-compile after the preset (fp8 or MXFP4 weights).
--tolerance compares each build's outputs to the first's within a relative
distance (max |a - b| over max |a|, output by output) instead of bit for
bit, for a change meant to move the numbers a little (fast math).

    python3 bench/compiler_ab.py --compilers base=/tmp/mc-base,new=/tmp/mc-new \\
        --cells deepseek-v3:4096,qwen3-30b-a3b:1 [--compile-args "--quantization block"]

(scripts/gpu-run.sh compiler-ab unpacks out/ab/<name>/moe-compile.xz, each
packed by scripts/pack-compiler.sh from the tree to compare, and passes them
here.) Exits non-zero when a build's outputs differ from the first's or a
bundle does not compile.
"""

import argparse
import os
import sys
import tempfile

import torch

from moe_mlir import Bundle
from moe_mlir.testing.compiler import CompileError, compile_bundle
from moe_mlir.testing.timing import L2Flush, time_interleaved_us

DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}


def parse_pairs(text, what):
    """[(name, value)] of 'name=value,...'; says what is wrong otherwise."""
    pairs = []
    for item in text.split(","):
        name, sep, value = item.partition("=" if what == "compilers" else ":")
        if not sep or not name or not value:
            raise ValueError(f"--{what}: expected "
                             f"{'NAME=PATH' if what == 'compilers' else 'PRESET:T'}"
                             f" items, got {item!r}")
        pairs.append((name, value))
    return pairs


def random_tensor(info):
    """A tensor of `info`'s shape and dtype, drawn as the docstring says (the
    f32 [T, E] router logits are the only 2-D f32 tensor of a layer)."""
    shape = tuple(info.shape)
    if info.dtype == "f8e4m3":
        return torch.randn(shape, device="cuda").to(torch.float8_e4m3fn)
    if info.dtype == "u8":
        return torch.randint(118, 131, shape, device="cuda", dtype=torch.uint8)
    values = torch.randn(shape, device="cuda", dtype=DTYPES[info.dtype])
    if info.dtype == "f32" and len(shape) == 2:
        return values
    return values.abs() * 0.02 if info.dtype == "f32" else values * 0.02


def random_inputs(bundle, tokens):
    """Every tensor the bundle takes, outputs included, on the GPU."""
    return [random_tensor(info) for info in bundle.tensors(tokens)]


def distance(reference, produced):
    """max |reference - produced| over max |reference|; NaN where either
    holds a NaN, so that no tolerance accepts it."""
    reference, produced = reference.float(), produced.float()
    return ((reference - produced).abs().max() /
            reference.abs().max().clamp_min(1e-30)).item()


def run_cell(compilers, preset, tokens, work, iterations, flush,
             compile_args, tolerance):
    """Prints one cell's rows; returns whether every build matched the
    first's outputs."""
    bundles = {}
    for name, compiler in compilers:
        path = os.path.join(work, f"{preset}-{tokens}-{name}.moeb")
        compile_bundle(compiler, ["--preset", preset, *compile_args,
                                  "--tokens-max", str(tokens),
                                  "--token-buckets", "max"], path)
        bundles[name] = Bundle(path)
    first = next(iter(bundles.values()))
    tensors = random_inputs(first, tokens)
    outputs = [index for index, info in enumerate(first.tensors(tokens))
               if info.role == "output"]
    reference, matched = None, True
    for name, bundle in bundles.items():
        bundle.run(tokens, tensors)
        torch.cuda.synchronize()
        produced = [tensors[index].clone() for index in outputs]
        if reference is None:
            reference = produced
        elif tolerance is not None:
            worst = max(distance(a, b) for a, b in zip(reference, produced))
            print(f"{preset:14} {tokens:5} {name}: outputs within {worst:.2e} "
                  f"of {compilers[0][0]}'s", flush=True)
            if not worst <= tolerance:
                matched = False
        elif not all(torch.equal(a, b) for a, b in zip(reference, produced)):
            print(f"{preset:14} {tokens:5} {name}: outputs differ from "
                  f"{compilers[0][0]}'s", flush=True)
            matched = False
    times = time_interleaved_us(
        {name: (lambda bundle=bundle: bundle.run(tokens, tensors))
         for name, bundle in bundles.items()}, flush, iterations)
    base = times[compilers[0][0]]
    print(f"{preset:14} {tokens:5} " + "  ".join(
        f"{name} {us:9.1f}" + ("" if name == compilers[0][0] else
                               f" ({(us / base - 1) * 100:+.1f} %)")
        for name, us in times.items()), flush=True)
    return matched


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--compilers", required=True,
                        help="NAME=PATH,... (two or more; the first is the "
                             "baseline)")
    parser.add_argument("--cells", required=True, help="PRESET:T,...")
    parser.add_argument("--compile-args", default="",
                        help="more moe-compile arguments, e.g. "
                             "'--quantization block'")
    parser.add_argument("--tolerance", type=float,
                        help="relative distance the outputs may move from "
                             "the first build's (default: none, bit for bit)")
    parser.add_argument("--iterations", type=int, default=12)
    parser.add_argument("--seed", type=int, default=2026)
    args = parser.parse_args()
    try:
        compilers = parse_pairs(args.compilers, "compilers")
        cells = [(preset, int(tokens))
                 for preset, tokens in parse_pairs(args.cells, "cells")]
    except ValueError as error:
        parser.error(str(error))
    if len(compilers) < 2:
        parser.error("--compilers: give two or more builds to compare")
    if not torch.cuda.is_available():
        sys.exit("compiler_ab: no GPU")
    torch.manual_seed(args.seed)
    print(f"device: {torch.cuda.get_device_name()}; µs, median of "
          f"{args.iterations} interleaved calls, L2 flushed", flush=True)
    flush = L2Flush()
    failed = 0
    with tempfile.TemporaryDirectory() as work:
        for preset, tokens in cells:
            try:
                failed += not run_cell(compilers, preset, tokens, work,
                                       args.iterations, flush,
                                       args.compile_args.split(),
                                       args.tolerance)
            except CompileError as error:
                print(f"{preset:14} {tokens:5} {error}", flush=True)
                failed += 1
            torch.cuda.empty_cache()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
