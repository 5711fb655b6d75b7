"""FP8 experts on the GPU against a float64 reference on the same quantized
operands: what test/GPU/fp8_test.py, fp8_torch_test.py and tp_test.py
share.

The reference (experts_reference) quantizes the hidden rows as moe.quantize
defines it, multiplies them by the dequantized w13 (exact in float64: what
the GPU's first GEMM reads, bit for bit), applies the activation and keeps
the result, the intermediate, before its rounding to bf16. The GPU's
intermediate is not bit for bit the reference's: its fp32 sums differ from
the exact ones (their order, the tensor cores' fp8 accumulation, exp and
erf), so an element near a bf16 rounding boundary can round to the
neighbouring bf16 value. Where that moves the element's e4m3 code (one
step, 6 to 12 % of it) or, with dynamic scales, its group's amax (every
element of the group then scales by one bf16 ulp, 0.4 to 0.8 %, and some
change code), the output moves by that step times a column of w2. Such
flips are many: for the typical element the GPU's error is a sizeable part
of a bf16 ulp, so a few % of all elements can flip, hundreds a token in
DeepSeek-V3 at full size, and they move the output by up to 1 % in norm.
No bound on their sum is useful: it grows with their count, their effect
only with its square root, so it would hide real bugs of several %.

So check() does not bound them, it finds them. Which outcomes the GPU may
lawfully reach is known per element (Outcomes): its fp32 value lies within
`error` of the exact one (INTERMEDIATE_ERROR times the norm of the terms
the first GEMM summed, through the activation's slope), so its bf16 value
lies between bf16(exact - error) and bf16(exact + error), its group's amax
between the amaxes those bounds allow, and its e4m3 code, under the
group's scale, between the codes of the bounds. Each output row is a known
sum of columns of w2 times the intermediate, so the output says which
outcome each element took: check() decodes it expert by expert (an
expert's rows, one a token, at once; a token's rows of other experts after
them, Gauss-Seidel, so that no two explain the same error twice), taking
for each group the scale and for each element the lawful value nearest the
least-squares estimate from the residual where that lowers the residual
by more than noise would, until nothing changes; then it recomputes the
reference on the decoded intermediate. What remains must be the output's
own roundings and sums: each element within TOLERANCE of its magnitude
(see check), and the whole within TOLERANCE of the reference in norm. A
bug cannot hide in the decoding: it only ever moves an element to a value
moe.quantize could have made of it, each such move reduces the residual,
and any other error stays. test/GPU/fp8_check_test.py shows a simulated
device passing and buggy ones failing.
"""

import dataclasses
import math

import torch
import torch.nn.functional as F

E4M3_MAX = 448.0
# How far the GPU's fp32 first-GEMM sums may lie from the exact ones,
# relative to the 2-norm of the summed terms (the scale a sum's rounding
# errors grow with): 2^-9. The tensor cores keep about 14 bits while they
# accumulate fp8 products (DeepSeek-V3's report); a simulated device
# (test/GPU/fp8_check_test.py) whose sums err by an rms of 2^-12 of that
# norm makes the raw errors measured on the H100 at fp8_test's sizes (norm
# 2e-3 to 8e-3). This allows 8 times that rms, and the check holds with
# twice it; a wider margin makes more elements ambiguous, and the
# decoding then takes more of a bug that looks like flips for flips.
INTERMEDIATE_ERROR = 2.0 ** -9
# The fp32 evaluation of the activation and the product (exp and erf of a
# few ulps), relative to the intermediate.
EVALUATION_ERROR = 2.0 ** -20
# What the decoded output may differ by: each bf16 rounding of a stored
# value (the slot rows, the output; a rank's partial sums) is at most half
# an ulp, 2^-8 = 3.9e-3 of the value, and the second GEMM's sums err by
# far less; 5e-3 leaves room for those and for flips too small to decode.
TOLERANCE = 5e-3
# The rms of the output's own rounding errors, relative to the rms of the
# values rounded (each slot row and the output): a rounding to bf16 errs
# uniformly within half an ulp, 0.42 x 2^-8 of a value's binade.
NOISE = 2.0 ** -9
# A change of the intermediate is decoded only if it lowers the residual's
# energy by more than SIGNIFICANCE^2 noise variances: noise alone does so
# for one candidate in 700 (3 sigma), and a flip too small to pass stays
# in the residual, a few noise rms at most.
SIGNIFICANCE = 3.0
# Gauss-Seidel sweeps over the slot rows at most (each lowers the residual
# and penalties; three or four settle the decoding).
SWEEPS = 8


