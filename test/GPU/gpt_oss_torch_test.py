#!/usr/bin/env python3
"""GPU test of gpt-oss through moe_mlir.torch and moe_mlir.transformers:
expert biases, the clamped SwiGLU and MXFP4 weights.

- quantize_mxfp4_weights against a brute-force float64 search over the 16
  e2m1 codes (ties to the even code), read back through
  moe_mlir.testing.mxfp4.decode: every code and scale equal, on random
  values, values on every midpoint between e2m1 magnitudes, a zero block
  and blocks at both ends of e8m0's range.
- FusedMoE of gpt-oss-20b and gpt-oss-120b at full size (H = I = 2880, 32
  and 128 experts), bf16 and MXFP4 weights, at each of TOKEN_COUNTS: the
  module's own weights (reset_parameters; MXFP4 ones quantized as gpt-oss's
  checkpoints are), w13_bias uniform in +-2 limit so that both clamps act,
  fresh random hidden states and logits for each T. The output lands where
  a NaN-filled block of its size was just freed, so an unwritten element
  shows; it must be finite and within ||error|| / ||reference|| <=
  NORM_TOLERANCE and max |error| / max |reference| <= MAX_TOLERANCE of a
  float64 reference on the GPU, expert by expert on the (decoded)
  weights: gpt-oss's router (top-4 of the logits, softmax over them), each
  expert's projections with their biases, the clamped SwiGLU, the
  intermediate and each slot's row rounded to bf16 as the layer stores
  them. Tokens whose 4th and 5th logits lie within TIE_MARGIN are left out
  (their routing may break the tie either way); the bf16 layer's
  tolerances, since the kernels decode MXFP4 to bf16 exactly.
- gpt_oss_mxfp4_weights: the 20b module's MXFP4 weights in gpt-oss's
  checkpoint layout (interleaved gate and up rows, [E, N, K/32, 16]
  blocks) come back bit for bit, and a module loaded from them computes
  the same output bit for bit.
- torch.compile(fullgraph=True) of the MXFP4 FusedMoE equals eager bit
  for bit; torch.library.opcheck's fake-tensor and AOT-dispatch tests pass
  on moe_mlir::fused_moe with MXFP4 weights and biases.
- Argument errors: biases and MXFP4 weights or scales of a wrong shape or
  dtype, one bias without the other, the constructor's MXFP4 arguments.
- transformers' GptOssMLP from a GptOssConfig (SMALL_CONFIG, and the 20b
  and 120b sizes) with random bf16 weights: fused_moe_from_hf against the block's own
  forward (eager experts), bf16 throughout, within BLOCK_TOLERANCE over the
  tokens without a near-tie (bf16 logits tie often), the routing weights
  the block returns bit for bit; the experts interface ("moe_mlir")
  against the block's eager experts on the model's routing; and MXFP4:
  random weights quantized in gpt-oss's checkpoint layout, their decoded
  values put into the GptOssMLP's bf16 parameters, the codes given to a
  FusedMoE through gpt_oss_mxfp4_weights, against the block.

The GPU machine has no compiler, so the bundles come from here:
    /usr/bin/python3 test/GPU/gpt_oss_torch_test.py --prepare   # here
    PYTHONPATH=build-runtime/python python3 test/GPU/gpt_oss_torch_test.py
(scripts/make-gpu-bundles.sh runs the first, scripts/gpu-run.sh tests the
second). Exits non-zero on any failure.
"""

import sys
import time
import warnings

import moe_mlir
import moe_mlir.transformers as hf
from moe_mlir.testing.results import module_test_main

try:
    import torch
except ImportError:  # --prepare runs where MLIR is, which has no torch.
    torch = None

# The presets' layers, written out: the GPU machine's moe_mlir has no
# compiler to read the presets from (--prepare checks they agree).
PRESETS = {
    name: moe_mlir.Layer(2880, 2880, experts,
                         moe_mlir.Router("softmax", 4, renormalize=True),
                         swiglu=(1.702, 7.0), expert_biases=True)
    for name, experts in (("gpt-oss-20b", 32), ("gpt-oss-120b", 128))}
