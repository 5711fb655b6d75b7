"""The presets' reduced layers, written out: the GPU machine's moe_mlir has
no compiler to read the presets from, so the multi-GPU tests and the
expert-parallel test take them from here, and their --prepare, which runs
where the compiler is, checks that they agree (check_reduced_presets).
Imports no torch."""

from ..layers import Layer, Router

REDUCED_PRESETS = {
    "mixtral-8x7b": Layer(128, 448, 8, Router("softmax", 2, renormalize=True)),
    "qwen3-30b-a3b": Layer(64, 24, 128, Router("softmax", 8, renormalize=True)),
    "deepseek-v3": Layer(
        224, 64, 256,
        Router("sigmoid", 8, num_groups=8, topk_groups=4, renormalize=True,
               routed_scaling_factor=2.5, num_shared_experts=1),
        correction_bias=True),
}


def check_reduced_presets():
    """Raises AssertionError unless REDUCED_PRESETS are the compiler's."""
    for name, layer in REDUCED_PRESETS.items():
        if layer != Layer.preset(name, reduced=True):
            raise AssertionError(f"REDUCED_PRESETS[{name!r}] differs from "
                                 f"the compiler's preset")
