#!/usr/bin/env python3
"""GPU test of MXFP4 experts (W4A16): every mxfp4-experts bundle of
bundles.json (moe.fused_experts with packed e2m1 weights and e8m0 scales per
32 values of K, bf16 activations) runs on the GPU on fresh random inputs,
output poisoned first, and must match a float64 reference of the same layer
on the weights the codes decode to (decoded here by table, exactly) within
||error|| / ||reference|| <= 1e-2 and max |error| / max |reference| <=
2e-2, the bf16 layers' tolerance: the kernel decodes to bf16 exactly, so
what differs is the fp32 accumulation and the bf16 roundings of the
intermediate and the slot rows. The codes are uniform random bytes (every
e2m1 value, -0 too), the scales random exponents around the one that keeps
the sums near 1, with some rows at the extreme scales 2^-127 and 2^-100.
Ids are random with about one slot in 8 out of range. Exits non-zero on any
mismatch."""

import argparse
import math
import sys
import time

import torch

from moe_mlir import Bundle
from moe_mlir.testing.bundles import bundle_path, load_specs
from moe_mlir.testing.mxfp4 import decode, random_mxfp4
from moe_mlir.testing.tensors import poisoned, relative_errors, uniform

from layer_test import given_routing

NORM_TOLERANCE, MAX_TOLERANCE = 1e-2, 2e-2


def random_weights(generator, experts, n, k):
    """Random MXFP4 codes and scales, with rows at the extreme scales 2^-127
    and 2^-100."""
    codes, scales = random_mxfp4(generator, experts, n, k)
    scales[:, 0, 0] = 0
    scales[:, -1, -1] = 27
    return codes, scales


def activation(name, x):
    if name == "silu":
        return torch.nn.functional.silu(x)
    return torch.nn.functional.gelu(x)


def reference(spec, hidden, ids, weights, w13, w2):
    """The experts in float64 (the intermediate rounded to bf16, as the
    layer stores it), as bf16."""
    intermediate = spec["intermediate"]
    x = hidden.double()
    output = torch.zeros_like(x)
    for expert in range(spec["experts"]):
        tokens, slots = torch.nonzero(ids == expert, as_tuple=True)
        if tokens.numel() == 0:
            continue
        gate_up = x[tokens] @ w13[expert].T
        act = activation(spec["activation"], gate_up[:, :intermediate]) * \
            gate_up[:, intermediate:]
        down = act.to(torch.bfloat16).double() @ w2[expert].T
        output.index_add_(0, tokens, down * weights[tokens, slots, None])
    return output.to(torch.bfloat16)


def check(bundle, spec, tokens, generator):
    """One run on random routing; returns (failure or '', errors)."""
    hidden_size, intermediate = spec["hidden"], spec["intermediate"]
    experts = spec["experts"]
    hidden = uniform(generator, tokens, hidden_size).to(torch.bfloat16)
    w13_codes, w13_scales = random_weights(generator, experts,
                                           2 * intermediate, hidden_size)
    w2_codes, w2_scales = random_weights(generator, experts, hidden_size,
                                         intermediate)
    ids, weights = given_routing(generator, tokens, spec["slots"], experts)
    device = [tensor.cuda() for tensor in
              (hidden, ids, weights, w13_codes, w2_codes, w13_scales,
               w2_scales)]
    output = poisoned((tokens, hidden_size), torch.bfloat16)
    bundle.run(tokens, [*device, output])
    torch.cuda.synchronize()
    hidden, ids, weights, w13_codes, w2_codes, w13_scales, w2_scales = device
    expected = reference(spec, hidden, ids, weights.double(),
                         decode(w13_codes, w13_scales),
                         decode(w2_codes, w2_scales))
    actual = output
    if not torch.isfinite(actual.float()).all():
        return "output not finite (unwritten rows?)", (math.nan, math.nan)
    error, norm_error = relative_errors(actual.cpu(), expected.cpu())
    failure = (f"max {error:.3g}, norm {norm_error:.3g}"
               if error > MAX_TOLERANCE or norm_error > NORM_TOLERANCE else "")
    return failure, (error, norm_error)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--bundles", default="out/gpu-bundles")
    parser.add_argument("--tokens", default="1,7,64,1000,4096")
    parser.add_argument("--seed", type=int, default=int(time.time()))
    parser.add_argument("--only", default="",
                        help="comma-separated bundle names (default: all)")
    args = parser.parse_args()
    print(f"mxfp4_test: seed {args.seed}", flush=True)
    generator = torch.Generator().manual_seed(args.seed)
    failed = 0
    for spec in load_specs(args.bundles):
        if spec["kind"] != "mxfp4-experts" or (
                args.only and spec["name"] not in args.only.split(",")):
            continue
        bundle = Bundle(bundle_path(args.bundles, spec))
        for tokens in map(int, args.tokens.split(",")):
            failure, error = check(bundle, spec, tokens, generator)
            print(f"{spec['name']:22} T={tokens:<5} error max {error[0]:.2e} "
                  f"norm {error[1]:.2e} {'FAIL ' + failure if failure else 'PASS'}",
                  flush=True)
            failed += bool(failure)
        bundle.close()
    print("mxfp4_test: " + ("all passed" if not failed
                            else f"{failed} case(s) failed"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
