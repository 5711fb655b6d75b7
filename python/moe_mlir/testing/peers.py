"""What the benchmarks and the tuner time ours against: the router composed
in torch as serving engines write it, and torch's grouped matmuls (bf16 and
f16, and fp8)."""

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
