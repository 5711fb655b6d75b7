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
    I32EnumAttrCase<"gelu_and_mul", 2>,
    // gpt-oss's: parameters in a #moe.swiglu beside it.
    I32EnumAttrCase<"clamped_swiglu", 3>
  ]> {
  let cppNamespace = "::mlir::moe";
}

def Moe_BufferRoleAttr : I32EnumAttr<"BufferRole",
    "what a buffer of a launch plan holds", [
    // A tensor the caller passes for an argument of the layer (argN).
    I32EnumAttrCase<"input", 0>,
    // A tensor the caller passes for a result of the layer (resultN).
    I32EnumAttrCase<"output", 1>,
    // A device buffer the runtime allocates once, sized for tokens_max.
    I32EnumAttrCase<"workspace", 2>
  ]> {
  let cppNamespace = "::mlir::moe";
}

def Moe_LaunchArgKindAttr : I32EnumAttr<"LaunchArgKind",
    "how the runtime passes a kernel argument", [
    // The device pointer of a buffer of the plan.
    I32EnumAttrCase<"buffer", 0>,
    // The 128-byte descriptor of a tensor map of the plan, by value.
    I32EnumAttrCase<"map", 1>,
    // A 32-bit integer, the value of a size expression in T.
    I32EnumAttrCase<"i32", 2>,
    // The device pointer of an array of W pointers, one per rank, to the W
    // slices of a buffer along its first dimension (of size W): the ranks'
    // receive or return buffers of an expert-parallel exchange, which a rank
    // stores into through its peers' pointers. On one GPU (a simulated
    // world) slice d is at the buffer's base plus d slices; across processes
    // slice d is rank d's symmetric memory.
    I32EnumAttrCase<"peers", 3>
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

def Moe_WeightScalingAttr : I32EnumAttr<"WeightScaling",
    "how quantized expert weights are stored and scaled", [
    // One scale per expert matrix: [E].
    I32EnumAttrCase<"tensor", 0>,
    // One scale per output channel (row of N): [E, N].
    I32EnumAttrCase<"channel", 1>,
    // One scale per block_size x block_size block of [N, K]:
    // [E, ceil(N / B), ceil(K / B)] (DeepSeek-V3's `weight_scale_inv`).
    I32EnumAttrCase<"block", 2>,
    // OCP MXFP4 (gpt-oss's `*_blocks` and `*_scales`): e2m1 values packed
    // two per i8 along K, the even K index in the low nibble ([E, N, K/2]),
    // and one power-of-two f8E8M0FNU scale per block_size (32) values of K:
    // [E, N, K/32].
    I32EnumAttrCase<"mxfp4", 3>
  ]> {
  let cppNamespace = "::mlir::moe";
}

def Moe_ActivationScalingAttr : I32EnumAttr<"ActivationScaling",
    "how the fp32 scales of fp8 activations are found", [
    // Dynamic, one scale per row: [M, 1].
    I32EnumAttrCase<"token", 0>,
    // Dynamic, one scale per row and group of block_size columns:
    // [M, ceil(K / B)].
    I32EnumAttrCase<"token_group", 1>,
    // Static, one scale per GEMM input given by the caller (a checkpoint's
    // `input_scale`): a [1] operand, broadcast to [M, 1] by moe.quantize.
    I32EnumAttrCase<"static_tensor", 2>,
    // Not quantized: the GEMM inputs stay in the hidden states' float type
    // (weight-only quantization, W4A16).
    I32EnumAttrCase<"none", 3>
  ]> {
  let cppNamespace = "::mlir::moe";
}

//===----------------------------------------------------------------------===//
// Attributes
//===----------------------------------------------------------------------===//

/// A float parameter, parsed and printed as a float literal.
class Moe_FloatParameter<string desc>
    : AttrOrTypeParameter<"::llvm::APFloat", desc> {
  let comparator = "$_lhs.bitwiseIsEqual($_rhs)";
  let parser = [{ [&]() -> ::mlir::FailureOr<::llvm::APFloat> {
    double value;
    if (::mlir::failed($_parser.parseFloat(value)))
      return ::mlir::failure();
    return ::llvm::APFloat(value);
  }() }];
  let printer = "$_printer.printFloat($_self)";
}

/// The routed scaling factor, a float that defaults to 1.0.
def Moe_ScaleParameter : Moe_FloatParameter<"routed weight multiplier"> {
  let defaultValue = "::llvm::APFloat(1.0)";
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
    scale 1.0, no shared experts). The GPU gate unrolls over the groups and
    the slots, so `num_groups` is at most 64 and `top_k` +
    `num_shared_experts` at most 1024; the expert count E plus
    `num_shared_experts` is at most 2^31 - 1 (ids are i32).

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

def Moe_SwigluAttr : Moe_Attr<"Swiglu", "swiglu"> {
  let summary = "The parameters of the clamped SwiGLU activation";
  let description = [{
    The `clamped_swiglu` activation of gpt-oss's experts, for a gated pair
    (gate, up) of GEMM outputs, in fp32:

    ```
    gate = min(gate, limit)                    // NaN stays NaN
    up   = clamp(up, -limit, limit)
    out  = (up + 1) * gate * sigmoid(alpha * gate)
    ```

    carried as `swiglu` by the ops whose activation is `clamped_swiglu`
    (and only by them). `alpha` is finite, `limit` finite and positive; both
    are used as f32 values. gpt-oss-20b and -120b ship alpha = 1.702 and
    limit = 7.0.

    Example:

    ```mlir
    #moe.swiglu<alpha = 1.702, limit = 7.0>
    ```
  }];
  let parameters = (ins
    Moe_FloatParameter<"sigmoid's slope">:$alpha,
    Moe_FloatParameter<"clamp bound of the gate and up halves">:$limit
  );
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

def Moe_ExpertParallelAttr : Moe_Attr<"ExpertParallel", "expert_parallel"> {
  let summary = "The rank of an expert-parallel layer and its world";
  let description = [{
    Says that a `moe.fused_moe` is one rank's part of a layer whose E routed
    experts are split evenly over `world` ranks: rank `rank` holds routed
    experts `[rank * E/world, (rank + 1) * E/world)` and a replica of every
    shared expert, while its router still scores all E experts. Each rank
    routes its own tokens; `moe-expert-parallel` splits the layer into the
    exchange that sends each routed slot to the rank holding its expert, the
    local experts and the exchange that brings the rows back (see that
    pass). The rank is an attribute, so a compiled layer is one rank's: the
    verifiers check it against the world, and the ranks' artifacts differ
    only in the constants it becomes.

    Example (rank 1 of 4):

    ```mlir
    #moe.expert_parallel<world = 4, rank = 1>
    ```
  }];
  let parameters = (ins "int64_t":$world, "int64_t":$rank);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// The routed experts each rank holds, E / world.
    int64_t getLocalExperts(int64_t numExperts) const {
      return numExperts / getWorld();
    }
  }];
}

