"""What the grouped-matmul test and benchmark share: routed ids drawn at
random, their moe.route operands from the plain C++ reference, and the
semantics of the two grouped matmuls of a layer (moe.grouped_matmul with
input(token) output(sorted) silu_and_mul, and input(sorted) output(slot)
routed_weights) written directly in torch, per expert."""

import torch


def random_ids(tokens, spec, generator, mode="uniform"):
    """[T, S] int32 expert ids on the CPU: each token's top_k distinct routed
    experts, then the fused shared experts (ids routed..experts-1) in the
    last slots. `mode` "uniform" draws the routed experts from all of them;
    "skewed" from the first top_k + 1 only, so that most experts get no
    tokens and the others get more rows than one block."""
    shared = spec["shared"]
    routed = spec["experts"] - shared
    top_k = spec["slots"] - shared
    pool = routed if mode == "uniform" else min(routed, top_k + 1)
    scores = torch.rand(tokens, pool, generator=generator)
    ids = scores.topk(top_k, dim=1).indices.to(torch.int32)
    if shared:
        fused = torch.arange(routed, routed + shared, dtype=torch.int32)
        ids = torch.cat([ids, fused.expand(tokens, shared)], dim=1)
    return ids.contiguous()


def route(reference, ids, spec):
    """(sorted_ids, expert_ids, num_padded) of moe.route, from lib/Reference
    (CPU tensors, int32; num_padded is 0-d)."""
    return reference.route(ids, spec["experts"], spec["block_m"])


def valid_rows(sorted_ids, slots_total):
    """Indices of the padded rows that hold a slot (not the sentinel), and
    those slots, both int64, in row order."""
    rows = (sorted_ids < slots_total).nonzero().view(-1)
    return rows, sorted_ids[rows].long()


def gemm1_reference(x, w13, ids, dtype=torch.float64):
    """[T*S, I]: row t*S+s = silu(gate) * up of x[t] times w13[ids[t, s]],
    gate = the first I columns, up = the last I, in `dtype` throughout."""
    tokens, slots = ids.shape
    inter = w13.shape[1] // 2
    flat = ids.reshape(-1).long().to(x.device)
    out = torch.empty(tokens * slots, inter, dtype=dtype, device=x.device)
    for expert in flat.unique().tolist():
        slot = (flat == expert).nonzero().view(-1)
        h = x[slot // slots].to(dtype) @ w13[expert].to(dtype).T
        out[slot] = torch.nn.functional.silu(h[:, :inter]) * h[:, inter:]
    return out


def gemm2_reference(rows, w2, ids, sorted_ids, weights, dtype=torch.float64):
    """[T*S, H]: slot s = weights[s] * (rows[r] times w2[ids[s]]), r the
    padded row that sorted_ids gives slot s, in `dtype` throughout."""
    tokens, slots = ids.shape
    flat = ids.reshape(-1).long().to(rows.device)
    row, slot = valid_rows(sorted_ids.to(rows.device), tokens * slots)
    expert_of_row = flat[slot]
    out = torch.empty(tokens * slots, w2.shape[1], dtype=dtype,
                      device=rows.device)
    scale = weights.reshape(-1).to(dtype).to(rows.device)
    for expert in expert_of_row.unique().tolist():
        pick = (expert_of_row == expert).nonzero().view(-1)
        h = rows[row[pick]].to(dtype) @ w2[expert].to(dtype).T
        out[slot[pick]] = h * scale[slot[pick]].unsqueeze(1)
    return out


def relative_errors(actual, expected):
    """(max |error| / max |expected|, ||error|| / ||expected||) in float64."""
    actual, expected = actual.double(), expected.double()
    error = actual - expected
    largest = expected.abs().max().item()
    norm = expected.norm().item()
    return (error.abs().max().item() / max(largest, 1e-30),
            error.norm().item() / max(norm, 1e-30))