def e4m3(values):
    """The e4m3 value of each of float ``values`` as Hopper's
    cvt.rn.satfinite rounds it (the plain C++ reference's toE4M3): the
    nearest, ties to even, beyond +-448 saturated, in the same dtype. By
    arithmetic: the magnitude, clamped to 448, over its binade's step (2^-3
    of the binade, 2^-9 for the subnormals below 2^-6) is rounded half to
    even, exactly."""
    magnitude = values.abs().clamp(max=E4M3_MAX)
    # magnitude = m 2^exponent, m in [0.5, 1): its binade is 2^(exponent-1).
    _, exponent = torch.frexp(magnitude)
    step = torch.ldexp(torch.ones_like(magnitude),
                       (exponent - 1).clamp(min=-6) - 3)
    return (torch.round(magnitude / step) * step).copysign(values)


def bf16(values):
    """``values`` rounded to float32, then to bf16 (nearest, ties to even),
    as float32: what the GPU stores of an fp32 value."""
    return values.float().to(torch.bfloat16).float()


def _grouped(values, group):
    """``values`` [rows, columns] as [rows, groups, group]: groups of
    ``group`` columns (None: the whole row), the last zero-padded, which
    leaves its amax as it is."""
    columns = values.shape[1]
    group = group or columns
    return F.pad(values, (0, -columns % group)).unflatten(1, (-1, group))


def _ungrouped(grouped, columns):
    return grouped.flatten(1)[:, :columns]


def _amax_scale(amax):
    """moe.quantize's dynamic scale of a group of float32 ``amax``:
    max(amax, 1e-10) / 448 in float32, a true division (torch multiplies a
    CUDA tensor by the inverse of a Python number)."""
    amax = amax.clamp(min=1e-10)
    return amax / torch.full_like(amax, E4M3_MAX)


def _dequantized(grouped, scales):
    """code x scale in float64 of float32 ``grouped`` values, code =
    e4m3(value / scale) with the quotient in float32."""
    return e4m3(grouped / scales).double() * scales.double()


def quantized(values, group=None, scale=None):
    """What moe.quantize makes of the rows of float32 ``values``, as
    float64: by the static ``scale`` (a float32 tensor of one element) where
    given, else per row and group of ``group`` columns (None: per row)."""
    grouped = _grouped(values.float(), group)
    scales = (scale.float().reshape(1, 1, 1).to(grouped.device)
              if scale is not None
              else _amax_scale(grouped.abs().amax(dim=2, keepdim=True)))
    return _ungrouped(_dequantized(grouped, scales), values.shape[1])


def _silu_slope(gate):
    sigmoid = torch.sigmoid(gate)
    return sigmoid * (1 + gate * (1 - sigmoid))


def _gelu_slope(gate):
    return (0.5 * (1 + torch.erf(gate / math.sqrt(2)))
            + gate * torch.exp(-gate.square() / 2) / math.sqrt(2 * math.pi))


# The activations and their slopes; gelu is erf's, as lib/Reference's.
ACTIVATIONS = {"silu": (F.silu, _silu_slope), "gelu": (F.gelu, _gelu_slope)}


@dataclasses.dataclass
class Intermediate:
    """The second GEMM's input as the reference knows it, one row per token
    and expert it is routed to: its token, expert and routed weight, the exact
    activation (float64, before its rounding to bf16), the bound on how far
    the GPU's fp32 value may lie from it, and how moe.quantize scales it (a
    ``group`` of columns, None for a row, or the static float32 ``scale``)."""

    tokens: torch.Tensor
    experts: torch.Tensor
    weights: torch.Tensor
    exact: torch.Tensor
    error: torch.Tensor
    group: int = None
    scale: torch.Tensor = None


def _activated(x, w13, activation):
    """(exact, error) [n, I] of the quantized rows ``x`` [n, H] on an
    expert's ``w13`` [2I, H] (float64): the activation of the first GEMM's
    sums and how far the GPU's fp32 value of it may lie from it, each sum
    erring by INTERMEDIATE_ERROR times the norm of its terms (the scale its
    rounding errors have), through the activation's slope, and the
    activation's own evaluation by EVALUATION_ERROR."""
    act, slope = ACTIVATIONS[activation]
    size = w13.shape[0] // 2
    sums = x @ w13.T
    norms = (x.square() @ w13.square().T).sqrt()
    gate, up = sums[:, :size], sums[:, size:]
    exact = act(gate) * up
    return exact, (INTERMEDIATE_ERROR
                   * (slope(gate).abs() * up.abs() * norms[:, :size]
                      + act(gate).abs() * norms[:, size:])
                   + EVALUATION_ERROR * exact.abs())


