//===- MoeAttrs.td - moe enums and attributes --------------*- tablegen -*-===//

#ifndef MOE_DIALECT_MOE_IR_MOEATTRS_TD
#define MOE_DIALECT_MOE_IR_MOEATTRS_TD

include "moe/Dialect/Moe/IR/MoeDialect.td"
include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/EnumAttr.td"

//===----------------------------------------------------------------------===//
// Enums
//===----------------------------------------------------------------------===//

def Moe_ScoringAttr : I32EnumAttr<"Scoring", "router scoring function", [
    I32EnumAttrCase<"softmax", 0>,
    I32EnumAttrCase<"sigmoid", 1>
  ]> {
  let cppNamespace = "::mlir::moe";
}

def Moe_ActivationAttr : I32EnumAttr<"Activation",
    "gated activation applied to the two halves of a GEMM's N dimension", [
    I32EnumAttrCase<"none", 0>,
    I32EnumAttrCase<"silu_and_mul", 1>,
    I32EnumAttrCase<"gelu_and_mul", 2>
  ]> {
  let cppNamespace = "::mlir::moe";
}

def Moe_RowOrderAttr : I32EnumAttr<"RowOrder", "order of the rows of a GEMM operand", [
    // One row per token: rows are gathered by slot / S.
    I32EnumAttrCase<"token", 0>,
    // One row per padded routed row, grouped by expert (moe.route's order).
    I32EnumAttrCase<"sorted", 1>,
    // One row per slot (t * S + s), i.e. a [T, S, N] tensor.
    I32EnumAttrCase<"slot", 2>
  ]> {
  let cppNamespace = "::mlir::moe";
}

//===----------------------------------------------------------------------===//
// Attributes
//===----------------------------------------------------------------------===//

/// The routed scaling factor, a float that defaults to 1.0 and prints as one.
def Moe_ScaleParameter : AttrOrTypeParameter<"::llvm::APFloat",
                                             "routed weight multiplier"> {
  let comparator = "$_lhs.bitwiseIsEqual($_rhs)";
  let defaultValue = "::llvm::APFloat(1.0)";
  let parser = [{ [&]() -> ::mlir::FailureOr<::llvm::APFloat> {
    double value;
    if (::mlir::failed($_parser.parseFloat(value)))
      return ::mlir::failure();
    return ::llvm::APFloat(value);
  }() }];
  let printer = "$_printer.printFloat($_self)";
}

class Moe_Attr<string name, string attrMnemonic, list<Trait> traits = []>
    : AttrDef<Moe_Dialect, name, traits> {
  let mnemonic = attrMnemonic;
}

def Moe_RouterAttr : Moe_Attr<"Router", "router"> {
  let summary = "How a router picks experts for each token";
  let description = [{
    The routing rules of `moe.gate` and `moe.fused_moe`, kept in one attribute
    so that the layer and its decomposition cannot disagree.

    * `scoring`: `softmax` or `sigmoid` of the fp32 logits.
    * `top_k`: routed experts chosen per token.
    * `num_groups`, `topk_groups`: experts are split into `num_groups` equal
      groups; a group scores the sum of its two best selection scores and only
      the `topk_groups` best groups stay eligible (DeepSeek-V3 grouped top-k).
    * `renormalize`: divide the chosen weights by (their sum + 1e-20).
    * `routed_scaling_factor`: multiplies the routed weights.
    * `num_shared_experts`: fused shared experts appended to every token with
      ids `E..E+X-1` and weight 1.0.

    Parameters left out take their defaults (1 group, no renormalisation,
    scale 1.0, no shared experts).

    Example:

    ```mlir
    #moe.router<scoring = sigmoid, top_k = 8, num_groups = 8, topk_groups = 4,
                renormalize = true, routed_scaling_factor = 2.5>
    ```
  }];
  let parameters = (ins
    EnumParameter<Moe_ScoringAttr>:$scoring,
    "int64_t":$top_k,
    DefaultValuedParameter<"int64_t", "1">:$num_groups,
    DefaultValuedParameter<"int64_t", "1">:$topk_groups,
    DefaultValuedParameter<"bool", "false">:$renormalize,
    Moe_ScaleParameter:$routed_scaling_factor,
    DefaultValuedParameter<"int64_t", "0">:$num_shared_experts
  );
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// Slots per token: routed experts plus fused shared experts.
    int64_t getNumSlots() const { return getTopK() + getNumSharedExperts(); }
    /// Checks the rules that depend on the routed expert count E.
    ::llvm::LogicalResult
    verifyForExperts(::llvm::function_ref<::mlir::InFlightDiagnostic()> emitError,
                     int64_t numExperts) const;
  }];
}

def Moe_GemmConfigAttr : Moe_Attr<"GemmConfig", "gemm_config"> {
  let summary = "Tile configuration of a grouped matmul kernel";
  let description = [{
    Block sizes (`block_m` padded rows x `block_n` columns x `block_k`
    reduction elements per tile), the depth of the shared-memory pipeline
    (`num_stages`), the consumer warpgroups per block, the K splits, whether the
    A (activation) and B (weight) tiles load through TMA, the thread-block
    cluster shape, whether one persistent launch walks all tiles, and whether
    a producer warpgroup of its own issues the loads (`warp_specialized`: the
    consumers only wait for full stages and free them, with no block-wide
    barrier in the K loop).

    Example:

    ```mlir
    #moe.gemm_config<block_m = 64, block_n = 128, block_k = 64, num_stages = 4,
                     tma_b = true>
    ```
  }];
  let parameters = (ins
    "int64_t":$block_m,
    "int64_t":$block_n,
    "int64_t":$block_k,
    "int64_t":$num_stages,
    DefaultValuedParameter<"int64_t", "1">:$num_warpgroups,
    DefaultValuedParameter<"int64_t", "1">:$split_k,
    DefaultValuedParameter<"bool", "false">:$tma_a,
    DefaultValuedParameter<"bool", "true">:$tma_b,
    DefaultValuedParameter<"int64_t", "1">:$cluster_m,
    DefaultValuedParameter<"int64_t", "1">:$cluster_n,
    DefaultValuedParameter<"bool", "false">:$persistent,
    DefaultValuedParameter<"bool", "false">:$warp_specialized
  );
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// Bytes of shared memory the multi-stage A and B tile ring needs for
    /// elements of `elementBytes` bytes.
    int64_t getPipelineSharedMemoryBytes(int64_t elementBytes) const {
      return getNumStages() * (getBlockM() + getBlockN()) * getBlockK() *
             elementBytes;
    }
  }];
}

#endif // MOE_DIALECT_MOE_IR_MOEATTRS_TD