TOKENS_MAX = 4096
TOKEN_COUNTS = (1, 7, 64, 1000, 4096)
QUANTIZATIONS = (None, "mxfp4")
# The bf16 layers' tolerances (test/GPU/mxfp4_test.py).
NORM_TOLERANCE, MAX_TOLERANCE = 1e-2, 2e-2
# A block's output against transformers' own, bf16 both (as
# transformers_test.py).
BLOCK_TOLERANCE = 2e-2
TIE_MARGIN = 1e-5
# A GptOssConfig's MoE keys: small, and gpt-oss-20b's and -120b's sizes.
SMALL_CONFIG = {"model_type": "gpt_oss", "hidden_size": 256,
                "intermediate_size": 128, "num_local_experts": 16,
                "num_experts_per_tok": 4, "swiglu_limit": 7.0,
                "hidden_act": "silu"}
CONFIGS = {"small": SMALL_CONFIG,
           "20b": dict(SMALL_CONFIG, hidden_size=2880,
                       intermediate_size=2880, num_local_experts=32),
           "120b": dict(SMALL_CONFIG, hidden_size=2880,
                        intermediate_size=2880, num_local_experts=128)}
TRANSFORMERS_TOKENS = 300
E2M1 = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)


def prepare(cache_dir):
    """Compiles the bundles the modules will look for (no torch needed)."""
    # gpt-oss's GEMMs have no tuned configs yet; the heuristic's serve.
    warnings.simplefilter("ignore", UserWarning)
    for name, layer in PRESETS.items():
        assert layer == moe_mlir.Layer.preset(name), name
        for quantization in QUANTIZATIONS:
            print(moe_mlir.layer_bundle(layer, quantization=quantization,
                                        cache_dir=cache_dir,
                                        tokens_max=TOKENS_MAX))
    for config in CONFIGS.values():
        layer = hf.layer_from_config(config)
        for quantization in QUANTIZATIONS:
            print(moe_mlir.layer_bundle(layer, quantization=quantization,
                                        cache_dir=cache_dir,
                                        tokens_max=TOKENS_MAX))
    print(*hf.prepare_bundles([SMALL_CONFIG], cache_dir=cache_dir,
                              tokens_max=TOKENS_MAX, blocks=False))


def bytes_of(tensor):
    return tensor.view(torch.uint8)


def decoded(module, name, expert):
    """Expert ``expert``'s weights ``name`` ("w13", "w2") of ``module`` in
    float64: their values, MXFP4 codes decoded exactly."""
    from moe_mlir.testing.mxfp4 import decode

    weights = getattr(module, name)[expert:expert + 1]
    if module.weight_scaling is None:
        return weights[0].double()
    scales = getattr(module, f"{name}_weight_scale")[expert:expert + 1]
    return decode(bytes_of(weights), bytes_of(scales))[0]


def reference(module, hidden, logits):
    """(output [T, H] float64, tokens without a near-tie): gpt-oss's layer
    on the module's weights, expert by expert on the GPU."""
    layer = module.layer
    alpha, limit = layer.swiglu
    top_k, inter = layer.router.top_k, layer.intermediate_size
    ordered = logits.double().sort(dim=1, descending=True).values
    clear = ordered[:, top_k - 1] - ordered[:, top_k] > TIE_MARGIN
    top = logits.double().topk(top_k, dim=1)
    weights = torch.softmax(top.values, dim=1)
    x = hidden.double()
    output = torch.zeros_like(x)
    for expert in top.indices.unique().tolist():
        token, slot = (top.indices == expert).nonzero(as_tuple=True)
        h = (x[token] @ decoded(module, "w13", expert).T
             + module.w13_bias[expert].double())
        gate = h[:, :inter].clamp(max=limit)
        up = h[:, inter:].clamp(-limit, limit)
        act = ((up + 1) * gate * torch.sigmoid(alpha * gate)).to(
            torch.bfloat16).double()
        rows = ((act @ decoded(module, "w2", expert).T
                 + module.w2_bias[expert].double())
                * weights[token, slot, None])
        output.index_add_(0, token, rows.to(torch.bfloat16).double())
    return output, clear


def on_poison(module, *arguments):
    """``module(*arguments)`` with a NaN-filled tensor of the output's size
    freed just before, so that the caching allocator hands its block to the
    output; returns the output and whether it got that block."""
    from moe_mlir.testing.tensors import poisoned

    poison = poisoned(tuple(arguments[0].shape), torch.bfloat16)
    address = poison.data_ptr()
    del poison
    output = module(*arguments)
    return output, output.data_ptr() == address


