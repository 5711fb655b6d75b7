//===- MoeOps.td - moe operations --------------------------*- tablegen -*-===//

#ifndef MOE_DIALECT_MOE_IR_MOEOPS_TD
#define MOE_DIALECT_MOE_IR_MOEOPS_TD

include "moe/Dialect/Moe/IR/MoeAttrs.td"
include "moe/Dialect/Moe/IR/MoeTypes.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

/// Every static size of the op's tensors in [1, 2^31 - 1], and each tensor
/// under 2^63 bytes with its dynamic sizes at 2^31 - 1 (MoeLimits.h).
def Moe_BoundedTensorSizes : NativeOpTrait<"BoundedTensorSizes"> {
  let cppNamespace = "::mlir::moe::OpTrait";
}

class Moe_Op<string mnemonic, list<Trait> traits = []>
    : Op<Moe_Dialect, mnemonic,
         !listconcat(traits, [Pure, Moe_BoundedTensorSizes])> {
  let hasVerifier = 1;
}

def Moe_FloatTensor : RankedTensorOf<[F32, BF16, F16]>;
// Expert weights and GEMM operands: floats, or fp8 or packed MXFP4 (i8)
// scaled per #moe.quantization.
def Moe_GemmTensor : RankedTensorOf<[F32, BF16, F16, F8E4M3FN, I8]>;
// Weight scales: fp32 for fp8 weights, e8m0 for MXFP4 ones.
def Moe_ScaleTensor : RankedTensorOf<[F32, F8E8M0FNU]>;
def Moe_Fp8Tensor : RankedTensorOf<[F8E4M3FN]>;
def Moe_I32Tensor : RankedTensorOf<[I32]>;
def Moe_F32Tensor : RankedTensorOf<[F32]>;
def Moe_CountTensor : 0DTensorOf<[I32]>;
/// A size: positive and at most kMaxSize (2^31 - 1, MoeLimits.h), so that
/// the kernels hold it and the slot ids and rows it sizes in an i32.
def Moe_SizeAttr : ConfinedAttr<I64Attr, [IntPositive, AttrConstraint<
    CPred<"::llvm::cast<::mlir::IntegerAttr>($_self).getInt() <= "
          "::mlir::moe::kMaxSize">,
    "whose value is at most 2^31 - 1">]>;

//===----------------------------------------------------------------------===//
// Layer level
//===----------------------------------------------------------------------===//

