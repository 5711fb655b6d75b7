# RUN: %python %s | FileCheck %s
"""moe_mlir.transformers where neither torch nor transformers is: the layer
of each supported family's MoE blocks from its config (real models' configs
give the compiler's presets of those models), refusals of what moe.gate does
not compute, and register's moe_mlir.Error without transformers; importing
the module imports neither."""

import os
import sys

import moe_mlir
from moe_mlir import transformers as hf

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "Inputs"))
from expect import report  # noqa: E402

print("torch" in sys.modules, "transformers" in sys.modules)
# CHECK: False False
print(hf.SUPPORTED_MODEL_TYPES)
# CHECK: ('mixtral', 'qwen3_moe', 'deepseek_v3', 'gpt_oss')

# The MoE keys of the models' config.json files.
MIXTRAL_8X7B = {"model_type": "mixtral", "hidden_size": 4096,
                "intermediate_size": 14336, "num_local_experts": 8,
                "num_experts_per_tok": 2, "hidden_act": "silu"}
QWEN3_30B_A3B = {"model_type": "qwen3_moe", "hidden_size": 2048,
                 "intermediate_size": 6144, "moe_intermediate_size": 768,
                 "num_experts": 128, "num_experts_per_tok": 8,
                 "norm_topk_prob": True, "hidden_act": "silu"}
DEEPSEEK_V3 = {"model_type": "deepseek_v3", "hidden_size": 7168,
               "moe_intermediate_size": 2048, "n_routed_experts": 256,
               "num_experts_per_tok": 8, "n_group": 8, "topk_group": 4,
               "norm_topk_prob": True, "routed_scaling_factor": 2.5,
               "n_shared_experts": 1, "topk_method": "noaux_tc",
               "scoring_func": "sigmoid", "hidden_act": "silu"}
# Kimi-K2 is a DeepSeek-V3 with 384 experts in one group.
KIMI_K2 = dict(DEEPSEEK_V3, n_routed_experts=384, n_group=1, topk_group=1,
               routed_scaling_factor=2.827)
# gpt-oss: its experts gate with their own clamped SwiGLU whatever
# hidden_act says.
GPT_OSS_120B = {"model_type": "gpt_oss", "hidden_size": 2880,
                "intermediate_size": 2880, "num_local_experts": 128,
                "num_experts_per_tok": 4, "swiglu_limit": 7.0,
                "hidden_act": "silu"}
GPT_OSS_20B = dict(GPT_OSS_120B, num_local_experts=32)

for preset, config in (("mixtral-8x7b", MIXTRAL_8X7B),
                       ("qwen3-30b-a3b", QWEN3_30B_A3B),
                       ("deepseek-v3", DEEPSEEK_V3), ("kimi-k2", KIMI_K2),
                      ("gpt-oss-20b", GPT_OSS_20B),
                      ("gpt-oss-120b", GPT_OSS_120B)):
    layer = hf.layer_from_config(config)
    print(preset, layer == moe_mlir.Layer.preset(preset))
    print(" ", layer.router.params(), layer.correction_bias, layer.swiglu,
          layer.expert_biases)
# CHECK:      mixtral-8x7b True
# CHECK-NEXT:   scoring = softmax, top_k = 2, num_groups = 1, topk_groups = 1, renormalize = true, routed_scaling_factor = 1.0, num_shared_experts = 0 False None False
# CHECK-NEXT: qwen3-30b-a3b True
# CHECK-NEXT:   scoring = softmax, top_k = 8, num_groups = 1, topk_groups = 1, renormalize = true, routed_scaling_factor = 1.0, num_shared_experts = 0 False None False
# CHECK-NEXT: deepseek-v3 True
# CHECK-NEXT:   scoring = sigmoid, top_k = 8, num_groups = 8, topk_groups = 4, renormalize = true, routed_scaling_factor = 2.5, num_shared_experts = 1 True None False
# CHECK-NEXT: kimi-k2 True
# CHECK-NEXT:   scoring = sigmoid, top_k = 8, num_groups = 1, topk_groups = 1, renormalize = true, routed_scaling_factor = 2.827, num_shared_experts = 1 True None False
# CHECK-NEXT: gpt-oss-20b True
# CHECK-NEXT:   scoring = softmax, top_k = 4, num_groups = 1, topk_groups = 1, renormalize = true, routed_scaling_factor = 1.0, num_shared_experts = 0 False (1.702, 7.0) True
# CHECK-NEXT: gpt-oss-120b True
# CHECK-NEXT:   scoring = softmax, top_k = 4, num_groups = 1, topk_groups = 1, renormalize = true, routed_scaling_factor = 1.0, num_shared_experts = 0 False (1.702, 7.0) True