def experts_reference(hidden, ids, weights, num_experts, w13_of, w2_of,
                      group=None, input_scales=(None, None),
                      activation="silu"):
    """(intermediate, unquantized): moe.fused_experts with fp8 weights on
    routing ``ids`` and ``weights`` [T, S] (ids outside [0, num_experts)
    adding nothing), in float64 on ``hidden``'s device, each expert's
    dequantized weights given as float64 [N, K] by ``w13_of`` and ``w2_of``
    (one at a time, so that no float64 copy of all is held). The hidden rows
    are quantized as moe.quantize does (``group`` columns, or the static
    w13 input scale of ``input_scales``); ``intermediate`` is what check()
    takes, the intermediate quantized the same way (or by the w2 input
    scale). ``unquantized`` [T, H]: the same layer with neither input
    quantized, its intermediate and slot rows rounded to bf16 (the bf16
    layer on the dequantized weights: what fp8 activations cost)."""
    x = quantized(hidden, group, input_scales[0])
    ids, weights = ids.long(), weights.double()
    token, slot = ((ids >= 0) & (ids < num_experts)).nonzero(as_tuple=True)
    # A token routed twice to one expert has two identical slot rows, which
    # the GPU computes alike: one row of their summed weight.
    pairs, merged = torch.unique(token * num_experts + ids[token, slot],
                                 return_inverse=True)
    routed = torch.zeros(len(pairs), dtype=torch.float64,
                         device=hidden.device).index_add_(
                             0, merged, weights[token, slot])
    token, expert = pairs // num_experts, pairs % num_experts
    unquantized = torch.zeros(hidden.shape, dtype=torch.float64,
                              device=hidden.device)
    act = ACTIVATIONS[activation][0]
    exact = error = None
    for index in _expert_rows(expert):
        w13 = w13_of(int(expert[index[0]]))
        rows_exact, rows_error = _activated(x[token[index]], w13, activation)
        if exact is None:
            exact, error = (torch.empty(len(token), rows_exact.shape[1],
                                        dtype=torch.float64,
                                        device=hidden.device)
                            for _ in range(2))
        exact[index], error[index] = rows_exact, rows_error
        sums = hidden[token[index]].double() @ w13.T
        size = w13.shape[0] // 2
        activated = bf16(act(sums[:, :size]) * sums[:, size:]).double()
        slot_rows = ((activated @ w2_of(int(expert[index[0]])).T)
                     * routed[index, None])
        unquantized.index_add_(0, token[index], bf16(slot_rows).double())
    if exact is None:  # no slot in range
        exact = error = torch.zeros(0, 1, dtype=torch.float64,
                                    device=hidden.device)
    return (Intermediate(token, expert, routed, exact, error, group,
                         input_scales[1]), unquantized)


def _expert_rows(experts):
    """The indices of the rows of each expert in ``experts`` [R]."""
    order = torch.sort(experts, stable=True).indices
    counts = torch.unique_consecutive(experts[order], return_counts=True)[1]
    return order.split(counts.tolist())