def Moe_FusedMoeOp : Moe_Op<"fused_moe", [AttrSizedOperandSegments]> {
  let summary = "A whole Mixture-of-Experts layer";
  let description = [{
    Routes each token of `hidden_states` `[T, H]` to experts chosen from
    `router_logits` `[T, E]` (rules in `router`, optional `correction_bias`
    `[E]`), runs each chosen expert's gated MLP and sums the experts' outputs
    weighted by the routing weights:

    ```
    h   = hidden_states[t] x w13[e]^T + w13_bias[e]   // [2I], gate rows then up rows
    a   = activation(h[:I], h[I:])                    // [I], in fp32
    y[t] = sum over slots s of weight[t,s] * (a x w2[e]^T + w2_bias[e])   // [H]
    ```

    `w13` is `[E+X, 2I, H]` and `w2` is `[E+X, H, I]`, where X is the router's
    `num_shared_experts` (their weights follow the routed experts'). The
    result has the type of `hidden_states`. `moe-decompose` rewrites this op
    into `moe.gate`, `moe.route`, two `moe.grouped_matmul`s and `moe.combine`.

    The activation of a gated pair (gate, up) is `silu_and_mul`
    (silu(gate) * up), `gelu_and_mul` (gelu(gate) * up) or `clamped_swiglu`,
    gpt-oss's, whose alpha and limit the op carries as `swiglu`
    (`#moe.swiglu`, present exactly with that activation). Expert biases
    `biases(%w13_bias, %w2_bias)` (`[E+X, 2I]` and `[E+X, H]`, f32 or 16-bit
    floats, read as fp32; both or neither) are added to each GEMM's fp32
    sum, after any fp8 scaling: the first's before the activation, the
    second's before the routing weight. They are not the router's
    `correction_bias` (`bias(...)`), which steers selection only.
    gpt-oss's checkpoints interleave the gate and up rows (gate at even rows,
    up at odd ones); the op takes them as the other layers do, gate rows then
    up rows, and its front ends reorder them when they load the weights.

    FP8 weights: with a `quantization`, `w13` and `w2` are `f8E4M3FN` with
    fp32 scales `scales(%w13_scales, %w2_scales)` of the shapes the
    quantization gives (`block`: `[E+X, ceil(2I/B), ceil(H/B)]` and
    `[E+X, ceil(H/B), ceil(I/B)]`), and each GEMM's input rows are quantized
    at run time as `moe.quantize` defines: the hidden states, and the
    activation's output after it is stored in the hidden states' type.
    With `activations = static_tensor`, `input_scales(%a13, %a2)` gives the
    two inputs' scales (`tensor<1xf32>` each: the checkpoints'
    `w13_input_scale` and `w2_input_scale`, one per GEMM, vLLM taking the
    largest over the experts), and each input is quantized by its given
    scale, without an amax; `input_scales` comes with that scheme only.
    Either way each GEMM's fp32 sum is multiplied once by input scale x
    weight scale, for static scales and tensor weights the per-expert
    factor that TensorRT-LLM calls alpha.

    MXFP4 weights (gpt-oss, weight-only): with `#moe.quantization<weights =
    mxfp4, activations = none, block_size = 32>`, `w13` and `w2` are i8
    `[E+X, 2I, H/2]` and `[E+X, H, I/2]`, two e2m1 values per byte along K,
    with f8E8M0FNU `scales(%w13_scales, %w2_scales)` `[E+X, 2I, H/32]` and
    `[E+X, H, I/32]` (see `#moe.quantization`); the layer is the same layer
    on the weights those decode to, exactly (an e2m1 value times a power of
    two is a bf16 and an f32), with inputs in their float type.

    Examples (Mixtral 8x7B in bf16, and FP8 with static activation scales):

    ```mlir
    %y = moe.fused_moe %x, %logits, %w13, %w2 activation(silu_and_mul)
           {router = #moe.router<scoring = softmax, top_k = 2, renormalize = true>}
         : (tensor<?x4096xbf16>, tensor<?x8xf32>, tensor<8x28672x4096xbf16>,
            tensor<8x4096x14336xbf16>) -> tensor<?x4096xbf16>
    %z = moe.fused_moe %x, %logits, %q13, %q2 scales(%s13, %s2)
           input_scales(%a13, %a2) activation(silu_and_mul)
           {router = #moe.router<scoring = softmax, top_k = 2, renormalize = true>,
            quantization = #moe.quantization<weights = tensor,
                                             activations = static_tensor>}
         : (tensor<?x4096xbf16>, tensor<?x8xf32>, tensor<8x28672x4096xf8E4M3FN>,
            tensor<8x4096x14336xf8E4M3FN>, tensor<8xf32>, tensor<8xf32>,
            tensor<1xf32>, tensor<1xf32>) -> tensor<?x4096xbf16>
    ```

    Expert parallel: with `expert_parallel = #moe.expert_parallel<world =
    W, rank = R>` the op is rank R's part of the layer over W ranks, whose
    result is rank R's tokens' rows of the layer above, bit for bit: the
    logits still score all E experts, but `w13`, `w2` and their biases and
    scales hold the rank's local experts only, `[E/W + X, ...]`: routed
    experts `R*E/W .. (R+1)*E/W - 1`, then the X shared experts, which
    every rank holds. E must be divisible by W, and T static (each rank
    calls the layer with the same bucket of T tokens, which sizes the
    exchange's buffers: see `moe-expert-parallel`, which splits the layer;
    `moe-decompose` refuses it).

    gpt-oss-20b's layer (its router's linear computes the logits):

    ```mlir
    %y = moe.fused_moe %x, %logits, %w13, %w2 biases(%b13, %b2)
           activation(clamped_swiglu)
           {router = #moe.router<scoring = softmax, top_k = 4, renormalize = true>,
            swiglu = #moe.swiglu<alpha = 1.702, limit = 7.0>}
         : (tensor<?x2880xbf16>, tensor<?x32xf32>, tensor<32x5760x2880xbf16>,
            tensor<32x2880x2880xbf16>, tensor<32x5760xbf16>,
            tensor<32x2880xbf16>) -> tensor<?x2880xbf16>
    ```
  }];
  let arguments = (ins
    Moe_FloatTensor:$hidden_states,
    Moe_FloatTensor:$router_logits,
    Moe_GemmTensor:$w13,
    Moe_GemmTensor:$w2,
    Optional<Moe_F32Tensor>:$correction_bias,
    Optional<Moe_FloatTensor>:$w13_bias,
    Optional<Moe_FloatTensor>:$w2_bias,
    Optional<Moe_ScaleTensor>:$w13_scales,
    Optional<Moe_ScaleTensor>:$w2_scales,
    Optional<Moe_F32Tensor>:$w13_input_scale,
    Optional<Moe_F32Tensor>:$w2_input_scale,
    Moe_RouterAttr:$router,
    Moe_ActivationAttr:$activation,
    OptionalAttr<Moe_SwigluAttr>:$swiglu,
    OptionalAttr<Moe_QuantizationAttr>:$quantization,
    OptionalAttr<Moe_ExpertParallelAttr>:$expert_parallel
  );
  let results = (outs Moe_FloatTensor:$output);
  let assemblyFormat = [{
    $hidden_states `,` $router_logits `,` $w13 `,` $w2
    (`bias` `(` $correction_bias^ `)`)?
    (`biases` `(` $w13_bias^ `,` $w2_bias `)`)?
    (`scales` `(` $w13_scales^ `,` $w2_scales `)`)?
    (`input_scales` `(` $w13_input_scale^ `,` $w2_input_scale `)`)?
    `activation` `(` $activation `)`
    attr-dict `:` functional-type(operands, results)
  }];
}