def check_layer(results, label, output, on_poisoned_block, expected, clear):
    from moe_mlir.testing.tensors import relative_errors

    detail = (f"{int((~clear).sum())} near-tie token(s) left out"
              + ("" if on_poisoned_block
                 else "; the output missed the poisoned block"))
    if not torch.isfinite(output.float()).all():
        results.check(label, False, f"output not finite; {detail}")
        return
    error, norm = relative_errors(output[clear], expected[clear])
    results.check(label, error <= MAX_TOLERANCE and norm <= NORM_TOLERANCE,
                  f"error max {error:.2e} norm {norm:.2e}; {detail}")


def build(args, layer, quantization):
    from moe_mlir.torch import FusedMoE

    dtype = torch.float4_e2m1fn_x2 if quantization else torch.bfloat16
    moe = FusedMoE(layer=layer, dtype=dtype, device="cuda",
                   cache_dir=args.cache, tokens_max=TOKENS_MAX)
    with torch.no_grad():
        # Biases across both clamps of the SwiGLU.
        limit = layer.swiglu[1]
        moe.w13_bias.uniform_(-2 * limit, 2 * limit)
    return moe


def test_fused_moe(results, args, generator, name, quantization):
    """FusedMoE of one preset against the reference at each token count;
    returns the module."""
    from moe_mlir.testing.tensors import uniform

    layer = PRESETS[name]
    label = f"FusedMoE {name} {quantization or 'bf16'}"
    start = time.time()
    moe = build(args, layer, quantization)
    built = time.time() - start
    for tokens in TOKEN_COUNTS:
        hidden = uniform(generator, tokens, layer.hidden_size).to(
            torch.bfloat16).cuda()
        logits = uniform(generator, tokens, layer.num_experts,
                         scale=2.0).cuda()
        output, on_poisoned_block = on_poison(moe, hidden, logits)
        expected, clear = reference(moe, hidden, logits)
        check_layer(results, f"{label} T={tokens}", output.double(),
                    on_poisoned_block, expected, clear)
    print(f"{label}: built in {built:.1f} s, checked in "
          f"{time.time() - start - built:.1f} s", flush=True)
    return moe


def power_of_two(exponent):
    """2^exponent in float64, exactly (from its bits), for int64
    exponents in [-1022, 1023]."""
    return ((exponent + 1023) << 52).view(torch.float64)


def test_quantize(results, generator):
    """quantize_mxfp4_weights against the nearest e2m1 code by search."""
    from moe_mlir.testing.mxfp4 import decode
    from moe_mlir.torch import quantize_mxfp4_weights

    values = torch.randn(3, 64, 256, generator=generator) * 0.05
    values[0, 0, :32] = 0
    values[0, 1, :32] *= 1e-37  # scales at e8m0's least exponent
    values[0, 2, :32] *= 1e37   # and near its largest
    # Every midpoint between e2m1 magnitudes, both signs, at scale 2^-3
    # (amax 6 * 2^-3 fixes it).
    midpoints = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 6.0])
    values[1, 0, :16] = torch.cat([midpoints, -midpoints]) / 8
    values = values.cuda()
    codes, scales = quantize_mxfp4_weights(values)
    decoded_values = decode(bytes_of(codes), bytes_of(scales))
    # The least power-of-two scale with amax / scale <= 6, in [2^-127,
    # 2^127] (any for a zero block).
    blocks = values.double().unflatten(-1, (-1, 32))
    amax = blocks.abs().amax(-1)
    exponent = bytes_of(scales).long() - 127
    scale = power_of_two(exponent)
    least = (amax == 0) | ((amax <= 6 * scale)
                           & ((amax > 3 * scale) | (exponent == -127)))
    # The nearest code by search, ties to the even code.
    scaled = (blocks / scale[..., None]).flatten(-2)
    magnitudes = torch.tensor(E2M1, dtype=torch.float64, device="cuda")
    distance = (scaled.abs()[..., None] - magnitudes).abs()
    # Ties to even: the odd codes lose a tie by a hair.
    distance += torch.tensor([0, 1e-12] * 4, dtype=torch.float64,
                             device="cuda")
    nearest = magnitudes[distance.argmin(-1)] * torch.where(
        torch.signbit(scaled), -1.0, 1.0)
    expected = nearest * scale.repeat_interleave(32, -1)
    differ = int((decoded_values != expected).sum())
    results.check("quantize_mxfp4_weights: least scales with amax / scale "
                  "<= 6", bool(least.all()),
                  f"{int((~least).sum())} of {least.numel()} scales not")
    results.check("quantize_mxfp4_weights: every code the nearest e2m1 "
                  "value (ties to even)", differ == 0,
                  f"{differ} of {expected.numel()} values differ")
    ties = decoded_values[1, 0, :16].cpu() * 8
    results.check("quantize_mxfp4_weights: midpoints round to even codes",
                  ties.tolist() == [0.0, 1.0, 1.0, 2.0, 2.0, 4.0, 4.0, 6.0,
                                    -0.0, -1.0, -1.0, -2.0, -2.0, -4.0, -4.0,
                                    -6.0], f"{ties.tolist()}")


