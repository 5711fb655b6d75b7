// convert-moe-to-gpu refuses a target the kernels cannot be built for, with
// a message, before #nvvm.target's verifier (which crashes on an empty chip)
// or the NVPTX back end (which aborts on a PTX ISA older than 8.0) sees it.
// RUN: not moe-opt %s --convert-moe-to-gpu="chip=''" 2>&1 | FileCheck %s --check-prefix=EMPTY
// RUN: not moe-opt %s --convert-moe-to-gpu="chip=sm_80" 2>&1 | FileCheck %s --check-prefix=SM80
// RUN: not moe-opt %s --convert-moe-to-gpu="chip='sm_90a},canonicalize{'" 2>&1 | FileCheck %s --check-prefix=BRACES
// RUN: not moe-opt %s --convert-moe-to-gpu="features=+ptx60" 2>&1 | FileCheck %s --check-prefix=PTX60
// RUN: not moe-opt %s --convert-moe-to-gpu="features=+ptx999" 2>&1 | FileCheck %s --check-prefix=PTX999
// RUN: moe-opt %s --convert-moe-to-gpu="features=''" | FileCheck %s --check-prefix=DEFAULT-PTX

// EMPTY: error: convert-moe-to-gpu: unknown chip '' (the kernels are for sm_90a)
// SM80: error: convert-moe-to-gpu: unknown chip 'sm_80' (the kernels are for sm_90a)
// BRACES: error: convert-moe-to-gpu: unknown chip 'sm_90a},canonicalize{' (the kernels are for sm_90a)
// PTX60: error: convert-moe-to-gpu: unsupported features '+ptx60': expected +ptxNN, a PTX ISA from 8.0 (+ptx80) that LLVM's NVPTX back end knows, or nothing for the chip's default
// PTX999: error: convert-moe-to-gpu: unsupported features '+ptx999'
// DEFAULT-PTX: gpu.module @moe_kernels [#nvvm.target<O = 3, chip = "sm_90a">]

func.func @router(%logits: tensor<?x8xf32>) -> (tensor<?x2xf32>, tensor<?x2xi32>) {
  %w, %ids = moe.gate %logits {router = #moe.router<scoring = softmax, top_k = 2>}
    : (tensor<?x8xf32>) -> (tensor<?x2xf32>, tensor<?x2xi32>)
  return %w, %ids : tensor<?x2xf32>, tensor<?x2xi32>
}