def Moe_FusedExpertsOp : Moe_Op<"fused_experts",
                                [AttrSizedOperandSegments]> {
  let summary = "A MoE layer's experts, given routing already computed";
  let description = [{
    The experts of a Mixture-of-Experts layer without its router, for
    callers that route themselves (the seam of vLLM's modular MoE kernels,
    SGLang's MoE runner and Hugging Face's experts interface): each token of
    `hidden_states` `[T, H]` runs the gated MLP of the experts `ids` `[T, S]`
    names and sums their outputs weighted by `weights` `[T, S] f32`:

    ```
    y[t] = sum over slots s with 0 <= ids[t,s] < E of
             weights[t,s] * (act(x[t] w13[e]^T + w13_bias[e]) w2[e]^T + w2_bias[e])
    ```

    with e = ids[t, s], `w13` `[E, 2I, H]` (gate rows then up rows) and `w2`
    `[E, H, I]`. A slot whose id is outside [0, E) contributes nothing (the
    convention of expert parallelism, where experts held elsewhere are -1);
    an expert named by several slots of a token runs once per slot. The
    result has the type of `hidden_states`. `moe-decompose` rewrites this op
    into `moe.route`, two `moe.grouped_matmul`s and `moe.combine`. The
    activations, `swiglu` and the expert biases `biases(...)` are those of
    `moe.fused_moe`; FP8 weights take `scales(...)`, a `quantization` and,
    for static activation scales, `input_scales(...)` as there.

    Examples (Qwen3-30B-A3B's experts in bf16, and in FP8 with channel
    weight scales and static activation scales):

    ```mlir
    %y = moe.fused_experts %x, %ids, %w, %w13, %w2 activation(silu_and_mul)
         : (tensor<?x2048xbf16>, tensor<?x8xi32>, tensor<?x8xf32>,
            tensor<128x1536x2048xbf16>, tensor<128x2048x768xbf16>)
           -> tensor<?x2048xbf16>
    %z = moe.fused_experts %x, %ids, %w, %q13, %q2 scales(%s13, %s2)
           input_scales(%a13, %a2) activation(silu_and_mul)
           {quantization = #moe.quantization<weights = channel,
                                             activations = static_tensor>}
         : (tensor<?x2048xbf16>, tensor<?x8xi32>, tensor<?x8xf32>,
            tensor<128x1536x2048xf8E4M3FN>, tensor<128x2048x768xf8E4M3FN>,
            tensor<128x1536xf32>, tensor<128x2048xf32>, tensor<1xf32>,
            tensor<1xf32>) -> tensor<?x2048xbf16>
    ```
  }];
  let arguments = (ins
    Moe_FloatTensor:$hidden_states,
    Moe_I32Tensor:$ids,
    Moe_F32Tensor:$weights,
    Moe_GemmTensor:$w13,
    Moe_GemmTensor:$w2,
    Optional<Moe_FloatTensor>:$w13_bias,
    Optional<Moe_FloatTensor>:$w2_bias,
    Optional<Moe_ScaleTensor>:$w13_scales,
    Optional<Moe_ScaleTensor>:$w2_scales,
    Optional<Moe_F32Tensor>:$w13_input_scale,
    Optional<Moe_F32Tensor>:$w2_input_scale,
    Moe_ActivationAttr:$activation,
    OptionalAttr<Moe_SwigluAttr>:$swiglu,
    OptionalAttr<Moe_QuantizationAttr>:$quantization
  );
  let results = (outs Moe_FloatTensor:$output);
  let assemblyFormat = [{
    $hidden_states `,` $ids `,` $weights `,` $w13 `,` $w2
    (`biases` `(` $w13_bias^ `,` $w2_bias `)`)?
    (`scales` `(` $w13_scales^ `,` $w2_scales `)`)?
    (`input_scales` `(` $w13_input_scale^ `,` $w2_input_scale `)`)?
    `activation` `(` $activation `)` attr-dict `:`
    functional-type(operands, results)
  }];
}

//===----------------------------------------------------------------------===//
// Primitive level
//===----------------------------------------------------------------------===//

