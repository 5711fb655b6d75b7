#!/usr/bin/env python3
"""GPU test of moe_mlir.transformers with Hugging Face transformers 5.x.

For Mixtral, Qwen3-MoE and DeepSeek-V3, a 2-layer causal LM from a small
config (SMALL_CONFIGS, plain dicts, so that --prepare knows the layers
without transformers; every layer a MoE layer) with random bf16 weights on
the GPU:

- the transformers config gives the same layer as the dict, and the model's
  experts have its sizes;
- the experts interface: logits with experts_implementation "moe_mlir" (set
  by model.set_experts_implementation) against "grouped_mm" and against
  "eager" (transformers' loop over experts: a second, independent peer),
  max |error| / max |reference| within LOGITS_TOLERANCE over the tokens
  that both runs route alike (a token whose second-layer routing flips on a
  near-tie is left out; at most MAX_FLIPPED of them); every experts module
  ran through moe-mlir; with the last layer's down_proj scaled by
  PERTURBATION for one moe_mlir run the comparison fails (it can), and
  passes again once restored (the weights are read in place); a model made
  by from_config(..., experts_implementation="moe_mlir") matches too;
- the whole block: fused_moe_from_hf(block) against the block's own forward
  (grouped_mm experts) on random hidden states, within BLOCK_TOLERANCE over
  the tokens whose routing is no near-tie (TIE_MARGIN, as python_test.py),
  the same return structure, router logits bit-equal to the block's router;
- Mixtral's experts module with its weights transposed (converted, and
  converted again after an in-place change) and a call of more than
  tokens_max tokens (in pieces), against grouped_mm;
- the errors: experts on the host, in float64, with GELU, wrong shapes; a
  block that is not one, DeepSeek with a negative correction bias;
- the README's examples ("In Hugging Face transformers"), run as written
  with the bundle cache pointed at --cache.

The GPU machine has no compiler, so the bundles come from here:
    /usr/bin/python3 test/GPU/transformers_test.py --prepare   # here
    PYTHONPATH=build-runtime/python python3 test/GPU/transformers_test.py
(scripts/make-gpu-bundles.sh runs the first, scripts/gpu-run.sh tests the
second). Exits non-zero on any failure.
"""

import contextlib
import copy
import functools
import os
import re
import sys
import warnings
from unittest import mock

import moe_mlir.transformers as hf
# The harness of the Python test: PASS/FAIL lines and the float64 router
# with each token's routing margin.
from moe_mlir.testing.results import module_test_main
from python_test import reference_routing

try:
    import torch
except ImportError:  # --prepare runs where MLIR is, which has no torch.
    torch = None

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
TOKENS_MAX = 1024
# Two layers, each a MoE layer; the experts' sizes of each family's routing.
SMALL_CONFIGS = {
    "mixtral": {
        "model_type": "mixtral", "vocab_size": 512, "hidden_size": 256,
        "intermediate_size": 128, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2,
        "num_local_experts": 8, "num_experts_per_tok": 2,
        "hidden_act": "silu", "max_position_embeddings": 512},
    "qwen3_moe": {
        "model_type": "qwen3_moe", "vocab_size": 512, "hidden_size": 128,
        "intermediate_size": 256, "moe_intermediate_size": 64,
        "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 32, "num_experts": 32,
        "num_experts_per_tok": 4, "norm_topk_prob": True,
        "decoder_sparse_step": 1, "mlp_only_layers": [],
        "hidden_act": "silu", "max_position_embeddings": 512},
    "deepseek_v3": {
        "model_type": "deepseek_v3", "vocab_size": 512, "hidden_size": 256,
        "intermediate_size": 256, "moe_intermediate_size": 64,
        "num_hidden_layers": 2, "first_k_dense_replace": 0,
        "num_attention_heads": 4, "num_key_value_heads": 4,
        "q_lora_rank": 64, "kv_lora_rank": 32, "qk_rope_head_dim": 16,
        "qk_nope_head_dim": 32, "v_head_dim": 32, "n_routed_experts": 64,
        "num_experts_per_tok": 8, "n_group": 8, "topk_group": 4,
        "norm_topk_prob": True, "routed_scaling_factor": 2.5,
        "n_shared_experts": 1, "hidden_act": "silu",
        "max_position_embeddings": 512},
}
# The README's examples build this family's small model.
README_FAMILY = "qwen3_moe"
BATCH, SEQUENCE = 2, 48
# max |error| / max |reference| of the logits of two bf16 models whose
# experts round differently, two layers deep; of one block's output against
# the block's own (bf16 throughout, as python_test.py's bf16 layers).
LOGITS_TOLERANCE = 3e-2
BLOCK_TOLERANCE = 2e-2
# The share of tokens whose second-layer routing may flip on a near-tie
# between two runs (and is left out of the comparison): DeepSeek-V3's
# top-8 of 64 sigmoid scores in groups flips up to 6 of 96 tokens between
# transformers' own grouped_mm and eager (H100, seeds of 2026-11-23).
MAX_FLIPPED = 0.125
PERTURBATION = 1.25
TIE_MARGIN = 1e-5


