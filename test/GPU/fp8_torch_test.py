#!/usr/bin/env python3
"""GPU test of moe_mlir.torch's FusedMoE and FusedExperts with fp8 (e4m3)
weights and their fp32 scales.

- FusedMoE of DeepSeek-V3 and Kimi-K2 with 128 x 128 block scales, reduced
  32x (H = 224: a whole block and a ragged one; I = 64) at each of
  TOKEN_COUNTS and at full size (H = 7168, I = 2048; 11 and 17 GB of e4m3
  weights) at each of FULL_TOKEN_COUNTS, and reduced DeepSeek-V3 with
  channel and tensor scales: the module's own weights (reset_parameters:
  random values quantized an expert at a time on the GPU), fresh random
  hidden states, logits and correction bias for each T. The output the
  module allocates lands where a NaN-filled block of its size was just
  freed (torch's caching allocator hands that block on), so an unwritten
  element shows; it must pass moe_mlir.testing.fp8.check against a float64
  reference on the GPU from the same quantized operands: within 5e-3 in
  norm and element by element of its magnitude once the lawful flips of
  the intermediate are decoded (where a last-bit difference of the bf16
  intermediate moves an element's e4m3 code or a group's scale: up to 1 %
  of the output in norm, a whole group's at small T, which no flat
  tolerance holds while it still sees a bug of a few %; the module's
  docstring argues it, test/GPU/fp8_check_test.py shows it fails real
  bugs). The reference routes with the plain C++ reference's gate
  (bit-identical to the GPU's), then for each expert hit: the weights
  dequantized (e4m3 value x scale, exact in float64), the hidden states
  quantized per token and 128 columns (block) or per token (tensor,
  channel) as moe.quantize defines it (scale max(amax, 1e-10) / 448 in
  float32, the quotient rounded to the nearest e4m3 value, ties to even,
  saturating), GEMM1, SiLU-and-mul, the intermediate rounded to bf16 and
  quantized the same way, GEMM2, times the routed weight, summed. Also
  printed: the raw error, how many codes and scales were ambiguous and
  decoded, the error left, the reference's distance to the same layer
  with the activations left unquantized (the bf16 layer on the
  dequantized weights: what fp8 activations cost), and its largest value
  (a fresh module gives O(1) outputs, which is checked).
- FusedExperts of reduced DeepSeek-V3 with block scales on routing from
  the caller with out-of-range and repeated ids, the same way.
- Static activation scales (activation_scheme="static", quantizations
  channel-static and tensor-static): FusedMoE and FusedExperts of reduced
  DeepSeek-V3 with channel and tensor scales, their w13_input_scale and
  w2_input_scale calibrated as checkpoints' are (the plain C++ reference's
  calibration on 16 other tokens, fp8_test's: each GEMM input's amax /
  448, so that the tested tokens now and then exceed them and saturate)
  and loaded as vLLM's checkpoints give them (w13's one per expert, which
  load_full_weights reduces to the largest, w2's a scalar); the reference
  quantizes both GEMM inputs by those scales (the quotient in float32,
  saturating to +-448, rounded to the nearest e4m3 value), by the same
  check.
- quantize_fp8_weights gives the plain C++ reference's e4m3 codes and
  scales bit for bit (ragged blocks, all three scalings); fuse_gate_up
  rebuilds a full-size expert's w13 and block scales from its gate and up
  halves and refuses I = 64 (not whole blocks).
- torch.compile(fullgraph=True) of the fp8 FusedMoE (block scales, and
  channel scales with static activation scales) equals eager bit for bit;
  torch.library.opcheck's fake-tensor and AOT-dispatch tests pass on
  moe_mlir::fused_moe with scales (its schema test multiplies the inputs,
  which torch cannot do in fp8).
- Argument errors: scales, static input scales or weights of a wrong shape
  or dtype raise ValueError or TypeError naming the tensor and what it
  must be, as do hidden states not in the activation dtype, one scale
  without the other, load_full_weights' wrong input scales, and the
  constructor's fp8 arguments (static activation scales with block scales
  or bf16 weights among them).

The GPU machine has no compiler, so the bundles come from here:
    /usr/bin/python3 test/GPU/fp8_torch_test.py --prepare   # here, with MLIR
    PYTHONPATH=build-runtime/python python3 test/GPU/fp8_torch_test.py  # there
(scripts/gpu-run.sh fp8 runs the second). Exits non-zero on any failure.
"""