def Moe_QuantizationAttr : Moe_Attr<"Quantization", "quantization"> {
  let summary = "How quantized GEMM operands are stored and scaled";
  let description = [{
    The scaling recipe of a grouped matmul whose weights and input rows are
    `f8E4M3FN` (W8A8): every stored value stands for value x scale, with fp32
    scales at the granularity of `weights` (`tensor`, `channel` or `block`
    of `block_size` x `block_size`) and of `activations`, quantized at run
    time by `moe.quantize`: dynamically per `token`, or per `token_group` of
    `block_size` columns, from each row's or group's amax; or with one scale
    per tensor that the caller gives (`static_tensor`, the checkpoints'
    `input_scale` of `activation_scheme: static`). The recipes that
    checkpoints use pair `block` weights with `token_group` activations
    (DeepSeek-V3, Kimi-K2, Qwen3-FP8), and `tensor` or `channel` weights
    with `token` or `static_tensor` activations (FP8 Mixtral and Qwen
    checkpoints served by vLLM, TensorRT-LLM's FP8 MoE).

    `static_tensor` names both what is static and at what granularity: a
    dynamic per-tensor scale (one amax over the whole input) is a different
    recipe, which the name keeps free.

    Weight-only (W4A16): `weights = mxfp4` with `activations = none` and
    `block_size = 32` is the OCP MXFP4 format of gpt-oss's checkpoints: i8
    weights `[E, N, K/2]` holding two e2m1 values each along K (the even K
    index in the low nibble), and f8E8M0FNU scales `[E, N, K/32]`, so that
    weight[e, n, k] = e2m1(nibble) x 2^(scale - 127) (a scale of 0xFF is
    NaN); K is a multiple of 32. The input rows stay in their float type.

    Examples:

    ```mlir
    #moe.quantization<weights = block, activations = token_group, block_size = 128>
    #moe.quantization<weights = tensor, activations = static_tensor>
    #moe.quantization<weights = mxfp4, activations = none, block_size = 32>
    ```
  }];
  let parameters = (ins
    EnumParameter<Moe_WeightScalingAttr>:$weights,
    EnumParameter<Moe_ActivationScalingAttr>:$activations,
    DefaultValuedParameter<"int64_t", "128">:$block_size
  );
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// Whether only the weights are quantized (MXFP4): the inputs stay in
    /// their float type, with no input scales.
    bool isWeightOnly() const {
      return getActivations() == ActivationScaling::none;
    }
    /// Logical K values per stored weight element: 2 for packed e2m1.
    int64_t getWeightPacking() const {
      return getWeights() == WeightScaling::mxfp4 ? 2 : 1;
    }
    /// Whether the caller gives each GEMM input's scale (static_tensor).
    bool hasStaticActivations() const {
      return getActivations() == ActivationScaling::static_tensor;
    }
    /// Columns per activation scale of rows of `k` columns (all k when
    /// they are fewer than a block, as moe.quantize's group_size must be).
    int64_t getActivationGroupSize(int64_t k) const {
      return getActivations() == ActivationScaling::token_group
                 ? std::min(getBlockSize(), k) : k;
    }
    /// The shape of the scales of weights [E, N, K] (K the logical size).
    ::llvm::SmallVector<int64_t> getWeightScalesShape(int64_t numExperts,
                                                      int64_t n,
                                                      int64_t k) const;
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
    barrier in the K loop). `split_k` is at most 64: the reduction sums a
    slot's splits unrolled. `stream_k` (persistent grids of one K split)
    splits the tiles of the grid's last round along K, a part a block,
    instead of leaving the round to some of the blocks; the block that
    finishes a tile's last part sums its parts.

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
    DefaultValuedParameter<"bool", "false">:$warp_specialized,
    DefaultValuedParameter<"bool", "false">:$stream_k
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

//===----------------------------------------------------------------------===//
// The launch plan (convert-moe-to-gpu), which moe-compile writes out as a
// bundle's manifest (docs/BUNDLE.md)
//===----------------------------------------------------------------------===//

/// A bracketed list that may be empty: `[a, b]`, `[]`.
class Moe_ListParameter<string element, string desc = "">
    : ArrayRefParameter<element, desc> {
  let parser = "::mlir::moe::detail::parseList<" # element # ">($_parser)";
  let printer = "::mlir::moe::detail::printList($_printer, $_self)";
}

/// A list that `struct(params)` leaves out of the assembly when empty.
class Moe_OptionalListParameter<string element, string desc = "">
    : Moe_ListParameter<element, desc> {
  let defaultValue = cppStorageType # "()";
  let comparator = cppType # "($_lhs) == " # cppType # "($_rhs)";
}

def Moe_PlanBufferAttr : Moe_Attr<"PlanBuffer", "plan_buffer"> {
  let summary = "A buffer of a launch plan";
  let description = [{
    A device buffer that kernels of a launch plan take by pointer: a tensor
    the caller passes (`input`, `output`) or a `workspace` the runtime
    allocates once for T = tokens_max. `dims` are size expressions in the
    token count T (docs/BUNDLE.md), outermost first; a name is an identifier
    unique in the plan. Written as the manifest's `tensor` or `workspace`
    statement.

    Example (inside `#moe.launch_plan`, where the prefix is left out):

    ```mlir
    #moe.plan_buffer<workspace "route_block_offsets" : i32 ["cdiv(T*9,512)", "257"]>
    ```

    A caller tensor with an `exchange` is one rank's slice of an
    expert-parallel exchange buffer (a phase argument marked `moe.exchange`):
    `dims` are the slice's, the caller passes rank `rank`'s slice and binds
    the `world` slices of every rank, which `peers` launch arguments pass as
    a table (the manifest's `exchange` statement):

    ```mlir
    #moe.plan_buffer<output "result0" : bf16 ["40", "64"] exchange <world = 2, rank = 1>>
    ```
  }];
  let parameters = (ins
    EnumParameter<Moe_BufferRoleAttr>:$role,
    StringRefParameter<"identifier unique in the plan">:$name,
    "::mlir::Type":$element_type,
    Moe_ListParameter<"::mlir::StringAttr", "size expressions in T">:$dims,
    OptionalParameter<"::mlir::moe::ExpertParallelAttr",
                      "the ranks of an exchange buffer's slices">:$exchange
  );
  let assemblyFormat =
      "`<` $role $name `:` $element_type $dims (`exchange` $exchange^)? `>`";
  let genVerifyDecl = 1;
}

def Moe_PlanTensorMapAttr : Moe_Attr<"PlanTensorMap", "plan_tensor_map"> {
  let summary = "A TMA descriptor the runtime encodes over a buffer of a plan";
  let description = [{
    A tensor map (`CUtensorMap`) over the whole of a buffer of the plan,
    whose TMA copies move boxes of `box` elements (outermost first, like the
    buffer's dims and `!moe.tensor_map`) with a `swizzle`-byte span (0, 32,
    64 or 128). Its element type, dims and strides are the buffer's. Kernels
    take it by value (`map` arguments of `#moe.launch`). Written as the
    manifest's `tensormap` statement, innermost dim first.

    Example (inside `#moe.launch_plan`, where the prefix is left out):

    ```mlir
    #moe.plan_tensor_map<"arg1_map" over "arg1" box [1, 64, 64] swizzle 128>
    ```
  }];
  let parameters = (ins
    StringRefParameter<"identifier unique in the plan">:$name,
    StringRefParameter<"the buffer it describes">:$buffer,
    Moe_ListParameter<"int64_t", "box sizes, outermost first">:$box,
    "int64_t":$swizzle
  );
  let assemblyFormat =
      "`<` $name `over` $buffer `box` $box `swizzle` $swizzle `>`";
  let genVerifyDecl = 1;
}

def Moe_LaunchPlanAttr : Moe_Attr<"LaunchPlan", "launch_plan"> {
  let summary = "The buffers and tensor maps of the kernels of a layer";
  let description = [{
    What the runtime sets up before it launches the kernels of a
    `gpu.module` (convert-moe-to-gpu puts it on `@moe_kernels` as
    `moe.launch_plan`; each kernel carries its `moe.launch`): the largest
    token count `tokens_max` (at most 2^31 - 1: kernels take T as an i32),
    the `buffers`, the buffers to `zero_fill`
    before the launches, and the `tensor_maps` to encode. Buffer and tensor
    map names are unique across both lists.

    Example:

    ```mlir
    gpu.module @moe_kernels attributes {moe.launch_plan = #moe.launch_plan<
        tokens_max = 1024,
        buffers = [<input "arg0" : bf16 ["T", "64"]>,
                   <output "result0" : f32 ["T", "128"]>,
                   <workspace "gemm_partials" : f32 ["2", "T", "128"]>],
        zero_fill = ["gemm_partials"],
        tensor_maps = [<"arg0_map" over "arg0" box [64, 64] swizzle 128>]>} {
      ...
    }
    ```
  }];
  let parameters = (ins
    "int64_t":$tokens_max,
    Moe_ListParameter<"::mlir::moe::PlanBufferAttr">:$buffers,
    Moe_OptionalListParameter<"::mlir::StringAttr",
                              "names of buffers to fill with zeros">:$zero_fill,
    Moe_OptionalListParameter<"::mlir::moe::PlanTensorMapAttr">:$tensor_maps
  );
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// The buffer named `name`, or null.
    PlanBufferAttr lookupBuffer(::llvm::StringRef name) const;
    /// The tensor map named `name`, or null.
    PlanTensorMapAttr lookupTensorMap(::llvm::StringRef name) const;
  }];
}