def prepare(cache_dir):
    """Compiles the bundles both seams will look for (no torch needed)."""
    with warnings.catch_warnings():
        # The small layers have no tuned configs; the heuristic's are fine.
        warnings.simplefilter("ignore", UserWarning)
        paths = hf.prepare_bundles(SMALL_CONFIGS.values(),
                                   cache_dir=cache_dir, tokens_max=TOKENS_MAX)
    for path in paths:
        print(path)


def randomize(model, generator):
    """Matrices normal with standard deviation 1/sqrt(fan-in), so that the
    router logits and the experts' outputs are of order 1 (routing decides,
    the experts weigh in the logits); norms' weights 1; DeepSeek's
    correction biases uniform in [0, 0.1) (non-negative: see
    fused_moe_from_hf's strict)."""
    parameters = dict(model.named_parameters())
    with torch.no_grad():
        for name, tensor in [*parameters.items(), *model.named_buffers()]:
            if name.endswith("e_score_correction_bias"):
                values = torch.rand(tensor.shape, generator=generator) * 0.1
            elif name not in parameters:
                continue
            elif tensor.dim() == 1:
                values = torch.ones(tensor.shape)
            else:
                values = (torch.randn(tensor.shape, generator=generator)
                          * tensor.shape[-1] ** -0.5)
            tensor.copy_(values)


def hf_config(family):
    from transformers import AutoConfig
    settings = {key: value for key, value in SMALL_CONFIGS[family].items()
                if key != "model_type"}
    return AutoConfig.for_model(family, **settings)


def build_model(config, implementation):
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_config(
        config, dtype=torch.bfloat16, attn_implementation="eager",
        experts_implementation=implementation)
    return model.to("cuda").eval()


def experts_modules(model):
    return [module for module in model.modules()
            if isinstance(getattr(module, "gate_up_proj", None),
                          torch.nn.Parameter)]


def moe_blocks(model):
    return [module for module in model.modules()
            if isinstance(getattr(module, "experts", None), torch.nn.Module)
            and hasattr(module, "gate")]


@contextlib.contextmanager
def routing_of(model):
    """Records the expert ids, sorted per token, that each call of an
    experts module of `model` takes (the model's routing, layer by
    layer)."""
    records = []

    def record(module, args, kwargs):
        ids = args[1] if len(args) > 1 else kwargs["top_k_index"]
        records.append(ids.sort(dim=-1).values.cpu())

    handles = [module.register_forward_pre_hook(record, with_kwargs=True)
               for module in experts_modules(model)]
    try:
        yield records
    finally:
        for handle in handles:
            handle.remove()


def logits_of(model, input_ids, implementation=None):
    """(logits [tokens, vocab] in float32, routing) of `model`, with its
    experts implementation set first when given."""
    if implementation is not None:
        model.set_experts_implementation(implementation)
    with routing_of(model) as routing, torch.no_grad():
        logits = model(input_ids).logits
    torch.cuda.synchronize()
    return logits.float().reshape(-1, logits.shape[-1]), routing


def relative_error(actual, expected):
    """max |actual - expected| / max |expected|, in float64."""
    actual, expected = actual.double(), expected.double()
    return ((actual - expected).abs().max()
            / expected.abs().max().clamp_min(1e-30)).item()


