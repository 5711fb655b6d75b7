//===- Passes.td - moe dialect transformations -------------*- tablegen -*-===//

#ifndef MOE_DIALECT_MOE_TRANSFORMS_PASSES_TD
#define MOE_DIALECT_MOE_TRANSFORMS_PASSES_TD

include "mlir/Pass/PassBase.td"

def MoeDecompose : Pass<"moe-decompose"> {
  let summary = "Decompose moe.fused_moe into the primitive moe ops";
  let description = [{
    Rewrites each `moe.fused_moe` into the five primitive ops that the CPU and
    GPU lowerings consume: the router (`moe.gate`), the alignment of routed
    slots to `block-m`-row blocks (`moe.route`), the first grouped matmul
    (gathering token rows, `w13`, gated activation, sorted output), the second
    grouped matmul (sorted rows, `w2`, multiplied by the routed weight,
    scattered to slot order) and the per-token sum (`moe.combine`).

    The routed weights are applied in the second GEMM's epilogue rather than
    in `moe.combine` so that the slot rows are final when stored, as the fused
    kernels of SGLang and vLLM do. The intermediate activations keep the
    element type of the hidden states.

    Before:

    ```mlir
    %y = moe.fused_moe %x, %logits, %w13, %w2 activation(silu_and_mul)
           {router = #moe.router<scoring = softmax, top_k = 2>}
         : (tensor<?x64xbf16>, tensor<?x8xf32>, tensor<8x256x64xbf16>,
            tensor<8x64x128xbf16>) -> tensor<?x64xbf16>
    ```

    After (types elided):

    ```mlir
    %w, %ids = moe.gate %logits {router = #moe.router<...>}
    %sorted, %experts, %count = moe.route %ids {block_m = 64, num_experts = 8}
    %h = moe.grouped_matmul %x, %w13, %sorted, %experts, %count
           input(token) output(sorted) activation(silu_and_mul) {...}
    %o = moe.grouped_matmul %h, %w2, %sorted, %experts, %count
           routed_weights(%w) input(sorted) output(slot) {...}
    %y = moe.combine %o
    ```
  }];
  let dependentDialects = ["::mlir::moe::MoeDialect"];
  let options = [
    Option<"blockM", "block-m", "int64_t", /*default=*/"64",
           "Rows per routing block: every expert's rows are padded to a "
           "multiple of it (the GEMMs' M tile)">
  ];
}

#endif // MOE_DIALECT_MOE_TRANSFORMS_PASSES_TD