def Moe_GateOp : Moe_Op<"gate"> {
  let summary = "Router top-k: choose experts and their weights per token";
  let description = [{
    Turns `logits` `[T, E]` into `weights` `[T, S] f32` and `ids` `[T, S] i32`
    with S = `top_k` + `num_shared_experts` (see `#moe.router`):

    1. scores in fp32: `softmax` over E, or `sigmoid` per expert, where exp
       is the fixed routing polynomial (`RoutingMath.h`: Cephes expf in fmas,
       0 below -87, +inf above 88) rather than a library exp, and the softmax
       denominator adds 32 strided partial sums pairwise, so that every
       target computes bit-identical scores and picks the same ids. Softmax
       is exp(x - max) / sum over the token's non-NaN logits, with x - max
       taken as 0 where x equals the max: a NaN logit scores NaN and changes
       no other score; n logits of +inf score 1/n each and the other
       non-NaN ones 0; a row of -inf scores 1/E each; a row of NaN scores
       NaN. Sigmoid scores +inf 1, -inf 0 and NaN NaN;
    2. selection scores = scores + `correction_bias` (the bias affects
       selection only);
    3. with `num_groups` G > 1, each group of E/G experts scores the sum of its
       two best selection scores; only the `topk_groups` best groups stay
       eligible;
    4. the `top_k` eligible experts with the best selection scores are chosen,
       best first; ties go to the lower expert index; NaN ranks lowest, so an
       expert whose selection score is NaN (a NaN logit's) is chosen only
       when fewer than `top_k` eligible experts have a number, and a row of
       NaNs still yields `top_k` distinct, in-range ids;
    5. a chosen expert's weight is its unbiased score (0 where it is NaN);
       with `renormalize` the weights are divided by (their sum + 1e-20); then
       multiplied by `routed_scaling_factor`;
    6. slots `top_k .. S-1` hold the shared experts `E .. E+X-1`, weight 1.0.

    Example:

    ```mlir
    %w, %ids = moe.gate %logits bias %b {
        router = #moe.router<scoring = sigmoid, top_k = 8, num_groups = 8,
                             topk_groups = 4, renormalize = true,
                             routed_scaling_factor = 2.5>}
      : (tensor<?x256xf32>, tensor<256xf32>)
        -> (tensor<?x8xf32>, tensor<?x8xi32>)
    ```
  }];
  let arguments = (ins
    Moe_FloatTensor:$logits,
    Optional<Moe_F32Tensor>:$correction_bias,
    Moe_RouterAttr:$router
  );
  let results = (outs Moe_F32Tensor:$weights, Moe_I32Tensor:$ids);
  let assemblyFormat = [{
    $logits (`bias` $correction_bias^)? attr-dict `:`
    functional-type(operands, results)
  }];
}

def Moe_RouteOp : Moe_Op<"route"> {
  let summary = "Sort routed slots by expert and pad each expert to block_m";
  let description = [{
    Counting-sorts the slots `t * S + s` of `ids` `[T, S]` by expert id (stable:
    increasing slot index within an expert), pads each expert's run of rows to
    a multiple of `block_m` with the sentinel `T * S`, and returns:

    * `sorted_ids` `[C]`: the slot of each padded row, C = T*S +
      `num_experts` * (`block_m` - 1) the static capacity; rows past the
      padded count hold the sentinel too;
    * `expert_ids` `[ceil(C / block_m)]`: the expert of each block of rows
      (blocks past the padded count hold -1); experts with no slots get no
      blocks;
    * `num_padded`: the padded row count, a device value never read back.

    `num_experts` counts every id `ids` may hold, fused shared experts
    included. The capacity C is at most 2^31 - 1 (slot ids and rows are
    i32): for a static T exactly, for a dynamic one at T = 1, and at the
    passes' `tokens` and `tokens-max`.

    Example:

    ```mlir
    %sorted, %experts, %count = moe.route %ids {num_experts = 8, block_m = 64}
      : (tensor<?x2xi32>) -> (tensor<?xi32>, tensor<?xi32>, tensor<i32>)
    ```
  }];
  let arguments = (ins
    Moe_I32Tensor:$ids,
    Moe_SizeAttr:$num_experts,
    Moe_SizeAttr:$block_m
  );
  let results = (outs
    Moe_I32Tensor:$sorted_ids,
    Moe_I32Tensor:$expert_ids,
    Moe_CountTensor:$num_padded
  );
  let assemblyFormat = "$ids attr-dict `:` functional-type(operands, results)";
  let extraClassDeclaration = [{
    /// Rows of `sorted_ids` for `numSlots` routed slots: the static bound
    /// T*S + E*(block_m - 1), or dynamic when `numSlots` is.
    static int64_t getCapacity(int64_t numSlots, int64_t numExperts,
                               int64_t blockM);
  }];
}

def Moe_GroupedMatmulOp : Moe_Op<"grouped_matmul",
                                 [AttrSizedOperandSegments]> {
  let summary = "Per-expert matmul over routed rows with a fused epilogue";
  let description = [{
    For each padded routed row r of `sorted_ids` that is not padding
    (`sorted_ids[r] < T*S`), with e = `expert_ids[r / block_m]`:

    ```
    h[n] = sum_k A[src(r), k] * weights[e, n, k]      // fp32 accumulation
    ```

    * `input_order = token`: A is `[T, K]` and src(r) = `sorted_ids[r]` / S
      (`num_slots` = S); `input_order = sorted`: A is `[C, K]` in the order of
      `sorted_ids` and src(r) = r.
    * with `bias` `[E', N]` (f32 or a 16-bit float, read as fp32), h[n] +=
      bias[e, n], after any fp8 scaling below and before the activation.
    * `activation` (fp32): `silu_and_mul` / `gelu_and_mul` give
      `out[j] = act(h[j]) * h[j + N/2]`, halving N, and `clamped_swiglu`
      gpt-oss's activation of the pair (h[j], h[j + N/2]) with the
      parameters of `swiglu` (`#moe.swiglu`, given exactly with it); `none`
      keeps h.
    * with `routed_weights` `[T, S] f32`, the row is multiplied by the weight
      of its slot after the activation.
    * `output_order = sorted`: the result is `[C, N']` in the order of
      `sorted_ids`; `output_order = slot`: the result is `[T, S, N']`, row
      `sorted_ids[r]` receiving row r. Padding rows are never stored (their
      contents are unspecified).

    `weights` is `[E', N, K]` with E' the `num_experts` of the `moe.route`
    that produced the routing operands; A and `weights` share one element
    type; the result's element type may differ.

    FP8: with a `quantization`, A and `weights` are `f8E4M3FN` and
    `scales(%input_scales, %weight_scales)` are their fp32 scales: input
    scales `[rows, G]` (G = ceil(K/B) for `token_group`, 1 for `token` and
    `static_tensor`: `moe.quantize` broadcasts a static scale to every row,
    so that the kernels read one layout), weight scales as the quantization
    gives. The sum becomes, for `block`:

    ```
    h[n] = sum over K blocks b, in order, of
             (sum_{k in b} A[src(r), k] * weights[e, n, k])       // fp32
             * (input_scales[src(r), b] * weight_scales[e, n / B, b])
    ```

    and for `channel` (`tensor`) the whole fp32 sum times
    `input_scales[src(r), 0] * weight_scales[e, n]` (`[e]`), before the
    activation: one multiplication by the combined factor, which for
    static activation scales and tensor weights is the same for all rows
    of an expert (TensorRT-LLM's alpha).

    MXFP4 (weight-only): with `weights = mxfp4`, `weights` is i8 `[E', N,
    K/2]` of packed e2m1 values, A keeps its float type and only
    `weight_scales(%s)` (f8E8M0FNU `[E', N, K/32]`) is given; the sum is the
    float one over the decoded weights
    `e2m1(weights[e, n, k/2] >> 4 (k % 2)) * 2^(s[e, n, k/32] - 127)`. An optional `config` fixes the
    tiling that `moe-tile` uses; `input_map` and `weights_map` are the
    `moe.tensor_map`s of the input and the weights through which the config's
    TMA loads go (`moe-tma` adds them): tiles of block_k elements of K, one
    expert's rows of N per weight box.

    Example (the first GEMM of a layer):

    ```mlir
    %h = moe.grouped_matmul %x, %w13, %sorted, %experts, %count
           input(token) output(sorted) activation(silu_and_mul)
           {block_m = 64, num_slots = 2}
         : (tensor<?x4096xbf16>, tensor<8x28672x4096xbf16>, tensor<?xi32>,
            tensor<?xi32>, tensor<i32>) -> tensor<?x14336xbf16>
    %g = moe.grouped_matmul %x, %p13, %sorted, %experts, %count
           weight_scales(%s13) input(token) output(sorted)
           activation(silu_and_mul)
           {block_m = 64, num_slots = 4, quantization = #moe.quantization<
              weights = mxfp4, activations = none, block_size = 32>}
         : (tensor<?x2880xbf16>, tensor<32x5760x1440xi8>,
            tensor<32x5760x90xf8E8M0FNU>, tensor<?xi32>, tensor<?xi32>,
            tensor<i32>) -> tensor<?x2880xbf16>
    ```
  }];
  let arguments = (ins
    Moe_GemmTensor:$input,
    Moe_GemmTensor:$weights,
    Moe_I32Tensor:$sorted_ids,
    Moe_I32Tensor:$expert_ids,
    Moe_CountTensor:$num_padded,
    Optional<Moe_F32Tensor>:$routed_weights,
    Optional<Moe_FloatTensor>:$bias,
    Optional<Moe_F32Tensor>:$input_scales,
    Optional<Moe_ScaleTensor>:$weight_scales,
    Optional<Moe_TensorMapType>:$input_map,
    Optional<Moe_TensorMapType>:$weights_map,
    Moe_SizeAttr:$block_m,
    Moe_SizeAttr:$num_slots,
    Moe_RowOrderAttr:$input_order,
    Moe_RowOrderAttr:$output_order,
    DefaultValuedAttr<Moe_ActivationAttr, "::mlir::moe::Activation::none">:$activation,
    OptionalAttr<Moe_SwigluAttr>:$swiglu,
    OptionalAttr<Moe_GemmConfigAttr>:$config,
    OptionalAttr<Moe_QuantizationAttr>:$quantization
  );
  let results = (outs Moe_FloatTensor:$output);
  let assemblyFormat = [{
    $input `,` $weights `,` $sorted_ids `,` $expert_ids `,` $num_padded
    (`routed_weights` `(` $routed_weights^ `)`)?
    (`bias` `(` $bias^ `)`)?
    custom<GemmScales>($input_scales, $weight_scales)
    (`input_map` `(` $input_map^ `)`)?
    (`weights_map` `(` $weights_map^ `)`)?
    `input` `(` $input_order `)` `output` `(` $output_order `)`
    (`activation` `(` $activation^ `)`)?
    attr-dict `:` functional-type(operands, results)
  }];
  let extraClassDeclaration = [{
    /// The weights' type [E, N, K].
    ::mlir::RankedTensorType getWeightsType() {
      return ::llvm::cast<::mlir::RankedTensorType>(getWeights().getType());
    }
    /// Experts held in the weights (routed plus fused shared ones).
    int64_t getNumStoredExperts() { return getWeightsType().getDimSize(0); }
    /// The reduction size K (two values per byte of packed MXFP4 weights).
    int64_t getReductionSize() {
      return getWeightsType().getDimSize(2) *
             (getQuantizationAttr() ? getQuantizationAttr().getWeightPacking()
                                    : 1);
    }
    /// Checks input_map and weights_map against the operands and config.
    ::llvm::LogicalResult verifyTensorMaps();
    /// Whether the epilogue multiplies act(gate half) by the up half.
    bool isGated() { return getActivation() != Activation::none; }
    /// Output columns: N, or N / 2 after a gated activation.
    int64_t getOutputColumns() {
      int64_t n = getWeightsType().getDimSize(1);
      return isGated() ? n / 2 : n;
    }
  }];
}

def Moe_QuantizeOp : Moe_Op<"quantize", [AttrSizedOperandSegments]> {
  let summary = "fp8 (e4m3) quantization of rows, per group of columns";
  let description = [{
    Quantizes each row of `input` `[M, K]` per group of `group_size`
    columns (the last group may be shorter; `group_size` = K scales whole
    rows), dynamically: with amax the largest |x| of the group in fp32 (NaN
    when any x is NaN),

    ```
    scales[m, g] = max(amax, 1e-10) / 448          // NaN stays NaN
    output[m, k] = e4m3(input[m, k] / scales[m, k / group_size])
    ```

    where e4m3 rounds to the nearest `f8E4M3FN` value, ties to even,
    saturating finite values and infinities beyond +-448 to +-448 (NaN stays
    NaN), as Hopper's `cvt.rn.satfinite.e4m3x2.f32` does. `scales` is
    `[M, ceil(K / group_size)]`. With `rows(%n)`, rows from `%n` on are not
    computed (their contents are unspecified): the padded rows of a routing
    count a layer's sorted rows.

    With `scale(%s)` (`tensor<1xf32>`, a static per-tensor scale) there is no
    amax: every scale is the given one,

    ```
    scales[m, g] = s[0]
    output[m, k] = e4m3(input[m, k] / s[0])   // saturating: no clipping before
    ```

    so that the grouped matmuls read static scales as they read dynamic
    ones, `[M, 1]` per row: no kernel has a second layout, and M scales are
    little beside M x K codes. The scale is used as given, without the
    floor: a scale of 0 quantizes nonzero values to +-448 and zeros to NaN,
    a NaN scale every value to NaN.

    Examples (DeepSeek-V3's activations, one scale per 128 columns, and a
    static scale from a checkpoint):

    ```mlir
    %q, %s = moe.quantize %x {group_size = 128}
           : (tensor<?x7168xbf16>) -> (tensor<?x7168xf8E4M3FN>, tensor<?x56xf32>)
    %p, %t = moe.quantize %x scale(%a) {group_size = 7168}
           : (tensor<?x7168xbf16>, tensor<1xf32>)
             -> (tensor<?x7168xf8E4M3FN>, tensor<?x1xf32>)
    ```
  }];
  let arguments = (ins
    Moe_FloatTensor:$input,
    Optional<Moe_F32Tensor>:$scale,
    Optional<Moe_CountTensor>:$num_rows,
    Moe_SizeAttr:$group_size
  );
  let results = (outs Moe_Fp8Tensor:$output, Moe_F32Tensor:$scales);
  let assemblyFormat = [{
    $input (`scale` `(` $scale^ `)`)? (`rows` `(` $num_rows^ `)`)? attr-dict
    `:` functional-type(operands, results)
  }];
}

def Moe_TensorMapOp : Moe_Op<"tensor_map"> {
  let summary = "The TMA descriptor of a tensor";
  let description = [{
    The tensor map through which kernels load boxes of `source` by TMA (see
    `!moe.tensor_map`): built once on the host when the buffer behind
    `source` is known, however many tiles, experts or kernels read through
    it. `moe-tma` creates these for the grouped matmuls whose
    `#moe.gemm_config` loads an operand by TMA. The source's rows (its
    innermost dim) must be a multiple of 16 bytes, as TMA addresses them.

    Example:

    ```mlir
    %map = moe.tensor_map %w13 : tensor<8x28672x4096xbf16>
             -> !moe.tensor_map<bf16, box = [1, 128, 64], swizzle = 128>
    ```
  }];
  let arguments = (ins Moe_GemmTensor:$source);
  let results = (outs Moe_TensorMapType:$map);
  let assemblyFormat =
      "$source attr-dict `:` type($source) `->` qualified(type($map))";
  let extraClassDeclaration = [{
    ::mlir::moe::TensorMapType getMapType() {
      return ::llvm::cast<::mlir::moe::TensorMapType>(getMap().getType());
    }
  }];
}

def Moe_CombineOp : Moe_Op<"combine", [AttrSizedOperandSegments]> {
  let summary = "Sum each token's slot rows";
  let description = [{
    `output[t, h] = sum_s w[t, s] * rows[t, s, h]`, accumulated in fp32, where
    `rows` is `[T, S, H]` in slot order and w is `weights` `[T, S] f32`, or 1
    when the routed weights were applied by the GEMM epilogue. The result is
    `[T, H]` in the element type of `rows`.

    With `ids` `[T, S] i32` and `num_experts` E, only the slots whose id is
    in [0, E) are summed: the routing gave the others no row, so their rows
    hold nothing (see `moe.fused_experts`).

    Example:

    ```mlir
    %y = moe.combine %rows : (tensor<?x2x4096xbf16>) -> tensor<?x4096xbf16>
    %z = moe.combine %rows ids(%ids) {num_experts = 8}
           : (tensor<?x2x4096xbf16>, tensor<?x2xi32>) -> tensor<?x4096xbf16>
    ```
  }];
  let arguments = (ins
    Moe_FloatTensor:$rows,
    Optional<Moe_F32Tensor>:$weights,
    Optional<Moe_I32Tensor>:$ids,
    OptionalAttr<Moe_SizeAttr>:$num_experts
  );
  let results = (outs Moe_FloatTensor:$output);
  let assemblyFormat = [{
    $rows (`weights` `(` $weights^ `)`)? (`ids` `(` $ids^ `)`)? attr-dict `:`
    functional-type(operands, results)
  }];
}

//===----------------------------------------------------------------------===//
// Expert-parallel exchange
//===----------------------------------------------------------------------===//

def Moe_EpDispatchOp : Moe_Op<"ep_dispatch"> {
  let summary = "Send each routed slot's token row to the rank of its expert";
  let description = [{
    One rank's half of the exchange that brings the tokens of an
    expert-parallel layer (`#moe.expert_parallel<world = W, rank = R>`) to
    the experts they are routed to. Every rank has a receive buffer, laid
    out expert-major: L = E/W + X local experts (E = `num_experts` routed
    experts split evenly over the ranks, then X shared ones), each with one
    region per source rank of a static capacity of C rows, row (e, src, i)
    at index (e * W + src) * C + i. The operands `into(...)` are all W
    ranks' receive buffers, `[W, ...]` (on a GPU, the peers' symmetric
    memory):

    * `rows` `[W, L*W*C, H]`: token rows, in the type of `hidden_states`;
    * `weights` `[W, L*W*C] f32`: each row's routed weight;
    * `slots` `[W, L*W*C] i32`: each row's slot t * S + s on its source;
    * `counts` `[W, L, W] i32`: the rows of each (local expert, source).

    The results are those buffers after rank R's writes: for every slot
    (t, s) of `ids` `[T, S]`, in slot order, with g = ids[t, s], the row
    `hidden_states[t]`, `weights[t, s]` and t * S + s go to the next row of
    region (e, R) of rank d's buffer, where (d, e) = (g / (E/W), g % (E/W))
    for a routed expert g < E and (R, E/W + g - E) for a shared one (every
    rank holds them: they stay on the rank); then `counts[d, e, R]` is the
    number of rows sent there, for every d and e, 0 included. Nothing else
    changes, so that the W ranks' dispatches, each writing only its own
    source regions, together fill every rank's buffer, and no buffer is
    cleared between calls: the counts say which rows are current. Ids
    outside [0, E+X) are not sent.

    The capacity C is at least T, which makes overflow impossible by
    construction: the ids of a token are distinct (`moe.gate`'s are), so a
    source sends an expert at most one row per token. (Ids repeated within
    a token could send more than C rows to an expert: the rows past C are
    not written, and the count says how many were due.)

    Example (rank 0 of 2, E = 8 routed experts and one shared, T = 4):

    ```mlir
    %rows, %weights, %slots, %counts = moe.ep_dispatch %x, %ids, %w
        into(%rows0, %weights0, %slots0, %counts0)
        {expert_parallel = #moe.expert_parallel<world = 2, rank = 0>,
         num_experts = 8}
      : (tensor<4x64xbf16>, tensor<4x3xi32>, tensor<4x3xf32>,
         tensor<2x40x64xbf16>, tensor<2x40xf32>, tensor<2x40xi32>,
         tensor<2x5x2xi32>)
        -> (tensor<2x40x64xbf16>, tensor<2x40xf32>, tensor<2x40xi32>,
            tensor<2x5x2xi32>)
    ```
  }];
  let arguments = (ins
    Moe_FloatTensor:$hidden_states,
    Moe_I32Tensor:$ids,
    Moe_F32Tensor:$weights,
    Moe_FloatTensor:$recv_rows,
    Moe_F32Tensor:$recv_weights,
    Moe_I32Tensor:$recv_slots,
    Moe_I32Tensor:$recv_counts,
    Moe_SizeAttr:$num_experts,
    Moe_ExpertParallelAttr:$expert_parallel
  );
  let results = (outs
    Moe_FloatTensor:$rows,
    Moe_F32Tensor:$routed_weights,
    Moe_I32Tensor:$slots,
    Moe_I32Tensor:$counts
  );
  let assemblyFormat = [{
    $hidden_states `,` $ids `,` $weights `into` `(` $recv_rows `,`
    $recv_weights `,` $recv_slots `,` $recv_counts `)` attr-dict `:`
    functional-type(operands, results)
  }];
}

def Moe_EpRouteOp : Moe_Op<"ep_route"> {
  let summary = "The routing of a rank's receive buffer, from its counts";
  let description = [{
    Gives the grouped matmuls the rows of a rank's expert-major receive
    buffer (see `moe.ep_dispatch`) as `moe.route`'s results, without moving
    a row: each local expert's current rows, compacted and padded to
    `block_m`-row blocks. With `counts` `[L, W]` the rank's counts and C
    the capacity of a region, receive row r = (e * W + src) * C + i is
    current when i < clamp(counts[e, src], 0, C) (the rows past a region's
    count are stale or were never written, and a count outside [0, C]
    never indexes past its region). For each local expert e in order,
    `sorted_ids` lists its current rows, region (e, 0) to (e, W-1) and each
    region's rows in order, then the sentinel L*W*C (the receive rows'
    count) up to the next multiple of `block_m`:

    * `sorted_ids` `[N]`: N = L*W*C + L*(`block_m` - 1), `moe.route`'s
      capacity for L*W*C rows over L experts; entries past `num_padded`
      hold the sentinel too;
    * `expert_ids` `[ceil(N / block_m)]`: the local expert of each block
      (blocks past `num_padded` hold -1); an expert with no current rows
      gets no block;
    * `num_padded`: the padded row count, the sum over the experts of their
      current rows rounded up to `block_m`.

    The grouped matmuls then read the receive rows as token-order input
    (`num_slots = 1`, L*W*C "tokens" of one slot each, in blocks of
    `block_m`) and the received weights as routed weights `[L*W*C, 1]`.

    Example (L = 2, W = 2, C = 4, block_m = 4: N = 22; with counts
    [[3, 2], [0, 1]], expert 0's rows 0, 1, 2 and 4, 5 and expert 1's row
    12, each padded with the sentinel 16: `sorted_ids` = [0, 1, 2, 4, 5, 16,
    16, 16, 12, 16, ...], `expert_ids` = [0, 0, 1, -1, -1, -1],
    `num_padded` = 12):

    ```mlir
    %sorted, %experts, %count = moe.ep_route %counts {block_m = 4}
      : (tensor<2x2xi32>) -> (tensor<22xi32>, tensor<6xi32>, tensor<i32>)
    ```
  }];
  let arguments = (ins Moe_I32Tensor:$counts, Moe_SizeAttr:$block_m);
  let results = (outs
    Moe_I32Tensor:$sorted_ids,
    Moe_I32Tensor:$expert_ids,
    Moe_CountTensor:$num_padded
  );
  let assemblyFormat =
      "$counts attr-dict `:` functional-type(operands, results)";
}

