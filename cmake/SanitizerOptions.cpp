//===- SanitizerOptions.cpp - Sanitizer defaults of the MOE_SANITIZE build ===//
//
// Compiled into every target of the sanitizer build, so that its programs
// behave alike however they are started; ASAN_OPTIONS and UBSAN_OPTIONS
// still override. A Python extension cannot set them (the ASan runtime is
// preloaded and initialized before it loads): test/lit.cfg.py passes the
// same ones to python.
//
//===----------------------------------------------------------------------===//

// allow_user_poisoning=0: LLVM's BumpPtrAllocator poisons a new slab and
// unpoisons what it hands out, but only where compiled with ASan. Our code,
// inlining it from the headers, poisons the slabs of an MLIRContext's
// allocators, from which Debian's uninstrumented libMLIR.so then allocates
// without unpoisoning: each of its writes there would be reported as a
// use-after-poison.
// abort_on_error=1: a report aborts instead of exiting with status 1, which
// a test expecting a tool to fail (`not moe-opt ...`) would take for the
// error it expects.
// allocator_may_return_null=1: an allocation too large for ASan's allocator
// fails as malloc does, instead of ending the program
// (test/Python/memory-error.py checks that numpy's MemoryError comes
// through).
// verify_asan_link_order=0: the shared ASan runtime (CMakeLists.txt says
// why) comes after libstdc++ in a libFuzzer program's libraries, which
// intercepts nothing ASan needs first.
extern "C" __attribute__((used)) const char *__asan_default_options() {
  return "allow_user_poisoning=0:abort_on_error=1:allocator_may_return_null=1:"
         "verify_asan_link_order=0";
}

extern "C" __attribute__((used)) const char *__ubsan_default_options() {
  return "print_stacktrace=1:abort_on_error=1";
}
