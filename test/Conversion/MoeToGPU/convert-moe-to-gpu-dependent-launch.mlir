// convert-moe-to-gpu launches every kernel as a programmatic dependent of the
// kernel before it (`dependent = true` in its moe.launch), and every kernel
// begins with the wait for the grids before it and triggers no early launch
// of the next (it launches when this one's blocks have exited): each kind of kernel (gate, the three route kernels, the
// warp-specialized and the plain tensor-core grouped matmuls, the SIMT one,
// quantize, the split-K reduction, combine). The wait comes before anything
// else, even the warp-specialized kernel's tensor map prefetch and barrier
// setup, so that no thread reads or writes memory, nor returns, before it.
// RUN: moe-opt %moe_src_root/examples/deepseek-v3.mlir --moe-decompose=tokens=4096 \
// RUN:   --moe-tile=tokens=4096 --moe-split-k=tokens=4096 --moe-tma \
// RUN:   --convert-moe-to-gpu=tokens-max=4096 2>/dev/null | FileCheck %s --check-prefix=LAYER
// RUN: moe-opt %S/../../GPU/Inputs/fp8-block-experts.mlir --moe-decompose=tokens=7 \
// RUN:   "--moe-tile=tokens=7 config-db=%S/../../GPU/Inputs/fp8-block-splitk-configs.json" \
// RUN:   --moe-split-k=tokens=7 --moe-tma --convert-moe-to-gpu=tokens-max=1024 2>/dev/null \
// RUN:   | FileCheck %s --check-prefix=FP8
// RUN: moe-opt %S/../../GPU/Inputs/layer-gelu-f32.mlir --moe-decompose --moe-tile \
// RUN:   --moe-tma --convert-moe-to-gpu=tokens-max=1024 | FileCheck %s --check-prefix=SIMT

// LAYER:      gpu.func @moe_gate_0({{.*}}, dependent = true>} {
// LAYER-NEXT:   nvvm.griddepcontrol wait
// LAYER-NOT:    launch_dependents
// LAYER:      gpu.func @moe_route_count_1({{.*}}, dependent = true>} {
// LAYER-NEXT:   nvvm.griddepcontrol wait
// LAYER-NOT:    launch_dependents
// LAYER:      gpu.func @moe_route_scan_2({{.*}}, dependent = true>} {
// LAYER-NEXT:   nvvm.griddepcontrol wait
// LAYER-NOT:    launch_dependents
// LAYER:      gpu.func @moe_route_place_3({{.*}}, dependent = true>} {
// LAYER-NEXT:   nvvm.griddepcontrol wait
// LAYER-NOT:    launch_dependents
// The first grouped matmul: a producer warpgroup and a consumer one.
// LAYER:      gpu.func @moe_grouped_matmul_wgmma_4({{.*}}block = [256, 1, 1]{{.*}}, dependent = true>} {
// LAYER-NEXT:   nvvm.griddepcontrol wait
// LAYER-NOT:    launch_dependents
// LAYER:        nvgpu.tma.prefetch.descriptor
// LAYER:        nvgpu.mbarrier.init
// LAYER:        nvgpu.tma.async.load
// LAYER:      gpu.func @moe_grouped_matmul_wgmma_5({{.*}}, dependent = true>} {
// LAYER-NEXT:   nvvm.griddepcontrol wait
// LAYER-NOT:    launch_dependents
// LAYER:      gpu.func @moe_combine_6({{.*}}, dependent = true>} {
// LAYER-NEXT:   nvvm.griddepcontrol wait
// LAYER-NOT:    launch_dependents

// FP8:      gpu.func @moe_quantize_3({{.*}}, dependent = true>} {
// FP8-NEXT:   nvvm.griddepcontrol wait
// FP8-NOT:    launch_dependents
// FP8:      gpu.func @moe_grouped_matmul_reduce_5({{.*}}, dependent = true>} {
// FP8-NEXT:   nvvm.griddepcontrol wait
// FP8-NOT:    launch_dependents

// SIMT:      gpu.func @moe_grouped_matmul_4({{.*}}, dependent = true>} {
// SIMT-NEXT:   nvvm.griddepcontrol wait
// SIMT-NOT:    launch_dependents