def interleaved(gate_then_up, dim):
    """moe's gate half then up half of dimension ``dim`` as gpt-oss's
    interleaved gate (even) and up (odd) indices."""
    moved = gate_then_up.movedim(dim, 0)
    half = moved.shape[0] // 2
    return torch.stack([moved[:half], moved[half:]], 1).flatten(0, 1) \
        .movedim(0, dim)


def checkpoint_of(moe):
    """The MXFP4 module's weights in gpt-oss's checkpoint layout."""
    def blocks(name):
        codes = interleaved(bytes_of(getattr(moe, name)), 1) if name == \
            "w13" else bytes_of(moe.w2)
        return codes.unflatten(-1, (-1, 16))
    return (blocks("w13"),
            interleaved(bytes_of(moe.w13_weight_scale), 1),
            interleaved(moe.w13_bias, 1), blocks("w2"),
            bytes_of(moe.w2_weight_scale), moe.w2_bias)


def test_checkpoint(results, args, moe, generator):
    """gpt_oss_mxfp4_weights on the module's weights in gpt-oss's layout."""
    from moe_mlir.testing.tensors import bits, uniform
    from moe_mlir.torch import gpt_oss_mxfp4_weights

    weights = gpt_oss_mxfp4_weights(*checkpoint_of(moe))
    same = all(torch.equal(bytes_of(tensor), bytes_of(getattr(moe, name)))
               if tensor.element_size() == 1
               else torch.equal(tensor, getattr(moe, name))
               for name, tensor in weights.items())
    results.check("gpt_oss_mxfp4_weights: the checkpoint layout converts "
                  "back bit for bit", same)
    loaded = build(args, moe.layer, "mxfp4")
    loaded.load_state_dict(weights, strict=False)
    hidden = uniform(generator, 64, moe.layer.hidden_size).to(
        torch.bfloat16).cuda()
    logits = uniform(generator, 64, moe.layer.num_experts).cuda()
    results.check("a FusedMoE loaded from the checkpoint layout computes "
                  "the same", torch.equal(bits(loaded(hidden, logits)),
                                          bits(moe(hidden, logits))))


def test_compile(results, moe, generator):
    """torch.compile of the MXFP4 module with biases, and opcheck."""
    from moe_mlir.testing.tensors import bits, uniform

    layer = moe.layer
    hidden = uniform(generator, 7, layer.hidden_size).to(
        torch.bfloat16).cuda()
    logits = uniform(generator, 7, layer.num_experts, scale=2.0).cuda()
    results.attempt(
        "torch.compile(fullgraph=True) of the MXFP4 FusedMoE equals eager",
        lambda: (torch.equal(bits(torch.compile(moe, fullgraph=True)(
            hidden, logits)), bits(moe(hidden, logits))), ""))
    arguments = (hidden, logits, moe.w13.detach(), moe.w2.detach(), None,
                 moe.bundle_path, moe.w13_weight_scale.detach(),
                 moe.w2_weight_scale.detach(), None, moe.w13_bias.detach(),
                 moe.w2_bias.detach())
    results.opcheck(
        "torch.library.opcheck(moe_mlir::fused_moe) with MXFP4 weights and "
        "biases", torch.ops.moe_mlir.fused_moe.default, arguments,
        test_utils=("test_faketensor", "test_aot_dispatch_dynamic"))


