"""What the benchmarks and the tuner time ours against: the router composed
in torch as serving engines write it (and router logits it picks experts
from uniformly), and torch's grouped matmuls (bf16 and f16, and fp8)."""

import torch
import torch.nn.functional as F


def router_fields(preset):
    """torch_router's dict from a --list-presets entry's #moe.router text."""
    fields = dict(item.split(" = ") for item in preset["router"].split(", "))
    return {"scoring": fields["scoring"], "top_k": int(fields["top_k"]),
            "groups": int(fields.get("num_groups", 1)),
            "topk_groups": int(fields.get("topk_groups", 1)),
            "renormalize": fields.get("renormalize") == "true",
            "scale": float(fields.get("routed_scaling_factor", 1.0))}


def layer_router_fields(layer):
    """torch_router's dict of a moe_mlir.Layer's router."""
    return router_fields({"router": layer.router.params()})


def torch_router(router):
    """The router as serving engines write it in torch (DeepSeek's grouped
    top-k code for groups, a plain softmax top-k otherwise)."""
    groups, keep = router["groups"], router["topk_groups"]
    top_k, scale = router["top_k"], router["scale"]

    def route(logits, bias):
        tokens, experts = logits.shape
        if router["scoring"] == "sigmoid":
            scores = logits.sigmoid()
        else:
            scores = logits.softmax(dim=-1, dtype=torch.float32)
        selection = scores + bias if bias is not None else scores
        if groups > 1:
            group_scores = selection.view(tokens, groups, -1).topk(
                2, dim=-1)[0].sum(dim=-1)
            group_ids = group_scores.topk(keep, dim=-1, sorted=False)[1]
            group_mask = torch.zeros_like(group_scores).scatter_(1, group_ids, 1)
            mask = group_mask.unsqueeze(-1).expand(
                tokens, groups, experts // groups).reshape(tokens, -1)
            selection = selection.masked_fill(~mask.bool(), float("-inf"))
        ids = selection.topk(top_k, dim=-1, sorted=False)[1]
        weights = scores.gather(1, ids)
        if router["renormalize"]:
            weights = weights / (weights.sum(dim=-1, keepdim=True) + 1e-20)
        return weights * scale, ids.to(torch.int32)

    return route


def uniform_logits(router, num_experts, tokens, bias=None, device="cuda",
                   generator=None):
    """(router logits [T, E] float32, the ids [T, top_k] int32 that
    torch_router(``router``) picks from them with ``bias``), crafted so
    that each token's top_k experts are drawn uniformly at random, as MoE
    kernels are usually benchmarked: per token, topk_groups of the
    router's groups drawn uniformly (a router without groups has one: all
    experts), then top_k distinct experts uniformly among theirs (a router
    with a group limit cannot pick any top_k of all experts; every expert
    still gets a token with chance top_k / E); their logits 6 down to 4
    (descending, so that their weights differ), the rest's uniform in
    [-6, -4). Their scores (sigmoid: >= 0.982 against <= 0.018) dominate
    a correction bias within +-0.1, in each group's top-2 sum too. Draws
    from ``generator`` (torch's default one on ``device`` when None).
    Raises RuntimeError unless the router picks exactly the drawn
    experts."""
    top_k, groups, keep = (router["top_k"], router["groups"],
                           router["topk_groups"])
    per_group = num_experts // groups

    def rand(*shape):
        return torch.rand(*shape, generator=generator, device=device)

    # The first n of a random permutation: n distinct, uniformly.
    chosen_groups = rand(tokens, groups).argsort(dim=1)[:, :keep]
    eligible = (chosen_groups.unsqueeze(2) * per_group +
                torch.arange(per_group, device=device)).flatten(1)
    drawn = eligible.gather(
        1, rand(tokens, keep * per_group).argsort(dim=1)[:, :top_k])
    logits = rand(tokens, num_experts) * 2 - 6
    chosen = torch.linspace(6.0, 4.0, top_k, device=device)
    logits.scatter_(1, drawn, chosen.repeat(tokens, 1))
    ids = torch_router(router)(logits, bias)[1]
    # Sets per token: the routers give a token's ids in no set order.
    wrong = int((ids.sort(dim=1).values !=
                 drawn.to(ids.dtype).sort(dim=1).values).any(dim=1).sum())
    if wrong:
        raise RuntimeError(f"the router picks other experts than the "
                           f"uniform draw for {wrong} of {tokens} tokens: "
                           f"the crafted logits are wrong")
    return logits, ids


def grouped_mm(mat_a, mat_b, offs):
    """torch.nn.functional.grouped_mm (torch._grouped_mm before it was
    public): rows of `mat_a` grouped by the cumulative counts `offs`, each
    group times its [K, N] matrix of `mat_b`."""
    function = getattr(F, "grouped_mm", None) or torch._grouped_mm
    return function(mat_a, mat_b, offs=offs)


def scaled_grouped_mm(mat_a, mat_b, scale_a, scale_b, offs, out_dtype):
    """torch._scaled_grouped_mm (torch 2.11 has it for the H100): e4m3 rows
    of `mat_a` [M, K] grouped by the cumulative counts `offs`, each group
    times its e4m3 [K, N] matrix of `mat_b` (column-major: [G, N, K]
    transposed), scaled per row (`scale_a` [M]) and per column of each
    matrix (`scale_b` [G, N]), in `out_dtype`."""
    return torch._scaled_grouped_mm(mat_a, mat_b, scale_a, scale_b,
                                    offs=offs, out_dtype=out_dtype)