def Moe_LaunchAttr : Moe_Attr<"Launch", "launch"> {
  let summary = "How the runtime launches one kernel of a launch plan";
  let description = [{
    The launch of a kernel (`moe.launch` on a `gpu.func` of a module that
    carries a `moe.launch_plan`): its `grid` as three size expressions in T
    (docs/BUNDLE.md), its `block` of three sizes, `smem` bytes of dynamic
    shared memory, and what to pass for each kernel argument, in order: the
    pointer of a buffer of the plan (its name), the descriptor of a tensor
    map of the plan by value (`map` and its name), or a 32-bit integer
    (`i32` and a size expression). With `dependent = true` the runtime
    launches the kernel as a programmatic dependent of the kernel before it
    in the stream (Hopper's programmatic dependent launch), which may start
    it before that kernel completes: the kernel must then begin with
    `nvvm.griddepcontrol wait`, which the dialect verifies (no op that
    touches memory before it in the entry block). Written as the manifest's
    `launch` statement.

    Example:

    ```mlir
    gpu.func @moe_grouped_matmul_wgmma_0(...) kernel attributes {
        moe.launch = #moe.launch<grid = ["cdiv(T*2+60,16)", "1", "1"],
                                 block = [128, 1, 1], smem = 98304,
                                 args = ["arg0", map "arg1_map", "result0",
                                         i32 "T"], dependent = true>} {
      nvvm.griddepcontrol wait
      ...
    ```
  }];
  let parameters = (ins
    Moe_ListParameter<"::mlir::StringAttr", "size expressions in T">:$grid,
    Moe_ListParameter<"int64_t", "threads per block">:$block,
    "int64_t":$smem,
    Moe_ListParameter<"::mlir::moe::LaunchArg", "kernel arguments">:$args,
    DefaultValuedParameter<"bool", "false">:$dependent
  );
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

#endif // MOE_DIALECT_MOE_IR_MOEATTRS_TD