class Outcomes:
    """What moe.quantize can make of each element of an Intermediate when
    the GPU's fp32 value before its rounding to bf16 lies within ``scale``
    times the intermediate's error of the exact one: each element's bf16
    value lies in [low, high] (rounding is monotonic), its group's amax, with
    dynamic scales, between max |least value| and max |largest value| (each
    bf16 value there gives one of ``scales``), and its e4m3 code between
    those of low and high under the group's scale. Values grouped [rows,
    groups, group], float32; the reference's own outcome is ``reference``
    under ``scales[0]``."""

    def __init__(self, intermediate, scale=1.0):
        self.columns = intermediate.exact.shape[1]
        self.group = intermediate.group or self.columns
        error = intermediate.error * scale
        self.value, self.low, self.high = (
            _grouped(bf16(bound), self.group)
            for bound in (intermediate.exact, intermediate.exact - error,
                          intermediate.exact + error))
        if intermediate.scale is not None:
            self.scales = [intermediate.scale.float().reshape(1, 1, 1).to(
                self.value.device).expand(*self.value.shape[:2], 1)]
        else:
            least = torch.where(self.low * self.high > 0,
                                torch.minimum(self.low.abs(), self.high.abs()),
                                torch.zeros_like(self.low))
            most = torch.maximum(self.low.abs(), self.high.abs())
            bits = [amax.amax(dim=2, keepdim=True).to(torch.bfloat16).view(
                torch.int16) for amax in (least, most)]
            count = (int((bits[1] - bits[0]).max()) + 1 if bits[0].numel()
                     else 1)
            self.scales = [_amax_scale(self.value.abs().amax(dim=2,
                                                             keepdim=True))]
            self.scales += [_amax_scale(torch.minimum(bits[0] + k, bits[1])
                                        .view(torch.bfloat16).float())
                            for k in range(count)]
        self.reference = _ungrouped(_dequantized(self.value, self.scales[0]),
                                    self.columns)

    def codes(self, rows, scales):
        """The least and largest e4m3 values (float32 [n, groups, group])
        of the elements of ``rows`` under their groups' ``scales``."""
        return e4m3(self.low[rows] / scales), e4m3(self.high[rows] / scales)

    def nearest(self, rows, estimate, weight, penalty):
        """(values, scales): the lawful values (float64 [n, columns]) and
        group scales (float32 [n, groups, 1]) of ``rows`` [n] that minimize
        the residual's energy, sum of ``weight`` x (``estimate`` - value)^2
        (``weight`` each element's squared column of the output), plus
        ``penalty`` [n, 1] for each element whose value differs from the
        reference's bf16 value under its group's scale and for each group
        whose scale differs from the reference's."""
        estimate = _grouped(estimate, self.group)
        weight = _grouped(weight, self.group)
        penalty = penalty[:, :, None]
        value = self.value[rows]
        best = best_scales = best_cost = None
        for scales in self.scales:
            scales = scales[rows]
            lowest, highest = self.codes(rows, scales)
            default = _dequantized(value, scales)
            moved = torch.maximum(torch.minimum(
                e4m3((estimate / scales.double()).float()), highest),
                lowest).double() * scales.double()
            costs = [weight * (estimate - candidate).square()
                     for candidate in (default, moved)]
            costs[1] = costs[1] + penalty * (moved != default)
            take = costs[1] < costs[0]
            values = torch.where(take, moved, default)
            cost = (torch.minimum(*costs).sum(dim=2, keepdim=True)
                    + penalty * (scales != self.scales[0][rows]))
            if best is None:
                best, best_scales, best_cost = values, scales, cost
                continue
            better = cost < best_cost
            best = torch.where(better, values, best)
            best_scales = torch.where(better, scales, best_scales)
            best_cost = torch.where(better, cost, best_cost)
        return _ungrouped(best, self.columns), best_scales

    def flipped(self, rows, values, scales):
        """Whether each element of ``rows`` [n] differs in ``values`` [n,
        columns] from what its reference bf16 value gives under its group's
        ``scales`` (grouped, [n, groups, group]): its code flipped."""
        return (_grouped(values, self.group)
                != _dequantized(self.value[rows], scales))

    def changes(self, rows, values, scales):
        """How many codes of ``rows`` flipped and group scales differ from
        the reference's: what nearest() penalizes, per row."""
        return (self.flipped(rows, values, scales).sum(dim=(1, 2))
                + (scales != self.scales[0][rows]).sum(dim=(1, 2)))

    def ambiguous(self):
        """(codes, groups): how many elements have more than one lawful
        code under the reference's scale, and how many groups more than one
        lawful scale."""
        rows = torch.arange(self.low.shape[0], device=self.low.device)
        lowest, highest = self.codes(rows, self.scales[0])
        groups = torch.zeros_like(self.scales[0], dtype=torch.bool)
        for scales in self.scales[1:]:
            groups |= scales != self.scales[0]
        return int((lowest != highest).sum()), int(groups.sum())

    def admits(self, values, scales):
        """Whether each element's ``values`` (float64 [rows, columns]) under
        its group's ``scales`` is among the lawful outcomes, per element."""
        rows = torch.arange(self.low.shape[0], device=self.low.device)
        lowest, highest = self.codes(rows, scales)
        codes = _grouped(values, self.group) / scales.double()
        lawful = (codes >= lowest.double()) & (codes <= highest.double())
        if len(self.scales) > 1:  # the scale between the extreme amaxes'
            lawful &= ((scales >= torch.stack(self.scales).amin(dim=0))
                       & (scales <= torch.stack(self.scales).amax(dim=0)))
        return _ungrouped(lawful, self.columns)