# Qwen3-MoE's transformers default leaves the top-k weights as they are.
print(hf.layer_from_config(dict(QWEN3_30B_A3B, norm_topk_prob=False))
      .router.renormalize)
# CHECK: False
# The experts interface runs the routed experts alone: the model routes.
print(hf.experts_layer(hf.layer_from_config(DEEPSEEK_V3)))
# CHECK: Layer(hidden_size=7168, intermediate_size=2048, num_experts=256, router=Router(scoring='softmax', top_k=8, num_groups=1, topk_groups=1, renormalize=False, routed_scaling_factor=1.0, num_shared_experts=0), correction_bias=False, swiglu=None, expert_biases=False)
# gpt-oss's experts keep their biases and clamped SwiGLU; the limit is the
# config's, and gpt-oss computes no SiLU.
print(hf.experts_layer(hf.layer_from_config(dict(GPT_OSS_20B,
                                                 swiglu_limit=5.5,
                                                 hidden_act="gelu"))))
# CHECK: Layer(hidden_size=2880, intermediate_size=2880, num_experts=32, router=Router(scoring='softmax', top_k=4, num_groups=1, topk_groups=1, renormalize=False, routed_scaling_factor=1.0, num_shared_experts=0), correction_bias=False, swiglu=(1.702, 5.5), expert_biases=True)

report("another family", lambda: hf.layer_from_config(
    dict(MIXTRAL_8X7B, model_type="qwen2_moe")))
# CHECK: another family: ValueError: moe-mlir maps the MoE blocks of mixtral, qwen3_moe, deepseek_v3, gpt_oss; not of model_type 'qwen2_moe'
report("gelu", lambda: hf.layer_from_config(
    dict(MIXTRAL_8X7B, hidden_act="gelu")))
# CHECK: gelu: ValueError: moe-mlir's experts compute SiLU-and-mul; this mixtral config has hidden_act 'gelu'
report("greedy top-k", lambda: hf.layer_from_config(
    dict(DEEPSEEK_V3, topk_method="greedy")))
# CHECK: greedy top-k: ValueError: DeepSeek-V3's router is topk_method 'noaux_tc'; this config has 'greedy'
report("uneven groups", lambda: hf.layer_from_config(
    dict(DEEPSEEK_V3, n_group=3)))
# CHECK: uneven groups: ValueError: 256 experts do not split into n_group 3 groups
report("too few kept", lambda: hf.layer_from_config(
    dict(DEEPSEEK_V3, n_routed_experts=32, topk_group=1)))
# CHECK: too few kept: ValueError: topk_group 1 groups of 4 experts hold fewer than top_k 8: transformers would then pick masked experts
report("missing key", lambda: hf.layer_from_config(
    {"model_type": "mixtral", "hidden_act": "silu"}))
# CHECK: missing key: ValueError: the config has no 'hidden_size'

# Without transformers (here made unimportable, as where it is missing).
sys.modules["transformers"] = None
report("register", hf.register)
# CHECK: register: Error: moe_mlir.transformers.register needs Hugging Face transformers 5.x, which cannot be imported:
report("fused_moe_from_hf", lambda: hf.fused_moe_from_hf(None))
# CHECK: fused_moe_from_hf: Error: moe_mlir.transformers.fused_moe_from_hf needs Hugging Face transformers 5.x
print("torch" in sys.modules)
# CHECK: False
