"""moe_mlir.testing: the harness the GPU tests (test/GPU), the benchmarks
(bench/) and the tuner (tools/moe-tune) share, as torch.testing is torch's.
They run bundles through moe_mlir.Bundle; this package holds the rest:

    bundles     the GPU test bundles' specs (test/GPU/bundles.json)
    compiler    moe-compile run as a program (the static one travels)
    distributed multicast off, torchrun and NCCL for the multi-GPU scripts,
                the slowest rank's times, the GPU-to-GPU copy bandwidth
    tune_space  the layer to tune (preset, file or sizes), the tuner's
                candidate configs compiled, and its config database
    results     the GPU module tests' PASS/FAIL checks and command line
    presets     the presets' layers written out, full-size and reduced
    reference   the plain C++ reference (libmoe_reference.so) on tensors
    tensors     random inputs, poisoned outputs, bit patterns, error norms
    routing     a routing bundle's outputs against the reference, bit for bit
    gemm        the grouped matmuls' routing, float64 references, and the
                cases the benchmark and the tuner time against the peer
    fp8         fp8 experts in float64 and the check of a GPU's output
                against them that decodes the intermediate's lawful flips
    peers       what ours is timed against: the router composed in torch
                (and logits it routes uniformly), F.grouped_mm
    timing      CUDA-event timing with the L2 flushed, CUDA graphs, the floor
                and the GPU's copy bandwidth
    tuner       the tuner (tools/moe-tune) as a call: tune_layer

The first six need no torch, so that they run where the compiler is
(which has no torch): importing them, or this package, imports none of it.
The others import torch. On the GPU machine scripts/gpu-run.sh builds the
package (runtime only) and puts it on PYTHONPATH; by hand:

    PYTHONPATH=build-runtime/python python3 test/GPU/gemm_test.py
"""
