// moe-tma on MXFP4 grouped matmuls: the packed weights' map is over the i8
// tensor [E, N, K/2], its boxes half of block_k bytes wide and unswizzled
// (the producer decodes them into the swizzled bf16 tiles); sorted bf16
// rows keep their 128-byte swizzled map.
// RUN: moe-opt %s --moe-tma | FileCheck %s

// CHECK-LABEL: func.func @gemm2
// CHECK: %[[W:.*]] = moe.tensor_map %{{.*}} : tensor<32x2880x1440xi8> -> !moe.tensor_map<i8, box = [1, 128, 32], swizzle = 0>
// CHECK: %[[X:.*]] = moe.tensor_map %{{.*}} : tensor<?x2880xbf16> -> !moe.tensor_map<bf16, box = [64, 64], swizzle = 128>
// CHECK: moe.grouped_matmul {{.*}} weight_scales(%{{.*}}) input_map(%[[X]]) weights_map(%[[W]])
func.func @gemm2(%h: tensor<?x2880xbf16>, %w: tensor<32x2880x1440xi8>,
                 %s: tensor<32x2880x90xf8E8M0FNU>, %sorted: tensor<?xi32>,
                 %experts: tensor<?xi32>, %n: tensor<i32>,
                 %rw: tensor<?x4xf32>) -> tensor<?x4x2880xbf16> {
  %y = moe.grouped_matmul %h, %w, %sorted, %experts, %n routed_weights(%rw)
         weight_scales(%s) input(sorted) output(slot)
         {block_m = 64, num_slots = 4,
          config = #moe.gemm_config<block_m = 64, block_n = 128, block_k = 64,
                                    num_stages = 4, tma_a = true,
                                    warp_specialized = true>,
          quantization = #moe.quantization<weights = mxfp4, activations = none, block_size = 32>}
       : (tensor<?x2880xbf16>, tensor<32x2880x1440xi8>, tensor<?xi32>,
          tensor<?xi32>, tensor<i32>, tensor<?x4xf32>,
          tensor<32x2880x90xf8E8M0FNU>) -> tensor<?x4x2880xbf16>
  return %y : tensor<?x4x2880xbf16>
}