import sys
import time

import moe_mlir
from moe_mlir.testing.results import module_test_main

try:
    import torch
except ImportError:  # --prepare runs where MLIR is, which has no torch.
    torch = None

# The presets' layers, written out: the GPU machine's moe_mlir has no
# compiler to read the presets from (--prepare checks they agree).
PRESETS = {
    "deepseek-v3": moe_mlir.Layer(
        7168, 2048, 256,
        moe_mlir.Router("sigmoid", 8, num_groups=8, topk_groups=4,
                        renormalize=True, routed_scaling_factor=2.5,
                        num_shared_experts=1), correction_bias=True),
    "kimi-k2": moe_mlir.Layer(
        7168, 2048, 384,
        moe_mlir.Router("sigmoid", 8, renormalize=True,
                        routed_scaling_factor=2.827, num_shared_experts=1),
        correction_bias=True),
}
TOKENS_MAX = 4096
TOKEN_COUNTS = (1, 7, 64, 1000, 4096)
FULL_TOKEN_COUNTS = (1, 64, 4096)
# (preset, reduced, quantization, token counts) of the FusedMoE cases: a
# weight scaling, or with "-static" static activation scales too.
CASES = [
    ("deepseek-v3", True, "block", TOKEN_COUNTS),
    ("kimi-k2", True, "block", TOKEN_COUNTS),
    ("deepseek-v3", True, "channel", TOKEN_COUNTS),
    ("deepseek-v3", True, "tensor", TOKEN_COUNTS),
    ("deepseek-v3", True, "channel-static", TOKEN_COUNTS),
    ("deepseek-v3", True, "tensor-static", TOKEN_COUNTS),
    ("deepseek-v3", False, "block", FULL_TOKEN_COUNTS),
    ("kimi-k2", False, "block", FULL_TOKEN_COUNTS),
]
# The quantizations of the FusedExperts cases (reduced DeepSeek-V3).
EXPERTS_QUANTIZATIONS = ("block", "channel-static", "tensor-static")
EXPERTS_TOKEN_COUNTS = (7, 300)
# The scales' parameter names, as FusedMoE documents them.
SCALE_NAMES = {"block": ("w13_weight_scale_inv", "w2_weight_scale_inv"),
               "channel": ("w13_weight_scale", "w2_weight_scale"),
               "tensor": ("w13_weight_scale", "w2_weight_scale")}
BLOCK = 128
# A fresh module's outputs are O(1): the reference's largest value lies in
# this range.
OUTPUT_RANGE = (1e-2, 1e2)


def case_layer(preset, reduced):
    layer = PRESETS[preset]
    return layer.shrunk(32) if reduced else layer


def prepare(cache_dir):
    """Compiles the bundles the modules will look for (no torch needed)."""
    for name, layer in PRESETS.items():
        assert layer == moe_mlir.Layer.preset(name), name
    bundles = {(preset, reduced, quantization, "layer")
               for preset, reduced, quantization, _ in CASES}
    bundles |= {("deepseek-v3", True, quantization, "experts")
                for quantization in EXPERTS_QUANTIZATIONS}
    for preset, reduced, quantization, part in sorted(bundles):
        path = moe_mlir.layer_bundle(case_layer(preset, reduced), "bf16",
                                     quantization=quantization, part=part,
                                     cache_dir=cache_dir,
                                     tokens_max=TOKENS_MAX)
        print(f"{preset}{' reduced' if reduced else ''} {quantization} "
              f"{part}: {path}")