def compare_logits(actual, expected):
    """('' if `actual` matches `expected` (both from logits_of) within
    LOGITS_TOLERANCE, else why not; the error and what was left out)."""
    (logits, routing), (reference, reference_routing_) = actual, expected
    if len(routing) != len(reference_routing_):
        return "the experts ran a different number of times", ""
    flipped = torch.zeros(logits.shape[0], dtype=torch.bool)
    for ids, reference_ids in zip(routing, reference_routing_):
        flipped |= (ids != reference_ids).any(dim=1)
    left_out = (f"{int(flipped.sum())} of {flipped.numel()} token(s) left "
                "out (routing flipped on a near-tie)")
    if flipped.float().mean() > MAX_FLIPPED:
        return f"too many tokens route differently: {left_out}", ""
    keep = (~flipped).to(logits.device)
    if not torch.isfinite(logits[keep]).all():
        return "logits not finite", left_out
    error = relative_error(logits[keep], reference[keep])
    detail = f"max |error| / max |reference| {error:.3g}; {left_out}"
    if error > LOGITS_TOLERANCE:
        return f"{detail} (tolerance {LOGITS_TOLERANCE})", detail
    return "", detail


def check_logits(results, name, actual, expected):
    failure, detail = compare_logits(actual, expected)
    results.check(name, not failure, failure or detail)


def test_experts_interface(results, family, model, config, generator):
    from transformers import AutoModelForCausalLM

    layer = hf.layer_from_config(SMALL_CONFIGS[family])
    results.check(f"{family}: the transformers config gives the dict's layer",
                  hf.layer_from_config(config) == layer, f"{layer}")
    experts = experts_modules(model)
    shapes = {(tuple(module.gate_up_proj.shape),
               tuple(module.down_proj.shape)) for module in experts}
    expected = {((layer.num_experts, 2 * layer.intermediate_size,
                  layer.hidden_size),
                 (layer.num_experts, layer.hidden_size,
                  layer.intermediate_size))}
    results.check(f"{family}: a MoE block in every layer, of the layer's "
                  "sizes", len(experts) == config.num_hidden_layers
                  and shapes == expected, f"{len(experts)} blocks, {shapes}")

    input_ids = torch.randint(0, config.vocab_size, (BATCH, SEQUENCE),
                              generator=generator).cuda()
    reference = logits_of(model, input_ids, "grouped_mm")
    eager = logits_of(model, input_ids, "eager")
    ours = logits_of(model, input_ids, hf.EXPERTS_IMPLEMENTATION)
    check_logits(results, f"{family}: logits, grouped_mm against eager (the "
                 "peers agree)", reference, eager)
    check_logits(results, f"{family}: logits, moe_mlir against grouped_mm",
                 ours, reference)
    check_logits(results, f"{family}: logits, moe_mlir against eager", ours,
                 eager)
    results.check(f"{family}: every experts module ran through moe-mlir",
                  all(hf.fused_experts_of(module) is not None
                      for module in experts))

    down = experts[-1].down_proj
    saved = down.detach().clone()
    with torch.no_grad():
        down.mul_(PERTURBATION)
    perturbed = logits_of(model, input_ids)
    with torch.no_grad():
        down.copy_(saved)
    failure, _ = compare_logits(perturbed, reference)
    results.check(f"{family}: moe_mlir with the last layer's down_proj x "
                  f"{PERTURBATION} fails the comparison", bool(failure),
                  failure or "it passed")
    check_logits(results, f"{family}: logits, moe_mlir again after the "
                 "weights are restored", logits_of(model, input_ids),
                 reference)

    built = AutoModelForCausalLM.from_config(
        copy.deepcopy(config), dtype=torch.bfloat16,
        attn_implementation="eager",
        experts_implementation=hf.EXPERTS_IMPLEMENTATION)
    built.load_state_dict(model.state_dict())
    built.to("cuda").eval()
    results.check(f"{family}: from_config(experts_implementation="
                  "'moe_mlir') keeps it",
                  built.config._experts_implementation
                  == hf.EXPERTS_IMPLEMENTATION,
                  f"{built.config._experts_implementation}")
    check_logits(results, f"{family}: logits of a model made with moe_mlir "
                 "against grouped_mm", logits_of(built, input_ids),
                 reference)


def block_output(output):
    """(the output tensor, the router logits or None) of a block's
    forward."""
    return output if isinstance(output, tuple) else (output, None)