def test_errors(results, moe, args, generator):
    """The argument checks of biases and MXFP4 weights."""
    from moe_mlir.testing.tensors import uniform
    from moe_mlir.torch import FusedMoE

    layer = moe.layer
    hidden = uniform(generator, 5, layer.hidden_size).to(
        torch.bfloat16).cuda()
    logits = uniform(generator, 5, layer.num_experts).cuda()

    def with_data(name, data, kind):
        results.raises_with("MXFP4 FusedMoE", moe, name, data, kind,
                            lambda: moe(hidden, logits))

    with_data("w13_bias", moe.w13_bias.data[:, 1:], ValueError)
    with_data("w2_bias", moe.w2_bias.data.float(), TypeError)
    with_data("w13", bytes_of(moe.w13.data), TypeError)
    with_data("w2_weight_scale", bytes_of(moe.w2_weight_scale.data),
              TypeError)
    with_data("w13_weight_scale", moe.w13_weight_scale.data[..., 1:],
              ValueError)
    results.raises("moe_mlir::fused_moe: one bias without the other",
                   ValueError,
                   lambda: torch.ops.moe_mlir.fused_moe(
                       hidden, logits, moe.w13, moe.w2, None,
                       moe.bundle_path, moe.w13_weight_scale,
                       moe.w2_weight_scale, None, moe.w13_bias, None))
    fp4 = torch.float4_e2m1fn_x2
    for case, kind, options in (
            ("MXFP4 with block scales", ValueError,
             {"weight_block_size": (128, 128)}),
            ("MXFP4 with channel scales", ValueError,
             {"weight_scaling": "channel"}),
            ("MXFP4 with float16 activations", TypeError,
             {"activation_dtype": torch.float16})):
        results.raises(f"FusedMoE: {case}", kind,
                       lambda options=options: FusedMoE(
                           layer=layer, dtype=fp4, device="cuda",
                           cache_dir=args.cache, tokens_max=TOKENS_MAX,
                           **options))
    results.raises("load_full_weights: biases of the wrong shape",
                   ValueError, lambda: moe.load_full_weights(
                       moe.w13, moe.w2, moe.w13_weight_scale,
                       moe.w2_weight_scale, w13_bias=moe.w2_bias,
                       w2_bias=moe.w2_bias))


def gpt_oss_block(config, generator):
    """A GptOssMLP of ``config`` on the GPU in bf16 with random weights of
    order-1 outputs: matrices normal / sqrt(fan-in), biases uniform (the
    gate and up ones across both clamps)."""
    from transformers import GptOssConfig
    from transformers.models.gpt_oss.modeling_gpt_oss import GptOssMLP

    settings = {key: value for key, value in config.items()
                if key != "model_type"}
    block = GptOssMLP(GptOssConfig(**settings))
    limit = config["swiglu_limit"]
    with torch.no_grad():
        for name, tensor in block.named_parameters():
            if name == "experts.gate_up_proj_bias":
                values = (torch.rand(tensor.shape, generator=generator)
                          * 4 - 2) * limit
            elif tensor.dim() == 1 or name.endswith("_bias"):
                values = torch.rand(tensor.shape, generator=generator) - 0.5
            else:
                fan_in = tensor.shape[-1 if name == "router.weight" else -2]
                values = torch.randn(tensor.shape,
                                     generator=generator) / fan_in ** 0.5
            tensor.copy_(values)
    return block.to(device="cuda", dtype=torch.bfloat16).eval()


def clear_tokens(logits, top_k):
    """Tokens whose k-th and (k+1)-th logits are apart: their routing is
    the same whichever way a tie breaks."""
    ordered = logits.float().sort(dim=1, descending=True).values
    return ordered[:, top_k - 1] - ordered[:, top_k] > 0


def compare_block(results, label, actual, expected, clear):
    from moe_mlir.testing.tensors import relative_errors

    left_out = f"{int((~clear).sum())} tied token(s) left out"
    if not torch.isfinite(actual.float()).all():
        results.check(label, False, f"output not finite; {left_out}")
        return
    error, _ = relative_errors(actual[clear], expected[clear])
    results.check(label, error <= BLOCK_TOLERANCE,
                  f"max |error| / max |reference| {error:.3g} (tolerance "
                  f"{BLOCK_TOLERANCE}); {left_out}")


def quantize_block(block):
    """Quantizes the block's expert weights to MXFP4 in gpt-oss's
    checkpoint layout and puts their decoded values into its bf16
    parameters; returns the checkpoint's tensors (gpt_oss_mxfp4_weights'
    arguments)."""
    from moe_mlir.testing.mxfp4 import decode
    from moe_mlir.torch import quantize_mxfp4_weights

    experts = block.experts
    checkpoint = []
    with torch.no_grad():
        for name in ("gate_up_proj", "down_proj"):
            weights = getattr(experts, name)
            # An expert at a time (120b's float32 temporaries of all experts
            # would not fit beside the block): [K, N] -> the checkpoint's
            # rows [N, K].
            codes, scales = [], []
            for expert in weights:
                expert_codes, expert_scales = quantize_mxfp4_weights(
                    expert.transpose(0, 1))
                expert.copy_(decode(bytes_of(expert_codes)[None],
                                    bytes_of(expert_scales)[None],
                                    torch.bfloat16)[0].transpose(0, 1))
                codes.append(bytes_of(expert_codes))
                scales.append(bytes_of(expert_scales))
            checkpoint += [torch.stack(codes).unflatten(-1, (-1, 16)),
                           torch.stack(scales),
                           getattr(experts, name + "_bias")]
    return checkpoint