def module_kwargs(quantization, args):
    """The fp8 keywords of FusedMoE and FusedExperts for a case's
    ``quantization``: block scales as vLLM asks for them
    (weight_block_size), the others by name, static activation scales by
    vLLM's activation_scheme."""
    scaling = moe_mlir.layers.weight_scaling(quantization)
    fp8 = ({"weight_block_size": (BLOCK, BLOCK)} if scaling == "block"
           else {"weight_scaling": scaling})
    if moe_mlir.layers.is_static(quantization):
        fp8["activation_scheme"] = "static"
    return {"dtype": torch.float8_e4m3fn, "device": "cuda",
            "cache_dir": args.cache, "tokens_max": TOKENS_MAX, **fp8}


def scales_of(module):
    """The module's w13 and w2 scale parameters, by their documented
    names."""
    return [getattr(module, name)
            for name in SCALE_NAMES[module.weight_scaling]]


def calibrate(results, module, reference, generator):
    """Gives a module with static activation scales those a checkpoint's
    calibration finds: the plain C++ reference's on CALIBRATION_TOKENS
    fresh tokens routed at random (fp8_test's), each GEMM input's amax /
    448. They load as vLLM's checkpoints give them: w13's one per expert
    (the calibrated one the largest, half of it the others), which
    load_full_weights reduces to its largest, and w2's a scalar."""
    from fp8_test import CALIBRATION_TOKENS
    from moe_mlir.testing.tensors import uniform

    layer = module.layer
    stored = layer.num_stored_experts
    hidden = uniform(generator, CALIBRATION_TOKENS, layer.hidden_size).to(
        torch.bfloat16).float()
    ids = torch.randint(0, stored, (CALIBRATION_TOKENS,
                                    layer.router.num_slots),
                        generator=generator, dtype=torch.int32)
    w13_scales, w2_scales = scales_of(module)
    calibrated = reference.calibrate_fp8(
        module.weight_scaling, BLOCK, "silu", "bf16", hidden, ids,
        module.w13.view(torch.uint8), w13_scales)
    per_expert = torch.full((stored,), calibrated[0].item() / 2)
    per_expert[stored // 2] = calibrated[0]
    module.load_full_weights(
        *(tensor.detach().clone()
          for tensor in (module.w13, module.w2, w13_scales, w2_scales)),
        w13_input_scale=per_expert, w2_input_scale=calibrated[1])
    loaded = torch.cat([module.w13_input_scale.detach().cpu(),
                        module.w2_input_scale.detach().cpu()])
    results.check("load_full_weights: w13_input_scale per expert reduced to "
                  "its largest, w2_input_scale a scalar",
                  torch.equal(loaded, calibrated),
                  f"calibrated {calibrated.tolist()}, loaded "
                  f"{loaded.tolist()}")


def dequantized(codes, scales, scaling):
    """An expert's e4m3 ``codes`` [N, K] times their ``scales``, exactly
    (float64)."""
    from fp8_test import expanded

    n, k = codes.shape
    return (codes.float().double()
            * expanded(scales[None].double(), scaling, BLOCK, n, k))[0]


def reference_experts(module, hidden, ids, weights):
    """(intermediate, w2_of, unquantized): moe_mlir.testing.fp8's float64
    reference of the module's experts on the GPU for routing ``ids`` and
    ``weights`` [T, S] (ids outside [0, E+X) adding nothing), on the
    module's quantized operands (its static input scales where it has
    them, else per token and, with block scales, 128 columns), what
    fp8.check takes, and the same layer with the activations left
    unquantized (the bf16 layer on the dequantized weights)."""
    from moe_mlir.testing import fp8

    scaling = module.weight_scaling
    w13_scales, w2_scales = scales_of(module)

    def w2_of(expert):
        return dequantized(module.w2[expert], w2_scales[expert], scaling)

    intermediate, unquantized = fp8.experts_reference(
        hidden, ids, weights, module.layer.num_stored_experts,
        lambda expert: dequantized(module.w13[expert], w13_scales[expert],
                                   scaling),
        w2_of, BLOCK if scaling == "block" else None,
        tuple(None if scale is None else scale.detach()
              for scale in (module.w13_input_scale, module.w2_input_scale)))
    return intermediate, w2_of, unquantized


def router_spec(router):
    """The plain C++ reference's gate parameters of ``router``."""
    return {"scoring": router.scoring, "top_k": router.top_k,
            "groups": router.num_groups, "topk_groups": router.topk_groups,
            "renormalize": router.renormalize,
            "scale": router.routed_scaling_factor,
            "shared": router.num_shared_experts}


def on_poison(module, *arguments):
    """``module(*arguments)`` with a NaN-filled tensor of the output's size
    freed just before, so that the caching allocator hands its block to the
    output; returns the output and whether it got that block."""
    from moe_mlir.testing.tensors import poisoned

    hidden = arguments[0]
    poison = poisoned(tuple(hidden.shape), module.activation_dtype)
    address = poison.data_ptr()
    del poison
    output = module(*arguments)
    return output, output.data_ptr() == address


def check_output(results, label, output, on_poisoned_block, reference):
    """The output against the fp8 ``reference`` (reference_experts') by
    moe_mlir.testing.fp8.check, with what it measured printed."""
    from moe_mlir.testing import fp8
    from moe_mlir.testing.tensors import relative_errors

    intermediate, w2_of, unquantized = reference
    result = fp8.check(output, intermediate, w2_of)
    detail = result.summary()
    if result.reference is not None:
        largest = result.reference.abs().max().item()
        detail += (f"; max |reference| {largest:.3g}, distance of the bf16 "
                   "layer on the dequantized weights "
                   f"{relative_errors(result.reference, unquantized)[1]:.2e}")
        if not OUTPUT_RANGE[0] <= largest <= OUTPUT_RANGE[1]:
            result.passed = False
            detail += f", outside {OUTPUT_RANGE}"
    if not on_poisoned_block:
        detail += " (the output missed the poisoned block)"
    results.check(label, result.passed, detail)


def test_fused_moe(results, args, reference, generator, preset, reduced,
                   quantization, token_counts):
    """FusedMoE of one case against the reference at each token count;
    returns the module (None for a full-size one, freed here)."""
    from moe_mlir.testing.tensors import uniform
    from moe_mlir.torch import FusedMoE

    layer = case_layer(preset, reduced)
    label = (f"FusedMoE {preset}{' reduced' if reduced else ''} "
             f"{quantization}")
    start = time.time()
    moe = FusedMoE(layer=layer, **module_kwargs(quantization, args))
    if moe_mlir.layers.is_static(quantization):
        calibrate(results, moe, reference, generator)
    built = time.time() - start
    for tokens in token_counts:
        hidden = uniform(generator, tokens, layer.hidden_size).to(
            torch.bfloat16).cuda()
        logits = uniform(generator, tokens, layer.num_experts,
                         scale=2.0).cuda()
        with torch.no_grad():
            moe.correction_bias.copy_(uniform(generator, layer.num_experts,
                                              scale=0.1))
        output, on_poisoned_block = on_poison(moe, hidden, logits)
        weights, ids = reference.gate(router_spec(layer.router), logits,
                                      moe.correction_bias)
        check_output(results, f"{label} T={tokens}", output,
                     on_poisoned_block, reference_experts(
                         moe, hidden, ids.cuda(), weights.cuda()))
    print(f"{label}: built in {built:.1f} s, checked in "
          f"{time.time() - start - built:.1f} s", flush=True)
    if not reduced:
        test_fuse_gate_up(results, moe)
        return None
    return moe


def test_fused_experts(results, args, reference, generator, quantization):
    """FusedExperts of reduced DeepSeek-V3 with ``quantization`` on routing
    from the caller, ids out of range and repeated included."""
    from moe_mlir.torch import FusedExperts
    from torch_test import routed_inputs, with_special_ids

    layer = case_layer("deepseek-v3", True)
    experts = FusedExperts(layer=layer, **module_kwargs(quantization, args))
    if moe_mlir.layers.is_static(quantization):
        calibrate(results, experts, reference, generator)
    for tokens in EXPERTS_TOKEN_COUNTS:
        hidden, ids, weights = routed_inputs(layer, torch.bfloat16, tokens,
                                             generator)
        # int32 ids and float32 weights, which forward does not convert:
        # no allocation of its own comes before the output's.
        ids, _ = with_special_ids(ids.int(), [-1, layer.num_stored_experts,
                                              2 ** 31 - 1])
        output, on_poisoned_block = on_poison(experts, hidden, ids, weights)
        check_output(results, f"FusedExperts deepseek-v3 reduced "
                     f"{quantization} T={tokens}", output,
                     on_poisoned_block,
                     reference_experts(experts, hidden, ids, weights))


def test_quantize(results, reference, generator):
    """quantize_fp8_weights against the plain C++ reference's quantization
    (fp8_test.quantize_weights), bit for bit."""
    from fp8_test import quantize_weights
    from moe_mlir.testing.tensors import uniform
    from moe_mlir.torch import quantize_fp8_weights

    # Ragged blocks both ways; one expert's values 1000x larger, one's all
    # zero (the 1e-10 floor of the scale).
    weights = uniform(generator, 3, 200, 300, scale=0.05)
    weights[1] *= 1000
    weights[2] = 0
    for scaling in moe_mlir.layers.WEIGHT_SCALINGS:
        codes, scales = quantize_fp8_weights(weights.cuda(), scaling)
        expected_codes, expected_scales = quantize_weights(
            reference, weights, scaling, BLOCK)
        codes_differ = int((codes.view(torch.uint8).cpu() !=
                            expected_codes).sum())
        scales_differ = int((scales.cpu() != expected_scales).sum())
        results.check(f"quantize_fp8_weights {scaling}: the C++ reference's "
                      "codes and scales", not codes_differ | scales_differ,
                      f"scales {list(scales.shape)}: {codes_differ} codes "
                      f"and {scales_differ} scales differ")


def test_fuse_gate_up(results, moe):
    """fuse_gate_up rebuilds a full-size expert's w13 and block scales from
    its gate and up halves."""
    from moe_mlir.torch import fuse_gate_up

    intermediate = moe.layer.intermediate_size
    w13, scales = moe.w13[0], moe.w13_weight_scale_inv[0]
    rows = intermediate // BLOCK
    fused, fused_scales = fuse_gate_up(
        w13[:intermediate], w13[intermediate:], scales[:rows], scales[rows:])
    results.check("fuse_gate_up: a full-size expert's w13 and block scales",
                  torch.equal(fused.view(torch.uint8), w13.view(torch.uint8))
                  and torch.equal(fused_scales, scales))


def test_compile(results, moe, generator):
    """torch.compile of the fp8 module, and opcheck of its op."""
    from moe_mlir.testing.tensors import bits, uniform

    layer = moe.layer
    hidden = uniform(generator, 7, layer.hidden_size).to(
        torch.bfloat16).cuda()
    logits = uniform(generator, 7, layer.num_experts, scale=2.0).cuda()
    results.attempt(
        f"torch.compile(fullgraph=True) of the fp8 {moe.quantization} "
        "FusedMoE equals eager",
        lambda: (torch.equal(bits(torch.compile(moe, fullgraph=True)(
            hidden, logits)), bits(moe(hidden, logits))), ""))
    arguments = (hidden, logits, moe.w13.detach(), moe.w2.detach(),
                 moe.correction_bias.detach(), moe.bundle_path,
                 *(scale.detach() for scale in scales_of(moe)))
    if moe.w13_input_scale is not None:
        # After the group's name and the expert biases.
        arguments += (None, None, None, moe.w13_input_scale.detach(),
                      moe.w2_input_scale.detach())
    # opcheck's test_schema compares inputs before and after by
    # multiplying them, which torch has no fp8 kernel for.
    results.opcheck(
        f"torch.library.opcheck(moe_mlir::fused_moe) with {moe.quantization} "
        "scales", torch.ops.moe_mlir.fused_moe.default, arguments,
        test_utils=("test_faketensor", "test_aot_dispatch_dynamic"))


def test_errors(results, moe, args, generator):
    """The fp8 argument checks, on reduced DeepSeek-V3 with block scales."""
    from moe_mlir.testing.tensors import uniform
    from moe_mlir.torch import FusedMoE, fuse_gate_up

    layer = moe.layer
    hidden = uniform(generator, 5, layer.hidden_size).to(
        torch.bfloat16).cuda()
    logits = uniform(generator, 5, layer.num_experts).cuda()

    def with_data(name, data, kind):
        results.raises_with("fp8 FusedMoE", moe, name, data, kind,
                            lambda: moe(hidden, logits))

    stored = layer.num_stored_experts
    with_data("w13_weight_scale_inv",
              torch.ones(stored, 2, 2, device="cuda"), ValueError)
    with_data("w2_weight_scale_inv",
              torch.ones(stored, 2, device="cuda"), ValueError)
    with_data("w2_weight_scale_inv", moe.w2_weight_scale_inv.data.double(),
              TypeError)
    with_data("w13", moe.w13.data.to(torch.bfloat16), TypeError)
    results.raises("fp8 FusedMoE: float32 hidden_states", TypeError,
                   lambda: moe(hidden.float(), logits))
    results.raises("moe_mlir::fused_moe: one scale without the other",
                   ValueError,
                   lambda: torch.ops.moe_mlir.fused_moe(
                       hidden, logits, moe.w13, moe.w2, moe.correction_bias,
                       moe.bundle_path, moe.w13_weight_scale_inv, None))
    results.raises("load_full_weights: input scales of a module that scales "
                   "its activations at run time", ValueError,
                   lambda: moe.load_full_weights(
                       moe.w13, moe.w2, *scales_of(moe),
                       w13_input_scale=torch.ones(1)))

    def build(**options):
        return FusedMoE(layer=layer, device="cuda", cache_dir=args.cache,
                        tokens_max=TOKENS_MAX, **options)

    fp8 = torch.float8_e4m3fn
    for case, kind, options in (
            ("no scaling", ValueError, {"dtype": fp8}),
            ("64 x 64 blocks", ValueError,
             {"dtype": fp8, "weight_block_size": (64, 64)}),
            ("unknown scaling", ValueError,
             {"dtype": fp8, "weight_scaling": "row"}),
            ("blocks and channel scaling", ValueError,
             {"dtype": fp8, "weight_block_size": (128, 128),
              "weight_scaling": "channel"}),
            ("scaling of bf16 weights", ValueError,
             {"weight_scaling": "block"}),
            ("activation_dtype of bf16 weights", ValueError,
             {"activation_dtype": torch.float16}),
            ("fp8 activations", TypeError,
             {"dtype": fp8, "weight_scaling": "block",
              "activation_dtype": fp8}),
            ("static activation scales with block scales", ValueError,
             {"dtype": fp8, "weight_block_size": (128, 128),
              "activation_scheme": "static"}),
            ("static activation scales of bf16 weights", ValueError,
             {"activation_scheme": "static"}),
            ("unknown activation_scheme", ValueError,
             {"dtype": fp8, "weight_scaling": "channel",
              "activation_scheme": "per_token"})):
        results.raises(f"FusedMoE: {case}", kind,
                       lambda options=options: build(**options))

    gate = moe.w13[0, :layer.intermediate_size]
    scale = moe.w13_weight_scale_inv[0]
    results.raises("fuse_gate_up: I not whole blocks", ValueError,
                   lambda: fuse_gate_up(gate, gate, scale, scale))
    results.raises("fuse_gate_up: per-tensor scales", ValueError,
                   lambda: fuse_gate_up(gate, gate, scale, scale,
                                        weight_scaling="tensor"))
    results.raises("fuse_gate_up: gate and up of different shapes",
                   ValueError, lambda: fuse_gate_up(gate, gate[1:], scale,
                                                    scale))


def test_static_errors(results, moe, generator):
    """The checks of static activation scales, on a FusedMoE with them."""
    from moe_mlir.testing.tensors import uniform

    layer = moe.layer
    hidden = uniform(generator, 5, layer.hidden_size).to(
        torch.bfloat16).cuda()
    logits = uniform(generator, 5, layer.num_experts).cuda()

    def with_data(name, data, kind):
        results.raises_with(f"{moe.quantization} FusedMoE", moe, name, data,
                            kind, lambda: moe(hidden, logits))

    with_data("w13_input_scale", torch.ones(2, device="cuda"), ValueError)
    with_data("w2_input_scale", torch.ones((), device="cuda"), ValueError)
    with_data("w2_input_scale",
              torch.ones(1, dtype=torch.float64, device="cuda"), TypeError)
    w13_scales, w2_scales = scales_of(moe)

    def load(**input_scales):
        return lambda: moe.load_full_weights(moe.w13, moe.w2, w13_scales,
                                             w2_scales, **input_scales)

    stored = layer.num_stored_experts
    results.raises("load_full_weights: w13_input_scale of neither one nor "
                   "one per expert", ValueError,
                   load(w13_input_scale=torch.ones(stored + 1)))
    results.raises("load_full_weights: an integer w2_input_scale", TypeError,
                   load(w2_input_scale=torch.ones(1, dtype=torch.int32)))
    results.raises("moe_mlir::fused_moe: one input scale without the other",
                   ValueError,
                   lambda: torch.ops.moe_mlir.fused_moe(
                       hidden, logits, moe.w13, moe.w2, moe.correction_bias,
                       moe.bundle_path, w13_scales, w2_scales, None, None,
                       None, moe.w13_input_scale, None))


def run(results, args):
    """The checks on the GPU."""
    from moe_mlir.testing.reference import Reference
    from moe_mlir.torch import unload_bundles

    print(f"fp8_torch_test: seed {args.seed}, torch {torch.__version__}",
          flush=True)
    torch.manual_seed(args.seed)  # reset_parameters' weights
    generator = torch.Generator().manual_seed(args.seed)
    reference = Reference(args.build)
    test_quantize(results, reference, generator)
    for preset, reduced, quantization, token_counts in CASES:
        moe = test_fused_moe(results, args, reference, generator, preset,
                             reduced, quantization, token_counts)
        if (preset, reduced, quantization) == ("deepseek-v3", True, "block"):
            test_compile(results, moe, generator)
            test_errors(results, moe, args, generator)
        if (preset, reduced, quantization) == ("deepseek-v3", True,
                                               "channel-static"):
            test_compile(results, moe, generator)
            test_static_errors(results, moe, generator)
        del moe
        unload_bundles()
        torch.cuda.empty_cache()
    for quantization in EXPERTS_QUANTIZATIONS:
        test_fused_experts(results, args, reference, generator, quantization)


def main():
    return module_test_main(
        "fp8_torch_test", __doc__, "out/gpu-bundles/fp8-torch", prepare, run,
        lambda parser: parser.add_argument("--build",
                                           default="build-runtime"))


if __name__ == "__main__":
    sys.exit(main())
