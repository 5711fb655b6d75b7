//===- MoeTypes.td - moe types -----------------------------*- tablegen -*-===//

#ifndef MOE_DIALECT_MOE_IR_MOETYPES_TD
#define MOE_DIALECT_MOE_IR_MOETYPES_TD

include "moe/Dialect/Moe/IR/MoeDialect.td"
include "mlir/IR/AttrTypeBase.td"

def Moe_TensorMapType : TypeDef<Moe_Dialect, "TensorMap"> {
  let mnemonic = "tensor_map";
  let summary = "A TMA descriptor over a tensor, passed to kernels by value";
  let description = [{
    A CUDA tensor map (`CUtensorMap`) over a tensor of `elementType`: its TMA
    copies move boxes of `box` elements (outermost first, like the tensor's
    dims) into shared memory laid out with a `swizzle`-byte span (0, 32, 64
    or 128). The runtime encodes it once per buffer on the host and kernels
    take it by value, as a grid constant; a kernel never builds one.

    Example (the weight tiles of a gated GEMM: one expert, 64 rows of N, 64
    elements of K, 128-byte swizzle):

    ```mlir
    !moe.tensor_map<bf16, box = [1, 64, 64], swizzle = 128>
    ```
  }];
  let parameters = (ins
    "::mlir::Type":$elementType,
    ArrayRefParameter<"int64_t">:$box,
    "int64_t":$swizzle
  );
  let assemblyFormat = [{
    `<` $elementType `,` `box` `=` `[` $box `]` `,` `swizzle` `=` $swizzle `>`
  }];
  let genVerifyDecl = 1;
}

#endif // MOE_DIALECT_MOE_IR_MOETYPES_TD