def Moe_EpCombineOp : Moe_Op<"ep_combine"> {
  let summary = "Return each expert output row to its token's rank";
  let description = [{
    One rank's half of the exchange that brings an expert-parallel layer's
    expert outputs home: `rows` `[L*W*C, H]` are the rank's weighted expert
    outputs in the layout of its receive buffer (see `moe.ep_dispatch`),
    `slots` `[L*W*C] i32` and `counts` `[L, W] i32` that buffer's slots and
    counts, and `into(%returned)` is every rank's return buffer, `[W, C, S,
    H]`: a token's rows in slot order, as the single-device layer's second
    grouped matmul stores them. The result is `returned` after this rank's
    writes: for every local expert e, source rank src and i < counts[e,
    src] (at most C), row r = (e * W + src) * C + i goes to
    `returned[src, slots[r] / S, slots[r] % S]` (a slot past C * S is not
    written). Nothing else changes.

    Once every rank has returned its rows, each slot of each token holds
    exactly one row (a token's slots go to distinct experts), and a rank's
    `moe.combine` of `returned[R]` sums them in slot order, in fp32, as the
    single-device layer does: the layer's result is the same, bit for bit.

    Example:

    ```mlir
    %returned = moe.ep_combine %rows, %slots, %counts into(%returned0)
      : (tensor<40x64xbf16>, tensor<40xi32>, tensor<5x2xi32>,
         tensor<2x4x3x64xbf16>) -> tensor<2x4x3x64xbf16>
    ```
  }];
  let arguments = (ins
    Moe_FloatTensor:$rows,
    Moe_I32Tensor:$slots,
    Moe_I32Tensor:$counts,
    Moe_FloatTensor:$returned
  );
  let results = (outs Moe_FloatTensor:$output);
  let assemblyFormat = [{
    $rows `,` $slots `,` $counts `into` `(` $returned `)` attr-dict `:`
    functional-type(operands, results)
  }];
}

def Moe_EpSignalOp : Moe_Op<"ep_signal"> {
  let summary = "Tell every rank that this rank's stores before it are done";
  let description = [{
    One rank's half of the completion of an exchange of an expert-parallel
    layer (`#moe.expert_parallel<world = W, rank = R>`): `flags` `[W, W]
    i32` are every rank's flags of the exchange (on a GPU, the peers'
    symmetric memory), rank d's slice, row d, holding one counter per source
    rank. The result is `flags` after this rank added one to `flags[d, R]`
    for every rank d, its own included, after every store of the ops before
    it, with release semantics at system scope: a rank that reads the
    incremented counter with acquire semantics (`moe.ep_wait`) then sees
    every row, weight, slot, count or returned row that this rank stored
    into its buffers before the signal.

    The flags are zeroed once, when allocated, and never cleared: counter
    `flags[d, R]` is the number of calls whose signal R has sent to d, so
    that R's own counter `flags[R, R]`, which only R increments, is R's
    call number, the epoch that `moe.ep_wait` compares the other sources'
    counters with. No host stores an epoch, so the launches of a layer are
    the same at every call and a CUDA graph can replay them.

    On a GPU the op is one block of W threads: thread d issues a
    system-scope fence (`fence.acq_rel.sys`) and then adds one to element R
    of rank d's slice, reached through the flags' peer table, with an
    atomic at system scope (`atom.sys.add`): the fence and the atomic
    together release the stores of the kernels before it, which completed
    before it in the stream.

    Example (rank 0 of 2):

    ```mlir
    %signalled = moe.ep_signal into(%flags)
        {expert_parallel = #moe.expert_parallel<world = 2, rank = 0>}
      : (tensor<2x2xi32>) -> tensor<2x2xi32>
    ```
  }];
  let arguments = (ins Moe_I32Tensor:$flags,
                       Moe_ExpertParallelAttr:$expert_parallel);
  let results = (outs Moe_I32Tensor:$output);
  let assemblyFormat = [{
    `into` `(` $flags `)` attr-dict `:` functional-type(operands, results)
  }];
}

def Moe_EpWaitOp : Moe_Op<"ep_wait"> {
  let summary = "Wait until every rank signalled as often as this one";
  let description = [{
    The other half of `moe.ep_signal`: rank R of an expert-parallel layer
    (`#moe.expert_parallel<world = W, rank = R>`) waits until every source
    rank s has signalled `flags` `[W, W] i32` (every rank's flags of the
    exchange; R's own row, its slice, is what it reads) as often as R has
    itself, that is until `(int32)(flags[R, s] - flags[R, R]) >= 0` for
    every s, reading with acquire semantics at system scope. Its results
    are then `status` (see below) and the `guards` operands, unchanged:
    the buffers the phase reads after the wait (the receive buffers in the
    experts phase, the return buffer in the combine phase), which its ops
    take from these results, so that they depend on the wait in SSA form.

    `phase` says which phase waits: 1, the experts phase waiting for every
    rank's dispatch; 2, the combine phase waiting for every rank's experts
    phase. The wait is bounded: past about 10 seconds (a constant of the
    GPU lowering, `kEpWaitTimeoutNs`) with a source s still behind, it
    stores `[phase, s + 1]` into `status` `[2] i32` (a plain buffer of the
    rank, not an exchange buffer; `[0, 0]` means that nothing was missing)
    unless `status[0]` is already non-zero, which keeps the first failure,
    and gives up: the guarded buffers are then whatever the late source
    left there, but nothing hangs. Nothing clears the status but its
    caller, after reporting it.

    The counters may be reused at every call because no rank can get more
    than one call ahead of a peer, nor overwrite what a peer still reads:
    a rank's dispatch of call n + 1 follows its combine phase of call n,
    which waited for every rank's experts phase of call n, which each
    signalled after reading its received rows of call n; and a rank's
    experts phase of call n + 1, which stores into the return buffers,
    waits for every rank's dispatch of call n + 1, which each sent after
    its combine of call n had read them.

    On a GPU the op is one block of W threads: thread s spins on
    `flags[R, s]` (`ld.acquire.sys`, `nanosleep` between reads); the
    guarded results are their operands' buffers. On the CPU path, where
    the phases of the ranks run in turn, the check alone.

    Example (rank 0 of 2, the experts phase):

    ```mlir
    %status1, %rows1, %counts1 = moe.ep_wait %flags into(%status)
        guards(%rows, %counts)
        {expert_parallel = #moe.expert_parallel<world = 2, rank = 0>,
         phase = 1}
      : (tensor<2x2xi32>, tensor<2xi32>, tensor<2x40x64xbf16>,
         tensor<2x5x2xi32>)
        -> (tensor<2xi32>, tensor<2x40x64xbf16>, tensor<2x5x2xi32>)
    ```
  }];
  let arguments = (ins Moe_I32Tensor:$flags, Moe_I32Tensor:$status,
                       Variadic<AnyRankedTensor>:$guarded,
                       Moe_ExpertParallelAttr:$expert_parallel,
                       I64Attr:$phase);
  let results = (outs Moe_I32Tensor:$updated_status,
                      Variadic<AnyRankedTensor>:$ready);
  let assemblyFormat = [{
    $flags `into` `(` $status `)` (`guards` `(` $guarded^ `)`)? attr-dict `:`
    functional-type(operands, results)
  }];
  let extraClassDeclaration = [{
    /// The values of `phase`: the phase that waits.
    static constexpr int64_t kExpertsPhase = 1, kCombinePhase = 2;
  }];
}

#endif // MOE_DIALECT_MOE_IR_MOEOPS_TD
