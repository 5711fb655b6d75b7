"""What the grouped-matmul test, benchmark and tuner share: routed ids drawn
at random, their moe.route operands from the plain C++ reference, the
semantics of the two grouped matmuls of a layer (moe.grouped_matmul with
input(token) output(sorted) silu_and_mul, and input(sorted) output(slot)
routed_weights) written directly in torch, per expert, and one grouped
matmul at one T as the benchmark and the tuner time it against
F.grouped_mm (Case)."""

import torch
import torch.nn.functional as F

from .peers import grouped_mm
from .tensors import relative_errors

DEVICE = "cuda"


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


class Case:
    """One grouped matmul at one T: our call, the peer's, the check."""

    def __init__(self, part, tokens, spec, tensors, peer, peer_epilogue,
                 compare, reference, flops, bytes_moved):
        self.part, self.tokens, self.spec = part, tokens, spec
        self.tensors, self.peer, self.peer_epilogue = tensors, peer, peer_epilogue
        self.compare, self.reference = compare, reference
        self.flops, self.bytes = flops, bytes_moved


def gemm1_case(spec, tokens, x, w13, routing, ids):
    """(Case, active experts) of a gemm1 bundle (w13, token rows gathered,
    SiLU-and-mul, rows out in expert-sorted padded order) on `x` routed by
    `ids` and their moe.route operands `routing`, all on the GPU."""
    slots, inter = spec["slots"], spec["intermediate"]
    sorted_ids, expert_ids, num_padded = routing
    out = torch.empty(sorted_ids.numel(), inter, dtype=x.dtype, device=DEVICE)
    tensors = [x, w13, sorted_ids, expert_ids, num_padded, out]
    row, slot = valid_rows(sorted_ids, tokens * slots)
    counts = torch.bincount(ids.view(-1).long(), minlength=spec["experts"])
    offs = counts.cumsum(0).to(torch.int32)
    mat_a = x[slot // slots].contiguous()       # rows pre-sorted by expert
    mat_b = w13.transpose(1, 2)                  # [E, K, N]

    def peer():
        return grouped_mm(mat_a, mat_b, offs)

    def peer_epilogue():
        h = grouped_mm(mat_a, mat_b, offs)
        return F.silu(h[:, :inter]) * h[:, inter:]

    def compare(expected=None):
        return relative_errors(out[row], peer_epilogue() if expected is None
                               else expected[slot])

    def reference():  # fp32 per expert, when grouped_mm is not there
        return gemm1_reference(x, w13, ids, torch.float32)

    active = int((counts > 0).sum())
    hidden = spec["hidden"]
    flops = 2 * tokens * slots * 2 * inter * hidden
    moved = 2 * (active * 2 * inter * hidden + tokens * hidden +
                 tokens * slots * inter)
    return Case("gemm1", tokens, spec, tensors, peer, peer_epilogue, compare,
                reference, flops, moved), active


def gemm2_case(spec, tokens, rows, w2, routing, ids, weights):
    """(Case, active experts) of a gemm2 bundle (w2 on sorted `rows`, times
    the routed `weights`, out in slot order), like gemm1_case."""
    slots, hidden = spec["slots"], spec["hidden"]
    sorted_ids, expert_ids, num_padded = routing
    out = torch.empty(tokens, slots, hidden, dtype=rows.dtype, device=DEVICE)
    tensors = [rows, w2, sorted_ids, expert_ids, num_padded, weights, out]
    row, slot = valid_rows(sorted_ids, tokens * slots)
    counts = torch.bincount(ids.view(-1).long(), minlength=spec["experts"])
    offs = counts.cumsum(0).to(torch.int32)
    mat_a = rows[row].contiguous()
    mat_b = w2.transpose(1, 2)
    scale = weights.view(-1)[slot].unsqueeze(1)
    result = torch.empty(tokens * slots, hidden, dtype=rows.dtype,
                         device=DEVICE)

    def peer():
        return grouped_mm(mat_a, mat_b, offs)

    def peer_epilogue():
        h = grouped_mm(mat_a, mat_b, offs)
        return result.index_copy_(0, slot, (h * scale).to(rows.dtype))

    def compare(expected=None):
        return relative_errors(out.view(tokens * slots, hidden),
                               peer_epilogue() if expected is None
                               else expected)

    def reference():  # fp32 per expert, when grouped_mm is not there
        return gemm2_reference(rows, w2, ids, sorted_ids, weights,
                               torch.float32)

    active = int((counts > 0).sum())
    inter = spec["intermediate"]
    flops = 2 * tokens * slots * hidden * inter
    moved = (2 * (active * hidden * inter + tokens * slots * inter +
                  tokens * slots * hidden) + 4 * tokens * slots)
    return Case("gemm2", tokens, spec, tensors, peer, peer_epilogue, compare,
                reference, flops, moved), active


def random_weights(experts, hidden, inter, dtype=torch.bfloat16):
    """(w13 [E, 2I, H], w2 [E, H, I]) on the GPU, normal with standard
    deviation 1 / sqrt(K), drawn from torch's generator."""
    w13 = torch.empty(experts, 2 * inter, hidden, dtype=dtype,
                      device=DEVICE).normal_(std=hidden ** -0.5)
    w2 = torch.empty(experts, hidden, inter, dtype=dtype,
                     device=DEVICE).normal_(std=inter ** -0.5)
    return w13, w2


def model_cases(pair, tokens, x_all, w13, w2, reference, generator):
    """({part: (Case, active experts)}, padded rows) of a model's two grouped
    matmuls (`pair`: their specs by part) at `tokens` tokens: the first
    `tokens` rows of `x_all`, routed at random (experts drawn uniformly from
    `generator`), gemm2's rows normal and its routed weights uniform in
    [0.1, 1) from torch's generator."""
    spec = pair["gemm1"]
    ids = random_ids(tokens, spec, generator)
    routing_cpu = route(reference, ids, spec)
    routing = [tensor.to(DEVICE) for tensor in routing_cpu]
    ids = ids.to(DEVICE)
    rows = torch.randn(routing[0].numel(), spec["intermediate"],
                       dtype=x_all.dtype, device=DEVICE)
    weights = torch.rand(tokens, spec["slots"], device=DEVICE) * 0.9 + 0.1
    cases = {"gemm1": gemm1_case(spec, tokens, x_all[:tokens], w13, routing,
                                 ids),
             "gemm2": gemm2_case(pair["gemm2"], tokens, rows, w2, routing,
                                 ids, weights)}
    return cases, int(routing_cpu[2])
