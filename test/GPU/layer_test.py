#!/usr/bin/env python3
"""GPU test of whole layers: every layer bundle of bundles.json (router,
route, both grouped matmuls, combine) runs on the GPU and must match the
plain C++ reference of moe.fused_moe (intermediates rounded to the layer's
element type, as the op stores them) on fresh random inputs, output poisoned
first: max |error| over max |reference| within 1e-5 (f32), 4e-3 (f16) or
2e-2 (bf16). Exits non-zero on any mismatch."""

import argparse
import sys
import time

import torch

from moe_mlir import Bundle
from moe_mlir.testing.bundles import bundle_path, load_specs
from moe_mlir.testing.reference import Reference
from moe_mlir.testing.tensors import poisoned, relative_errors, uniform
from moe_mlir.torch import TORCH_DTYPES

TOLERANCE = {"f32": 1e-5, "f16": 4e-3, "bf16": 2e-2}


def check(bundle, spec, reference, tokens, generator):
    router, dtype = spec["router"], TORCH_DTYPES[spec["dtype"]]
    experts = router["experts"]
    stored = experts + router["shared"]
    hidden_size, intermediate = spec["hidden"], spec["intermediate"]
    hidden = uniform(generator, tokens, hidden_size).to(dtype)
    logits = uniform(generator, tokens, experts, scale=2.0)
    w13 = uniform(generator, stored, 2 * intermediate, hidden_size,
                  scale=hidden_size ** -0.5).to(dtype)
    w2 = uniform(generator, stored, hidden_size, intermediate,
                 scale=intermediate ** -0.5).to(dtype)
    bias = (uniform(generator, experts, scale=0.1) if router["bias"]
            else None)
    inputs = [hidden, logits, w13, w2] + ([bias] if bias is not None else [])
    output = poisoned((tokens, hidden_size), dtype)
    bundle.run(tokens, [tensor.cuda() for tensor in inputs] + [output])
    torch.cuda.synchronize()

    expected = reference.fused_moe(router, spec["activation"], spec["dtype"],
                                   hidden, logits, bias, w13, w2)
    actual = output.cpu()
    if not torch.isfinite(actual.float()).all():
        return "output not finite (unwritten rows?)"
    relative, _ = relative_errors(actual, expected)
    if relative > TOLERANCE[spec["dtype"]]:
        return f"max |error| / max |reference| {relative:.3g}"
    return ""


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--build", default="build-runtime")
    parser.add_argument("--bundles", default="out/gpu-bundles")
    parser.add_argument("--tokens", default="1,7,128,1000")
    parser.add_argument("--seed", type=int, default=int(time.time()))
    args = parser.parse_args()
    print(f"layer_test: seed {args.seed}", flush=True)
    generator = torch.Generator().manual_seed(args.seed)
    reference = Reference(args.build)
    failed = 0
    for spec in load_specs(args.bundles):
        if spec["kind"] != "layer":
            continue
        bundle = Bundle(bundle_path(args.bundles, spec))
        for tokens in map(int, args.tokens.split(",")):
            failure = check(bundle, spec, reference, tokens, generator)
            print(f"{spec['name']:16} T={tokens:<5} "
                  f"{'FAIL ' + failure if failure else 'PASS'}", flush=True)
            failed += bool(failure)
        bundle.close()
    print("layer_test: " + ("all passed" if not failed
                            else f"{failed} case(s) failed"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