@dataclasses.dataclass
class Check:
    """check()'s verdict and what it measured: the raw error (against the
    reference) and the error left after decoding, each as max |error| /
    max |reference| and ||error|| / ||reference||; how many codes and
    group scales were ambiguous and how many the decoding changed (a code
    counts where it differs from what its reference bf16 value gives under
    its group's decoded scale), and how many changed values lie beyond half
    the margin (were INTERMEDIATE_ERROR half as large, they would not be
    lawful: the margin's use); the largest ratio of an element's error to
    its allowance; the reference's output (float64 [T, H], its slot rows
    and sum unrounded)."""

    passed: bool
    failure: str
    reference: torch.Tensor = None
    raw: tuple = (math.nan, math.nan)
    explained: tuple = (math.nan, math.nan)
    allowance_used: float = math.nan
    ambiguous: tuple = (0, 0)
    decoded: tuple = (0, 0)
    beyond_half_margin: int = 0
    sweeps: int = 0

    def summary(self):
        if not self.sweeps:
            return self.failure
        return (f"raw max {self.raw[0]:.2e} norm {self.raw[1]:.2e}; "
                f"ambiguous {self.ambiguous[0]} codes, {self.ambiguous[1]} "
                f"scales; decoded {self.decoded[0]} codes, "
                f"{self.decoded[1]} scales ({self.beyond_half_margin} "
                f"values beyond half the margin, {self.sweeps} sweeps); "
                f"left max {self.explained[0]:.2e} norm "
                f"{self.explained[1]:.2e}, allowance used "
                f"{self.allowance_used:.2f}"
                + (f"; FAIL {self.failure}" if self.failure else ""))


def _relative(error, reference):
    return (error.abs().max().item() / max(reference.abs().max().item(),
                                           1e-30),
            error.norm().item() / max(reference.norm().item(), 1e-30))


def _slot_rows(values, rows, intermediate, w2):
    """The slot rows [n, H] of ``rows``: their ``values`` [n, I] times w2
    and the routed weight, in float64."""
    return (values @ w2.T) * intermediate.weights[rows, None]


def _decode(actual, intermediate, outcomes, w2_of):
    """(values, scales, sweeps, experts): the lawful intermediate (float64
    [R, I]) and group scales that explain ``actual`` [T, H] best, the
    sweeps taken, and each expert with its rows (a token's at most one, so
    that each expert's rows are decoded at once)."""
    values = outcomes.reference.clone()
    scales = outcomes.scales[0].clone()
    explained = torch.zeros(actual.shape, dtype=torch.float64,
                            device=actual.device)
    experts = [(int(intermediate.experts[rows[0]]), rows)
               for rows in _expert_rows(intermediate.experts)]
    squares = torch.zeros_like(explained)
    for expert, rows in experts:
        slot_rows = _slot_rows(values[rows], rows, intermediate,
                               w2_of(expert))
        explained.index_add_(0, intermediate.tokens[rows], slot_rows)
        squares.index_add_(0, intermediate.tokens[rows], slot_rows.square())
    # Each token's noise variance per output element, times SIGNIFICANCE^2.
    penalty = (SIGNIFICANCE * NOISE) ** 2 * (
        squares + explained.square()).mean(dim=1, keepdim=True)
    for sweep in range(1, SWEEPS + 1):
        changed = False
        for expert, rows in experts:
            w2 = w2_of(expert)
            norms = w2.square().sum(dim=0)
            tokens = intermediate.tokens[rows]
            weights = intermediate.weights[rows, None]
            # Least squares, column by column: the residual's projection on
            # each element's column of the output, w2[:, j] x weight.
            residual = actual[tokens] - explained[tokens]
            denominator = weights * norms
            step = torch.where(denominator != 0,
                               (residual @ w2) / denominator,
                               torch.zeros_like(denominator))
            new, new_scales = outcomes.nearest(
                rows, values[rows] + step, weights * denominator,
                penalty[tokens])
            # nearest() weighs each element's column alone: a row takes
            # its new values only where they lower the residual's energy
            # and penalties, so that the decoding descends and ends.
            moved = _slot_rows(new - values[rows], rows, intermediate, w2)
            better = ((residual - moved).square().sum(dim=1)
                      + penalty[tokens, 0] * outcomes.changes(rows, new,
                                                              new_scales)
                      < residual.square().sum(dim=1)
                      + penalty[tokens, 0] * outcomes.changes(
                          rows, values[rows], scales[rows]))
            if not better.any():
                continue
            changed = True
            explained.index_add_(0, tokens[better], moved[better])
            values[rows[better]] = new[better]
            scales[rows[better]] = new_scales[better]
        if not changed:
            break
    return values, scales, sweep, experts