def test_block(results, args, family, model, generator):
    model.set_experts_implementation("grouped_mm")
    block = moe_blocks(model)[0]
    layer = hf.layer_from_config(SMALL_CONFIGS[family])
    fused = hf.fused_moe_from_hf(block, cache_dir=args.cache,
                                 tokens_max=TOKENS_MAX)
    hidden = (torch.randn(BATCH, SEQUENCE, layer.hidden_size,
                          generator=generator)
              .to(torch.bfloat16).cuda())
    flat = hidden.view(-1, layer.hidden_size)
    with torch.no_grad():
        expected, expected_logits = block_output(block(hidden))
        actual, actual_logits = block_output(fused(hidden))
        gate = block.gate(flat)
    torch.cuda.synchronize()
    results.check(f"{family}: fused_moe_from_hf returns what the block "
                  "returns", actual.shape == expected.shape
                  and (actual_logits is None) == (expected_logits is None),
                  f"{list(actual.shape)}, router logits "
                  f"{actual_logits is not None}")
    gate_logits = gate[0] if isinstance(gate, tuple) else gate
    with torch.no_grad():
        logits = fused.router_logits(flat)
    results.check(f"{family}: FusedMoEBlock's router logits are the block "
                  "router's, bit for bit", torch.equal(logits, gate_logits),
                  f"{logits.dtype}")
    bias = (block.gate.e_score_correction_bias.double().cpu()
            if layer.correction_bias else None)
    margin = reference_routing(layer.router, logits.double().cpu(), bias)[2]
    keep = (margin > TIE_MARGIN).to(actual.device)
    left_out = f"{int((~keep).sum())} near-tie token(s) left out"
    if not keep.any():
        results.check(f"{family}: fused_moe_from_hf against the block", False,
                      left_out)
    else:
        actual = actual.reshape(-1, layer.hidden_size)[keep]
        expected = expected.reshape(-1, layer.hidden_size)[keep]
        error = relative_error(actual, expected)
        results.check(f"{family}: fused_moe_from_hf against the block",
                      torch.isfinite(actual).all().item()
                      and error <= BLOCK_TOLERANCE,
                      f"max |error| / max |reference| {error:.3g} "
                      f"(tolerance {BLOCK_TOLERANCE}); {left_out}")

    if layer.correction_bias:
        bias = block.gate.e_score_correction_bias
        saved = bias.detach().clone()
        with torch.no_grad():
            bias[0] = -0.05
        results.raises(f"{family}: a negative correction bias (strict)",
                       ValueError, lambda: hf.fused_moe_from_hf(
                           block, cache_dir=args.cache,
                           tokens_max=TOKENS_MAX))
        with torch.no_grad():
            bias.copy_(saved)
    results.raises(f"{family}: fused_moe_from_hf of an attention module",
                   TypeError, lambda: hf.fused_moe_from_hf(
                       model.model.layers[0].self_attn))


def experts_output(model, module, implementation, *inputs):
    """`module`'s output (an experts module reading `model`'s config) under
    `implementation`."""
    model.set_experts_implementation(implementation)
    with torch.no_grad():
        output = module(*inputs)
    torch.cuda.synchronize()
    return output


def check_experts(results, name, model, module, inputs):
    """moe_mlir against grouped_mm on `module`, within BLOCK_TOLERANCE."""
    expected = experts_output(model, module, "grouped_mm", *inputs)
    actual = experts_output(model, module, hf.EXPERTS_IMPLEMENTATION,
                            *inputs)
    error = relative_error(actual, expected)
    results.check(name, torch.isfinite(actual).all().item()
                  and error <= BLOCK_TOLERANCE,
                  f"max |error| / max |reference| {error:.3g} (tolerance "
                  f"{BLOCK_TOLERANCE})")


