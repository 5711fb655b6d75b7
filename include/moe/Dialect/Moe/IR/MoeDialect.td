//===- MoeDialect.td - The moe dialect ---------------------*- tablegen -*-===//
//
// The moe dialect: Mixture-of-Experts layers as IR.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_DIALECT_MOE_IR_MOEDIALECT_TD
#define MOE_DIALECT_MOE_IR_MOEDIALECT_TD

include "mlir/IR/OpBase.td"

def Moe_Dialect : Dialect {
  let name = "moe";
  let cppNamespace = "::mlir::moe";
  let summary = "Mixture-of-Experts layers: routing and grouped matmuls";
  let description = [{
    The `moe` dialect describes one Mixture-of-Experts layer at two levels:

    * the layer level, `moe.fused_moe`, which a front end emits as one op;
    * the primitive level (`moe.gate`, `moe.route`, `moe.grouped_matmul`,
      `moe.combine`), produced by `moe-decompose`, which the CPU and GPU
      lowerings consume.

    Names used throughout: T tokens, H hidden size, I expert intermediate
    size, E routed experts, X fused shared experts (stored after the routed
    ones, ids `E..E+X-1`), S = top_k + X slots per token. Token counts may be
    dynamic; every other dimension is static.

    Sizes are bounded (`MoeLimits.h`) so that everything derived from them
    fits the kernels' types: every static dimension of an op's tensors and
    every size attribute is in [1, 2^31 - 1] (no dimension is 0; a layer of
    no tokens is a dynamic T of 0, which the CPU path computes as empty work
    and the runtime refuses: it runs T in [1, tokens-max]); a tensor, its
    dynamic dimensions counted as 2^31 - 1, has fewer than 2^63 bytes; and
    slot ids t * S + s and routed rows are i32, so T*S and the routing
    capacity T*S + E*(block_m - 1) are at most 2^31 - 1, which the verifiers
    check for a static T (a dynamic one at one token) and the passes at their
    `tokens` and `tokens-max`.
  }];
  let useDefaultAttributePrinterParser = 1;
  let useDefaultTypePrinterParser = 1;
  // `moe.tuned` marks a grouped matmul whose #moe.gemm_config came from a
  // tuned config database: later passes must not change it.
  // The launch plan of convert-moe-to-gpu: `moe.launch_plan` on the kernel
  // gpu.module, `moe.launch` on each kernel, and on a kernel that takes
  // tensor maps `moe.grid_constant_args`, the indices of the arguments that
  // moe-grid-constant-tensor-maps turns into by-value grid constants.
  // `moe.exchange` marks an argument of a phase of an expert-parallel layer
  // (moe-expert-parallel) as the `[W, ...]` exchange buffer of the ranks of
  // its #moe.expert_parallel: on a GPU each rank holds one slice of it.
  let discardableAttrs = (ins
    "::mlir::UnitAttr":$tuned,
    "::mlir::moe::ExpertParallelAttr":$exchange,
    "::mlir::moe::LaunchPlanAttr":$launch_plan,
    "::mlir::moe::LaunchAttr":$launch,
    "::mlir::DenseI64ArrayAttr":$grid_constant_args
  );
  // Checks the attributes above: their kind, the op they are on, and that
  // launches and grid constants agree with the plan and the kernel.
  let hasOperationAttrVerify = 1;
  let hasRegionArgAttrVerify = 1;
  let extraClassDeclaration = [{
    void registerAttributes();
    void registerTypes();
  }];
}

#endif // MOE_DIALECT_MOE_IR_MOEDIALECT_TD