def check(actual, intermediate, w2_of, shards=1):
    """Check of a GPU's output ``actual`` [T, H] (any float dtype) of fp8
    experts against the reference on the same quantized operands
    (experts_reference's ``intermediate``; ``w2_of`` each expert's
    dequantized w2, float64 [H, I]). Passes when the output is finite and,
    after decoding the intermediate (see the module's docstring), its
    residual r is within TOLERANCE of the reference y on the decoded
    intermediate in norm (||r|| <= TOLERANCE ||y||) and element by element:
    |r| <= TOLERANCE (|y| + sum of |slot row| + |terms|), the sum over the
    token's slot rows (each rounded to bf16 alone, and they may cancel) and
    |terms| the 2-norm of the second GEMMs' products (the scale their
    accumulation errs with). ``shards``: the ranks of a tensor-parallel
    layer, each summing its own equal share of the intermediate's columns
    and rounding its slot rows and partial output; their magnitudes join the
    sum. Each rank quantizes its own columns: dynamic scales' groups must
    lie within a share (for per-token scales, a reference of group
    I / shards)."""
    actual = actual.double()
    if not torch.isfinite(actual).all():
        return Check(False, "output not finite (unwritten rows?)")
    outcomes = Outcomes(intermediate)
    if (shards > 1 and intermediate.scale is None
            and (intermediate.exact.shape[1] // shards) % outcomes.group):
        raise ValueError(f"groups of {outcomes.group} columns straddle "
                         f"{shards} ranks' shares")
    values, scales, sweeps, experts = _decode(actual, intermediate, outcomes,
                                              w2_of)
    reference, explained, magnitude = _outputs(
        actual.shape, intermediate, outcomes.reference, values, experts,
        w2_of, shards)
    residual = actual - explained
    allowance = TOLERANCE * magnitude
    used = torch.where(allowance > 0, residual.abs() / allowance,
                       torch.where(residual != 0, math.inf, 0.0)).max().item()
    left = _relative(residual, explained)
    failures = []
    if used > 1:
        failures.append(f"an element's error is {used:.2f} of its allowance")
    if left[1] > TOLERANCE:
        failures.append(f"norm {left[1]:.2e} > {TOLERANCE}")
    everything = torch.arange(len(values), device=values.device)
    beyond_half = ((values != outcomes.reference)
                   & ~Outcomes(intermediate, 0.5).admits(values, scales))
    return Check(
        not failures, ", ".join(failures), reference,
        _relative(actual - reference, reference), left, used,
        outcomes.ambiguous(),
        (int(outcomes.flipped(everything, values, scales).sum()),
         int((scales != outcomes.scales[0]).sum())),
        int(beyond_half.sum()), sweeps)


def _outputs(shape, intermediate, reference_values, values, experts, w2_of,
             shards):
    """(reference, explained, magnitude), float64 of ``shape`` [T, H]: the
    outputs of the reference's intermediate and of the decoded ``values``
    (slot rows and sums unrounded), and the magnitude each element's
    roundings and sums scale with: |explained| + the sum of the |slot rows|
    (of each of ``shards`` ranks' shares of the columns, and their |partial
    outputs|) + the 2-norm of the second GEMM's products."""
    outputs = torch.zeros(3 + shards, *shape, dtype=torch.float64,
                          device=values.device)
    reference, magnitude, squares, partials = (
        outputs[0], outputs[1], outputs[2], outputs[3:])
    columns = values.shape[1] // shards
    for expert, rows in experts:
        w2 = w2_of(expert)
        tokens = intermediate.tokens[rows]
        reference.index_add_(0, tokens, _slot_rows(
            reference_values[rows], rows, intermediate, w2))
        for shard, partial in enumerate(partials):
            part = slice(shard * columns, (shard + 1) * columns)
            slot_rows = _slot_rows(values[rows, part], rows, intermediate,
                                   w2[:, part])
            partial.index_add_(0, tokens, slot_rows)
            magnitude.index_add_(0, tokens, slot_rows.abs())
        squares.index_add_(0, tokens, (
            values[rows] * intermediate.weights[rows, None]).square()
            @ w2.square().T)
    explained = partials.sum(dim=0)
    if shards > 1:
        magnitude += partials.abs().sum(dim=0)
    return reference, explained, magnitude + explained.abs() + squares.sqrt()
