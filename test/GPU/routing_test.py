#!/usr/bin/env python3
"""GPU test of the routing kernels: every routing bundle of bundles.json
(moe.gate + moe.route + moe.combine) runs on the GPU and must match the plain
C++ reference exactly - ids, weights, sorted slots, block experts, padded
count and the combined rows - on fresh random inputs that include NaN rows,
rows of ties and duplicate maxima, rows with +inf and -inf logits and rows
whose best experts share a lane of the gate's warp, with every output
poisoned first, for T in {1, 7, 128, 4096, 16384}. Exits non-zero on any
mismatch."""

import argparse
import sys
import time

import torch

from moe_mlir import Bundle
from moe_mlir.testing.bundles import bundle_path, load_specs
from moe_mlir.testing.reference import Reference
from moe_mlir.testing.routing import routing_mismatches
from moe_mlir.testing.tensors import poisoned_outputs
from moe_mlir.torch import TORCH_DTYPES


def make_logits(tokens, experts, dtype, generator):
    logits = torch.randn(tokens, experts, generator=generator) * 2
    if tokens >= 5:
        logits[0] = float("nan")                # all NaN
        logits[1, ::2] = float("nan")           # every other expert NaN
        logits[2] = 0.5                          # all tied
        logits[3, 1] = logits[3, -1] = logits[3].max() + 1  # duplicate maxima
        logits[4] = -200.0                       # sigmoid scores underflow to 0
    if tokens >= 9:
        inf = float("inf")
        logits[5, 3] = inf                       # one +inf takes all the weight
        logits[6, 2] = logits[6, -1] = inf       # two +inf share it
        logits[6, 0] = float("nan")              # ... beside a NaN and a -inf
        logits[6, 1] = -inf
        logits[7] = -inf                         # all -inf: 1/E each
        logits[8, ::3] = -inf                    # some -inf, scoring 0
    if tokens >= 11:
        # Lane 0 of the gate's warp holds experts 0, 32, 64, ...: make them
        # the best, so one lane gives up more experts than it ranks at once,
        # distinct (row 9) and tied, within the lane and with lane 1 (10).
        logits[9, ::32] = 8 + torch.arange(0, experts, 32) / 64
        logits[10, ::32] = logits[10, 1::32] = 8
    return logits.to(dtype)


def check(bundle, spec, reference, tokens, generator):
    router = spec["router"]
    experts, slots = router["experts"], router["top_k"] + router["shared"]
    logits = make_logits(tokens, experts, TORCH_DTYPES[spec["logits"]],
                         generator)
    bias = (torch.randn(experts, generator=generator) * 0.1
            if router["bias"] else None)
    rows = torch.randn(tokens, slots, spec["hidden"],
                       generator=generator).to(TORCH_DTYPES[spec["rows"]])
    inputs = [logits.cuda()] + ([bias.cuda()] if bias is not None else [])
    inputs.append(rows.cuda())
    outputs = poisoned_outputs(bundle, tokens)
    bundle.run(tokens, inputs + outputs)
    torch.cuda.synchronize()
    return routing_mismatches(reference, spec, logits, bias, rows, outputs)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--build", default="build-runtime")
    parser.add_argument("--bundles", default="out/gpu-bundles")
    parser.add_argument("--tokens", default="1,7,128,4096,16384")
    parser.add_argument("--only", default="")
    parser.add_argument("--seed", type=int, default=int(time.time()))
    args = parser.parse_args()
    print(f"routing_test: seed {args.seed}", flush=True)
    generator = torch.Generator().manual_seed(args.seed)
    reference = Reference(args.build)
    failed = 0
    for spec in load_specs(args.bundles):
        if spec["kind"] != "routing" or (args.only and spec["name"] != args.only):
            continue
        bundle = Bundle(bundle_path(args.bundles, spec))
        for tokens in map(int, args.tokens.split(",")):
            failures = check(bundle, spec, reference, tokens, generator)
            status = "PASS" if not failures else "FAIL " + "; ".join(failures)
            print(f"{spec['name']:18} T={tokens:<6} {status}", flush=True)
            failed += bool(failures)
        bundle.close()
    print("routing_test: " + ("all passed" if not failed
                              else f"{failed} case(s) failed"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
