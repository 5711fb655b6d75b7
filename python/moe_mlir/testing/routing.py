"""A routing bundle (moe.gate, moe.route, moe.combine; a routing spec of
bundles.json) against the C++ reference, bit for bit."""

import torch

from ..torch import TORCH_DTYPES
from .tensors import bits


def routing_mismatches(reference, spec, logits, bias, rows, outputs):
    """How the outputs of routing bundle `spec` (weights, ids, sorted_ids,
    expert_ids, num_padded, combined) differ from `reference`'s on the same
    inputs, bit for bit: [] when they match. The route is checked on the
    bundle's own ids, so that a wrong gate is reported once."""
    router = spec["router"]
    weights, ids, sorted_ids, expert_ids, num_padded, combined = outputs
    failures = []
    expected_weights, expected_ids = reference.gate(router, logits, bias)
    _compare("ids", ids, expected_ids, failures)
    _compare("weights", weights, expected_weights, failures)
    expected_sorted, expected_experts, expected_padded = reference.route(
        ids, router["experts"] + router["shared"], spec["block_m"])
    _compare("sorted_ids", sorted_ids, expected_sorted, failures)
    _compare("expert_ids", expert_ids, expected_experts, failures)
    _compare("num_padded", num_padded, expected_padded, failures)
    _compare("combined", combined,
             reference.combine(rows).to(TORCH_DTYPES[spec["rows"]]), failures)
    return failures


def _compare(name, actual, expected, failures):
    """Appends to `failures` how `actual` differs from `expected` (CPU)."""
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