def test_experts_module(results, model, config, generator):
    """Mixtral's first experts module called directly: layouts, pieces,
    errors."""
    experts = experts_modules(model)[0]
    num_experts, _, hidden_size = experts.gate_up_proj.shape
    top_k = config.num_experts_per_tok

    def inputs(tokens):
        hidden = (torch.randn(tokens, hidden_size, generator=generator)
                  .to(torch.bfloat16).cuda())
        ids = torch.rand(tokens, num_experts,
                         generator=generator).topk(top_k).indices.cuda()
        weights = (torch.rand(tokens, top_k, generator=generator)
                   + 0.1).cuda()
        return hidden, ids, weights

    def copy_of(gate_up, down, module_config=config):
        module = type(experts)(module_config)
        module.gate_up_proj = torch.nn.Parameter(gate_up)
        module.down_proj = torch.nn.Parameter(down)
        return module

    transposed = copy_of(experts.gate_up_proj.detach().transpose(1, 2)
                         .contiguous(),
                         experts.down_proj.detach().transpose(1, 2)
                         .contiguous())
    transposed.is_transposed = True
    check_experts(results, "experts with transposed weights (converted)",
                  model, transposed, inputs(300))
    with torch.no_grad():
        transposed.down_proj.mul_(0.5)
    check_experts(results, "experts with transposed weights, changed in "
                  "place (converted again)", model, transposed, inputs(300))
    check_experts(results, f"experts on {TOKENS_MAX + 7} tokens (pieces of "
                  f"tokens_max {TOKENS_MAX})", model, experts,
                  inputs(TOKENS_MAX + 7))

    hidden, ids, weights = inputs(5)
    model.set_experts_implementation(hf.EXPERTS_IMPLEMENTATION)
    results.raises("experts: tensors on the host", ValueError,
                   lambda: experts(hidden.cpu(), ids.cpu(), weights.cpu()))
    results.raises("experts: top_k_index not [T, K]", ValueError,
                   lambda: experts(hidden, ids[:, 0], weights))
    in_float64 = copy_of(experts.gate_up_proj.detach().double(),
                         experts.down_proj.detach().double())
    results.raises("experts: float64 weights", TypeError,
                   lambda: in_float64(hidden.double(), ids, weights))
    gelu_config = copy.deepcopy(config)
    gelu_config.hidden_act = "gelu"
    gelu_config._experts_implementation = hf.EXPERTS_IMPLEMENTATION
    with_gelu = copy_of(experts.gate_up_proj.detach(),
                        experts.down_proj.detach(), gelu_config)
    results.raises("experts: GELU", ValueError,
                   lambda: with_gelu(hidden, ids, weights))


def test_readme(results, args):
    """The README's examples of "In Hugging Face transformers", in order in
    one namespace, as written; only the bundle cache is --cache (and its
    tokens_max), where --prepare compiled them."""
    with open(os.path.join(ROOT, "README.md")) as file:
        readme = file.read()
    section = readme[readme.index("\n## In Hugging Face transformers\n"):]
    section = section[:section.index("\n## ", 1)]
    examples = re.findall(r"```python\n(.*?)```", section, re.DOTALL)
    options = {"cache_dir": args.cache, "tokens_max": TOKENS_MAX}
    namespace = {}
    with mock.patch.object(hf, "register",
                           functools.partial(hf.register, **options)), \
            mock.patch.object(hf, "fused_moe_from_hf",
                              functools.partial(hf.fused_moe_from_hf,
                                                **options)):
        for example in examples:
            exec(compile(example, "README.md", "exec"), namespace)
    torch.cuda.synchronize()
    results.check("README: the examples run", len(examples) == 2,
                  f"{len(examples)} examples")
    results.check("README: its model is the small "
                  f"{README_FAMILY} model",
                  hf.layer_from_config(namespace["config"])
                  == hf.layer_from_config(SMALL_CONFIGS[README_FAMILY]))
    results.check("README: finite logits",
                  torch.isfinite(namespace["logits"]).all().item())


def run(results, args):
    """The checks on the GPU."""
    import transformers
    print(f"transformers_test: transformers {transformers.__version__}, "
          f"torch {torch.__version__}, seed {args.seed}", flush=True)
    hf.register(cache_dir=args.cache, tokens_max=TOKENS_MAX)
    generator = torch.Generator().manual_seed(args.seed)
    for family in SMALL_CONFIGS:
        config = hf_config(family)
        model = build_model(config, "grouped_mm")
        randomize(model, generator)
        test_experts_interface(results, family, model, config, generator)
        test_block(results, args, family, model, generator)
        if family == "mixtral":
            test_experts_module(results, model, config, generator)
        del model
        torch.cuda.empty_cache()
    test_readme(results, args)


def main():
    return module_test_main("transformers_test", __doc__,
                            "out/gpu-bundles/transformers", prepare, run)


if __name__ == "__main__":
    sys.exit(main())
