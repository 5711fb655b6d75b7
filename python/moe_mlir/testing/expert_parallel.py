"""What the expert-parallel GPU tests (test/GPU/ep_test.py, one GPU's
simulated world, and ep_dist_test.py, a rank per GPU) and benchmark share:
a layer's random weights and each rank's share of them, a rank's inputs
under uniform or skewed routing, and the check of a rank's output against
the plain C++ reference of the whole layer."""

import torch

from ..expert_parallel import local_experts

#: max |error| / max |reference| a bf16 output may have, as torch_test's.
TOLERANCE = 2e-2


def full_weights(layer, generator, device):
    """The whole layer's bf16 [w13, w2] (normal, scaled by 1/sqrt(fan-in))
    and its correction bias (or None), the same on every rank that passes
    the same generator."""
    hidden, inter = layer.hidden_size, layer.intermediate_size
    stored = layer.num_stored_experts

    def normal(*shape, scale):
        return (torch.randn(*shape, generator=generator) * scale).to(
            torch.bfloat16).to(device)

    weights = [normal(stored, 2 * inter, hidden, scale=hidden ** -0.5),
               normal(stored, hidden, inter, scale=inter ** -0.5)]
    bias = (torch.randn(layer.num_experts, generator=generator).to(device)
            * 0.1 if layer.correction_bias else None)
    return weights, bias


def rank_weights(layer, world, rank, weights):
    """Rank ``rank``'s [w13, w2] of the whole layer's ``weights``: its E/W
    routed experts, then the shared ones."""
    mine = torch.tensor(local_experts(layer, world, rank),
                        device=weights[0].device)
    return [weight.index_select(0, mine).contiguous() for weight in weights]


def rank_inputs(layer, tokens, skewed, bias, generator, device):
    """A rank's routing inputs [hidden states, logits(, bias)]: normal
    hidden states and logits; ``skewed``, every token's logits favour the
    first top_k experts (rank 0's, in one group), so that rank 0's regions
    fill to their capacity and the other ranks receive nothing routed."""
    hidden = torch.randn(tokens, layer.hidden_size,
                         generator=generator).to(torch.bfloat16)
    logits = torch.randn(tokens, layer.num_experts, generator=generator)
    if skewed:
        logits[:, :layer.router.top_k] += 20.0
    return [hidden.to(device), logits.to(device)] + (
        [bias] if bias is not None else [])


def reference_router(layer):
    """Layer.router as moe_mlir.testing.reference.Reference takes it."""
    router = layer.router
    return {"scoring": router.scoring, "top_k": router.top_k,
            "groups": router.num_groups, "topk_groups": router.topk_groups,
            "renormalize": router.renormalize,
            "scale": router.routed_scaling_factor,
            "shared": router.num_shared_experts}


def reference_error(reference, layer, routing, weights, output):
    """(finite, max |error| / max |reference|) of a rank's ``output``
    against the reference layer on its ``routing`` inputs with the whole
    layer's ``weights``, intermediates rounded to bf16."""
    bias = routing[2] if len(routing) > 2 else None
    expected = reference.fused_moe(reference_router(layer), "silu", "bf16",
                                   routing[0], routing[1], bias, *weights)
    actual = output.float().cpu()
    scale = max(expected.abs().max().item(), 1e-30)
    return (bool(torch.isfinite(actual).all()),
            (actual - expected).abs().max().item() / scale)
