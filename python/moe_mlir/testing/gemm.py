"""What the grouped-matmul test, benchmark and tuner share: routed ids drawn
at random, their moe.route operands from the plain C++ reference, the
semantics of the two grouped matmuls of a layer (moe.grouped_matmul with
input(token) output(sorted) silu_and_mul, and input(sorted) output(slot)
routed_weights) written directly in torch, per expert, and one grouped
matmul at one T as the benchmark and the tuner time it against
F.grouped_mm (Case). FP8 grouped matmuls (moe-compile --part gemm1|gemm2
--quantization) take e4m3 rows and weights with their scales (Fp8Rows,
Fp8Weights), are timed against torch._scaled_grouped_mm and checked
against the same references on the dequantized operands."""

import functools

import torch
import torch.nn.functional as F

from ..layers import SCALE_BLOCK
from ..torch import TORCH_DTYPES, quantize_fp8_weights
from .peers import grouped_mm, scaled_grouped_mm
from .tensors import relative_errors

DEVICE = "cuda"
FP8 = torch.float8_e4m3fn


def dequantize(codes, scales, rows, columns):
    """float32 values of e4m3 `codes` [R, K]: each block of `rows` x
    `columns` of them (the last ones ragged) times its scale of `scales`
    (ceil(R / rows) x ceil(K / columns) of them, in any shape). Written by
    blocks, apart from how moe_mlir.torch quantizes."""
    height, width = codes.shape
    padded = F.pad(codes.float(), (0, -width % columns, 0, -height % rows))
    blocks = padded.unflatten(1, (-1, columns)).unflatten(0, (-1, rows))
    scaled = blocks * scales.reshape(blocks.shape[0], 1, blocks.shape[2], 1)
    return scaled.flatten(2).flatten(0, 1)[:height, :width]


class Fp8Rows:
    """Rows [R, K] quantized as moe.quantize quantizes them for weights
    scaled per `scaling`: e4m3 `codes` and fp32 `scales` [R, G] per row and
    SCALE_BLOCK columns for block scales (G = ceil(K / SCALE_BLOCK)), per
    row otherwise (G = 1), each max(amax, 1e-10) / 448."""

    def __init__(self, values, scaling):
        width = values.shape[1]
        self.group = SCALE_BLOCK if scaling == "block" else width
        # Zero columns pad the last group without changing its amax.
        padded = F.pad(values.float(), (0, -width % self.group))
        codes, self.scales = quantize_fp8_weights(
            padded.unflatten(1, (-1, self.group)), "channel")
        self.codes = codes.flatten(1)[:, :width].contiguous()

    def values(self):
        return dequantize(self.codes, self.scales, 1, self.group)

    def element_size(self):
        return self.codes.element_size()


class Fp8Weights:
    """e4m3 weights [E, N, K] (`codes`) and their fp32 `scales` per
    `scaling` ([E], [E, N] or [E, ceil(N/128), ceil(K/128)]). Indexed by
    expert it gives that expert's float32 values, as the float references
    (gemm1_reference, gemm2_reference) read weights."""

    def __init__(self, codes, scales, scaling):
        self.codes, self.scales, self.scaling = codes, scales, scaling
        self.shape = codes.shape

    def __getitem__(self, expert):
        _, n, k = self.shape
        rows, columns = {"tensor": (n, k), "channel": (1, k),
                         "block": (SCALE_BLOCK, SCALE_BLOCK)}[self.scaling]
        return dequantize(self.codes[expert], self.scales[expert], rows,
                          columns)

    def element_size(self):
        return self.codes.element_size()


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


def clamped_swiglu(gate, up, alpha, limit):
    """gpt-oss's activation of the halves, as #moe.swiglu defines it:
    (clamp(up, -limit, limit) + 1) * g * sigmoid(alpha * g), g = min(gate,
    limit)."""
    gate = gate.clamp(max=limit)
    up = up.clamp(-limit, limit)
    return (up + 1) * gate * torch.sigmoid(alpha * gate)


def gated(h, swiglu=None):
    """The gated activation of h [rows, 2I] (gate columns, then up):
    SiLU-and-mul, or the clamped SwiGLU of `swiglu` (alpha, limit)."""
    gate, up = h.chunk(2, dim=1)
    if swiglu is None:
        return torch.nn.functional.silu(gate) * up
    return clamped_swiglu(gate, up, *swiglu)


