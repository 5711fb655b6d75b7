#!/usr/bin/env python3
"""GPU test of the routing kernels: every routing bundle of bundles.json
(moe.gate + moe.route + moe.combine) runs on the GPU and must match the plain
C++ reference exactly - ids, weights, sorted slots, block experts, padded
count and the combined rows - on fresh random inputs that include NaN rows,
rows of ties and duplicate maxima, with every output poisoned first, for
T in {1, 7, 128, 4096, 16384}. Exits non-zero on any mismatch."""

import argparse
import os
import sys
import time

import torch

from moe_mlir import Bundle
from moe_mlir.torch import TORCH_DTYPES

sys.path.insert(0, os.path.dirname(__file__))
from moe_ctypes import DTYPES, Reference, load_specs  # noqa: E402

POISON_INT = -123456789


def make_logits(tokens, experts, dtype, generator):
    logits = torch.randn(tokens, experts, generator=generator) * 2
    if tokens >= 5:
        logits[0] = float("nan")                # all NaN
        logits[1, ::2] = float("nan")           # every other expert NaN
        logits[2] = 0.5                          # all tied
        logits[3, 1] = logits[3, -1] = logits[3].max() + 1  # duplicate maxima
        logits[4] = -200.0                       # sigmoid scores underflow to 0
    return logits.to(dtype)


def poisoned(shape, dtype):
    if dtype.is_floating_point:
        return torch.full(shape, float("nan"), dtype=dtype, device="cuda")
    return torch.full(shape, POISON_INT, dtype=dtype, device="cuda")


def bits(tensor):
    """The tensor's bit patterns, so that -0 differs from +0 and NaN == NaN."""
    width = {4: torch.int32, 2: torch.int16}[tensor.element_size()]
    return tensor.contiguous().view(-1).view(width)


def compare(name, actual, expected, failures):
    actual = actual.cpu()
    if actual.dtype.is_floating_point:
        if not torch.equal(bits(actual), bits(expected)):
            difference = (actual.float() - expected.float()).abs()
            failures.append(f"{name}: {int((difference > 0).sum())} of "
                            f"{difference.numel()} differ, max "
                            f"{difference.max().item():.3g}")
        if not torch.isfinite(actual.float()).all():
            failures.append(f"{name}: not finite (unwritten?)")
    elif not torch.equal(actual, expected):
        wrong = int((actual != expected).sum())
        failures.append(f"{name}: {wrong} of {actual.numel()} differ")


def check(bundle, spec, reference, tokens, generator):
    router = spec["router"]
    experts, slots = router["experts"], router["top_k"] + router["shared"]
    logits = make_logits(tokens, experts, DTYPES[spec["logits"]][1], generator)
    bias = (torch.randn(experts, generator=generator) * 0.1
            if router["bias"] else None)
    rows_dtype = DTYPES[spec["rows"]][1]
    rows = torch.randn(tokens, slots, spec["hidden"],
                       generator=generator).to(rows_dtype)
    inputs = [logits.cuda()] + ([bias.cuda()] if bias is not None else [])
    inputs.append(rows.cuda())
    outputs = [poisoned(info.shape, TORCH_DTYPES[info.dtype])
               for info in bundle.tensors(tokens) if info.role == "output"]
    bundle.run(tokens, inputs + outputs)
    torch.cuda.synchronize()
    return routing_mismatches(reference, spec, logits, bias, rows, outputs)


def routing_mismatches(reference, spec, logits, bias, rows, outputs):
    """How the outputs of routing bundle `spec` (weights, ids, sorted_ids,
    expert_ids, num_padded, combined) differ from the C++ reference's on the
    same inputs, bit for bit: [] when they match. The route is checked on
    the bundle's own ids, so that a wrong gate is reported once."""
    router = spec["router"]
    logits, rows = logits.cpu(), rows.cpu()
    bias = bias.cpu() if bias is not None else None
    weights, ids, sorted_ids, expert_ids, num_padded, combined = outputs
    failures = []
    expected_weights, expected_ids = reference.gate(router, logits, bias)
    compare("ids", ids, expected_ids, failures)
    compare("weights", weights, expected_weights, failures)
    expected_sorted, expected_experts, expected_padded = reference.route(
        ids.cpu(), router["experts"] + router["shared"], spec["block_m"])
    compare("sorted_ids", sorted_ids, expected_sorted, failures)
    compare("expert_ids", expert_ids, expected_experts, failures)
    compare("num_padded", num_padded, expected_padded, failures)
    compare("combined", combined,
            reference.combine(rows).to(TORCH_DTYPES[spec["rows"]]), failures)
    return failures


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
        bundle = Bundle(os.path.join(args.bundles, spec["name"] + ".moeb"))
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