def test_transformers(results, args, generator, size):
    """GptOssMLP against fused_moe_from_hf, the experts interface and an
    MXFP4 FusedMoE on its quantized weights."""
    from moe_mlir.torch import FusedMoE, gpt_oss_mxfp4_weights

    config = CONFIGS[size]
    top_k = config["num_experts_per_tok"]
    block = gpt_oss_block(config, generator)
    hidden = torch.randn(2, TRANSFORMERS_TOKENS // 2, config["hidden_size"],
                         generator=generator).to(torch.bfloat16).cuda()
    flat = hidden.view(-1, config["hidden_size"])
    with torch.no_grad():
        logits = block.router(flat)[0]
        expected, expected_scores = block(hidden)
    clear = clear_tokens(logits, top_k)
    fused = hf.fused_moe_from_hf(block, cache_dir=args.cache,
                                 tokens_max=TOKENS_MAX)
    with torch.no_grad():
        actual, scores = fused(hidden)
    results.check(f"GptOssMLP {size}: FusedMoEBlock's router logits are the "
                  "block's, bit for bit",
                  torch.equal(fused.router_logits(flat), logits))
    results.check(f"GptOssMLP {size}: fused_moe_from_hf returns the block's "
                  "routing weights", torch.equal(scores, expected_scores))
    compare_block(results, f"GptOssMLP {size}: fused_moe_from_hf against the "
                  "block", actual.view(flat.shape), expected.view(flat.shape),
                  clear)
    if size == "small":
        block.experts.config._experts_implementation = \
            hf.EXPERTS_IMPLEMENTATION
        with torch.no_grad():
            through = block(hidden)[0]
        block.experts.config._experts_implementation = None
        results.check(f"GptOssMLP {size}: its experts ran through moe-mlir",
                      hf.fused_experts_of(block.experts) is not None)
        compare_block(results, f"GptOssMLP {size}: the experts interface "
                      "against the block's experts", through.view(flat.shape),
                      expected.view(flat.shape), clear)
    del fused

    checkpoint = quantize_block(block)
    with torch.no_grad():
        expected = block(hidden)[0].view(flat.shape)
    moe = FusedMoE(layer=hf.layer_from_config(config),
                   dtype=torch.float4_e2m1fn_x2, device="cuda",
                   cache_dir=args.cache, tokens_max=TOKENS_MAX)
    moe.load_state_dict(gpt_oss_mxfp4_weights(*checkpoint), strict=False)
    compare_block(results, f"GptOssMLP {size} on MXFP4 weights: FusedMoE on "
                  "their codes against the block on their values",
                  moe(flat, logits), expected, clear)


def run(results, args):
    """The checks on the GPU."""
    import transformers
    from moe_mlir.torch import unload_bundles

    print(f"gpt_oss_torch_test: seed {args.seed}, torch {torch.__version__}, "
          f"transformers {transformers.__version__}", flush=True)
    torch.manual_seed(args.seed)  # reset_parameters' weights
    generator = torch.Generator().manual_seed(args.seed)
    hf.register(cache_dir=args.cache, tokens_max=TOKENS_MAX)
    test_quantize(results, generator)
    for name in PRESETS:
        for quantization in QUANTIZATIONS:
            moe = test_fused_moe(results, args, generator, name,
                                 quantization)
            if (name, quantization) == ("gpt-oss-20b", "mxfp4"):
                test_checkpoint(results, args, moe, generator)
                test_compile(results, moe, generator)
                test_errors(results, moe, args, generator)
            del moe
            unload_bundles()
            torch.cuda.empty_cache()
    for size in CONFIGS:
        test_transformers(results, args, generator, size)
        unload_bundles()
        torch.cuda.empty_cache()


def main():
    return module_test_main("gpt_oss_torch_test", __doc__,
                            "out/gpu-bundles/gpt-oss-torch", prepare, run)


if __name__ == "__main__":
    sys.exit(main())