def gemm1_reference(x, w13, ids, dtype=torch.float64, bias=None,
                    swiglu=None):
    """[T*S, I]: row t*S+s = the gated activation (gated()) of x[t] times
    w13[ids[t, s]] plus that expert's `bias` [E, 2I] when given, gate = the
    first I columns, up = the last I, in `dtype` throughout."""
    tokens, slots = ids.shape
    inter = w13.shape[1] // 2
    flat = ids.reshape(-1).long().to(x.device)
    out = torch.empty(tokens * slots, inter, dtype=dtype, device=x.device)
    for expert in flat.unique().tolist():
        slot = (flat == expert).nonzero().view(-1)
        h = x[slot // slots].to(dtype) @ w13[expert].to(dtype).T
        if bias is not None:
            h += bias[expert].to(dtype).to(x.device)
        out[slot] = gated(h, swiglu)
    return out


def gemm2_reference(rows, w2, ids, sorted_ids, weights, dtype=torch.float64,
                    bias=None):
    """[T*S, H]: slot s = weights[s] * (rows[r] times w2[ids[s]] plus that
    expert's `bias` [E, H] when given), r the padded row that sorted_ids
    gives slot s, in `dtype` throughout."""
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
        if bias is not None:
            h += bias[expert].to(dtype).to(rows.device)
        out[slot[pick]] = h * scale[slot[pick]].unsqueeze(1)
    return out


class Case:
    """One grouped matmul at one T: our call, the peer's (named
    `peer_name`), the check."""

    def __init__(self, part, tokens, spec, tensors, peer, peer_epilogue,
                 compare, reference, flops, bytes_moved, peer_name):
        self.part, self.tokens, self.spec = part, tokens, spec
        self.tensors, self.peer, self.peer_epilogue = tensors, peer, peer_epilogue
        self.compare, self.reference = compare, reference
        self.flops, self.bytes = flops, bytes_moved
        self.peer_name = peer_name


def _bundle_operands(rows, weights):
    """(rows, weights, [their scales]) as a grouped-matmul bundle takes them:
    fp8 operands as their codes, their scales after the other operands."""
    if isinstance(weights, Fp8Weights):
        return rows.codes, weights.codes, [rows.scales, weights.scales]
    return rows, weights, []


def _output_dtype(spec, rows):
    """The bundle's output type: the rows', or fp8 rows' layer's."""
    return (TORCH_DTYPES[spec["dtype"]] if isinstance(rows, Fp8Rows)
            else rows.dtype)


def _peer(rows, weights, index, offs, out_dtype):
    """(name, call) of the peer's grouped matmul of rows[index] (in expert
    order, counted by `offs`) by `weights`: F.grouped_mm, or for fp8
    operands torch._scaled_grouped_mm, which has no block scales: timed
    on the same e4m3 operands with unit rowwise scales."""
    if not isinstance(weights, Fp8Weights):
        mat_a, mat_b = rows[index].contiguous(), weights.transpose(1, 2)
        return "grouped_mm", lambda: grouped_mm(mat_a, mat_b, offs)
    # Gathered as bytes: indexing e4m3 tensors is not everywhere supported.
    mat_a = rows.codes.view(torch.uint8)[index].view(FP8)
    mat_b = weights.codes.transpose(1, 2)
    scale_a = torch.ones(mat_a.shape[0], device=DEVICE)
    scale_b = torch.ones(weights.shape[0], weights.shape[1], device=DEVICE)
    return "scaled_grouped_mm", lambda: scaled_grouped_mm(
        mat_a, mat_b, scale_a, scale_b, offs, out_dtype)


def _fp8_expected(weights, reference):
    """What compare() checks against when given nothing: the peer for
    float operands (None), the float32 `reference` for fp8 ones, computed
    once (the tuner checks every candidate against it)."""
    if isinstance(weights, Fp8Weights):
        return functools.cache(reference)
    return None


def _values(rows):
    """Float rows for the references: fp8 rows dequantized."""
    return rows.values() if isinstance(rows, Fp8Rows) else rows


def _biased(h, bias, experts):
    """The peer's rows `h` plus the bias [E, N] of each row's expert
    (`experts`), or `h` itself without a bias."""
    return h if bias is None else h + bias[experts]


def gemm1_case(spec, tokens, x, w13, routing, ids, bias=None):
    """(Case, active experts) of a gemm1 bundle (w13, token rows gathered,
    the gated activation, rows out in expert-sorted padded order) on `x`
    routed by `ids` and their moe.route operands `routing`, all on the GPU.
    With fp8 operands (`x` Fp8Rows, `w13` Fp8Weights) the bundle takes their
    scales last, its output is in the spec's dtype, and compare() checks
    against the float32 reference on the dequantized operands. With the
    experts' `bias` [E, 2I] (gpt-oss's, spec "expert_biases") the bundle
    takes it after the routing operands; the spec's "swiglu" names the
    clamped SwiGLU in place of SiLU-and-mul."""
    slots, inter = spec["slots"], spec["intermediate"]
    swiglu = spec.get("swiglu")
    sorted_ids, expert_ids, num_padded = routing
    out = torch.empty(sorted_ids.numel(), inter,
                      dtype=_output_dtype(spec, x), device=DEVICE)
    x_in, w13_in, scales = _bundle_operands(x, w13)
    tensors = [x_in, w13_in, sorted_ids, expert_ids, num_padded, *scales,
               *([] if bias is None else [bias]), out]
    row, slot = valid_rows(sorted_ids, tokens * slots)
    counts = torch.bincount(ids.view(-1).long(), minlength=spec["experts"])
    offs = counts.cumsum(0).to(torch.int32)
    experts = ids.view(-1).long()[slot]
    # The peer's rows are pre-sorted by expert.
    peer_name, peer = _peer(x, w13, slot // slots, offs, out.dtype)

    def peer_epilogue():
        return gated(_biased(peer(), bias, experts), swiglu)

    def reference():  # fp32 per expert: fp8's check, or grouped_mm missing
        return gemm1_reference(_values(x), w13, ids, torch.float32, bias,
                               swiglu)

    checked = _fp8_expected(w13, reference)

    def compare(expected=None):
        if expected is None and checked:
            expected = checked()
        return relative_errors(out[row], peer_epilogue() if expected is None
                               else expected[slot])

    active = int((counts > 0).sum())
    hidden = spec["hidden"]
    flops = 2 * tokens * slots * 2 * inter * hidden
    moved = (w13.element_size() * active * 2 * inter * hidden +
             x.element_size() * tokens * hidden +
             out.element_size() * tokens * slots * inter)
    return Case("gemm1", tokens, spec, tensors, peer, peer_epilogue, compare,
                reference, flops, moved, peer_name), active


def gemm2_case(spec, tokens, rows, w2, routing, ids, weights, bias=None):
    """(Case, active experts) of a gemm2 bundle (w2 on sorted `rows`, times
    the routed `weights`, out in slot order), like gemm1_case (fp8: `rows`
    Fp8Rows, `w2` Fp8Weights; the experts' `bias` [E, H] after the routed
    weights)."""
    slots, hidden = spec["slots"], spec["hidden"]
    sorted_ids, expert_ids, num_padded = routing
    out = torch.empty(tokens, slots, hidden, dtype=_output_dtype(spec, rows),
                      device=DEVICE)
    rows_in, w2_in, scales = _bundle_operands(rows, w2)
    tensors = [rows_in, w2_in, sorted_ids, expert_ids, num_padded, weights,
               *scales, *([] if bias is None else [bias]), out]
    row, slot = valid_rows(sorted_ids, tokens * slots)
    counts = torch.bincount(ids.view(-1).long(), minlength=spec["experts"])
    offs = counts.cumsum(0).to(torch.int32)
    experts = ids.view(-1).long()[slot]
    peer_name, peer = _peer(rows, w2, row, offs, out.dtype)
    scale = weights.view(-1)[slot].unsqueeze(1)
    result = torch.empty(tokens * slots, hidden, dtype=out.dtype,
                         device=DEVICE)

    def peer_epilogue():
        h = _biased(peer(), bias, experts)
        return result.index_copy_(0, slot, (h * scale).to(out.dtype))

    def reference():  # fp32 per expert: fp8's check, or grouped_mm missing
        return gemm2_reference(_values(rows), w2, ids, sorted_ids, weights,
                               torch.float32, bias)

    checked = _fp8_expected(w2, reference)

    def compare(expected=None):
        if expected is None and checked:
            expected = checked()
        return relative_errors(out.view(tokens * slots, hidden),
                               peer_epilogue() if expected is None
                               else expected)

    active = int((counts > 0).sum())
    inter = spec["intermediate"]
    flops = 2 * tokens * slots * hidden * inter
    moved = (w2.element_size() * active * hidden * inter +
             rows.element_size() * tokens * slots * inter +
             out.element_size() * tokens * slots * hidden + 4 * tokens * slots)
    return Case("gemm2", tokens, spec, tensors, peer, peer_epilogue, compare,
                reference, flops, moved, peer_name), active


def random_weights(experts, hidden, inter, dtype=torch.bfloat16):
    """(w13 [E, 2I, H], w2 [E, H, I]) on the GPU, normal with standard
    deviation 1 / sqrt(K), drawn from torch's generator."""
    w13 = torch.empty(experts, 2 * inter, hidden, dtype=dtype,
                      device=DEVICE).normal_(std=hidden ** -0.5)
    w2 = torch.empty(experts, hidden, inter, dtype=dtype,
                     device=DEVICE).normal_(std=inter ** -0.5)
    return w13, w2


def random_fp8_weights(experts, hidden, inter, scaling):
    """(w13, w2) as Fp8Weights on the GPU: random_weights' values quantized
    per `scaling` as checkpoints are (moe_mlir.torch.quantize_fp8_weights),
    an expert at a time (DeepSeek-V3's w13 in float32 would take 30 GB)."""
    result = []
    for n, k in ((2 * inter, hidden), (hidden, inter)):
        codes = torch.empty(experts, n, k, dtype=FP8, device=DEVICE)
        scales = []
        for expert in range(experts):
            values = torch.empty(n, k, device=DEVICE).normal_(std=k ** -0.5)
            expert_codes, expert_scales = quantize_fp8_weights(values, scaling)
            codes[expert] = expert_codes
            scales.append(expert_scales)
        result.append(Fp8Weights(codes, torch.stack(scales), scaling))
    return tuple(result)


def random_inputs(spec, tokens_max):
    """(hidden states [tokens_max, H], w13, w2) of the layer of `spec` (a
    tune_space.gemms() dict), random on the GPU: the hidden states in its
    dtype, the weights too or, with its quantization, random_fp8_weights."""
    dtype = TORCH_DTYPES[spec["dtype"]]
    sizes = spec["experts"], spec["hidden"], spec["intermediate"]
    if spec["quantization"]:
        w13, w2 = random_fp8_weights(*sizes, spec["quantization"])
    else:
        w13, w2 = random_weights(*sizes, dtype)
    x_all = torch.randn(tokens_max, spec["hidden"], dtype=dtype,
                        device=DEVICE)
    return x_all, w13, w2


def model_cases(pair, tokens, x_all, w13, w2, reference, generator):
    """({part: (Case, active experts)}, padded rows) of a model's two grouped
    matmuls (`pair`: their specs by part) at `tokens` tokens: the first
    `tokens` rows of `x_all`, routed at random (experts drawn uniformly from
    `generator`), gemm2's rows normal and its routed weights uniform in
    [0.1, 1) from torch's generator. With the specs' quantization (w13 and
    w2 Fp8Weights), both grouped matmuls' rows are quantized as moe.quantize
    quantizes them (Fp8Rows)."""
    spec = pair["gemm1"]
    ids = random_ids(tokens, spec, generator)
    routing_cpu = route(reference, ids, spec)
    routing = [tensor.to(DEVICE) for tensor in routing_cpu]
    ids = ids.to(DEVICE)
    x = x_all[:tokens]
    rows = torch.randn(routing[0].numel(), spec["intermediate"],
                       dtype=x_all.dtype, device=DEVICE)
    scaling = spec.get("quantization")  # the test's specs have none
    if scaling:
        x, rows = Fp8Rows(x, scaling), Fp8Rows(rows, scaling)
    weights = torch.rand(tokens, spec["slots"], device=DEVICE) * 0.9 + 0.1
    b13, b2 = expert_biases(spec, x_all.dtype)
    cases = {"gemm1": gemm1_case(spec, tokens, x, w13, routing, ids, b13),
             "gemm2": gemm2_case(pair["gemm2"], tokens, rows, w2, routing,
                                 ids, weights, b2)}
    return cases, int(routing_cpu[2])


def expert_biases(spec, dtype):
    """(b13 [E, 2I], b2 [E, H]) in `dtype` on the GPU for a spec with
    "expert_biases" (gpt-oss's layers), else (None, None): b13 uniform
    within +-2 limit of its clamped SwiGLU, so that both clamps act, b2
    within +-1, from torch's generator."""
    if not spec.get("expert_biases"):
        return None, None
    limit = spec["swiglu"][1] if spec.get("swiglu") else 0.5
    experts, hidden = spec["experts"], spec["hidden"]
    b13 = (torch.rand(experts, 2 * spec["intermediate"], device=DEVICE) * 2
           - 1) * 2 * limit
    b2 = torch.rand(experts, hidden, device=DEVICE) * 2 - 1
    return b13.to(dtype), b2.to(dtype)
