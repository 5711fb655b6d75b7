# Fully static link mode: the tools link the static MLIR and LLVM archives so
# that moe-opt runs on a machine without LLVM (the GPU machine), needing only
# libc, libstdc++, libz and libzstd there.
#
# Debian builds its static MLIR archives for a libLLVM.so world: every
# imported MLIR target names `LLVM` (the dylib) in its link interface and a few
# (ExecutionEngine, JitRunner, MlirOptMain, ...) name `MLIR` (libMLIR.so).
# Linking either beside the archives loads a second copy of MLIR/LLVM ("Option
# registered more than once"), so both are replaced by the static LLVM
# component archives here.

set(LLVM_LINK_LLVM_DYLIB OFF)
set(MLIR_LINK_MLIR_DYLIB OFF)

# Every LLVM component archive, except those that pull libraries the GPU
# machine lacks (libedit, libxml2, libpfm, curl) and the tool libraries that
# are themselves linked against libLLVM.so.
set(MOE_STATIC_LLVM_LIBS)
foreach(lib IN LISTS LLVM_AVAILABLE_LIBS)
  if(NOT lib MATCHES "^LLVM.+" OR NOT TARGET ${lib} OR lib MATCHES
     "^LLVM(LineEditor|WindowsManifest|Debuginfod|Exegesis.*|FuzzerCLI|FuzzMutate)$")
    continue()
  endif()
  get_target_property(type ${lib} TYPE)
  get_target_property(deps ${lib} INTERFACE_LINK_LIBRARIES)
  if(type STREQUAL "STATIC_LIBRARY" AND NOT "LLVM" IN_LIST deps)
    list(APPEND MOE_STATIC_LLVM_LIBS ${lib})
  endif()
endforeach()

foreach(target IN LISTS MLIR_EXPORTED_TARGETS)
  if(NOT TARGET ${target})
    continue()
  endif()
  get_target_property(type ${target} TYPE)
  if(NOT type STREQUAL "STATIC_LIBRARY")
    continue()
  endif()
  get_target_property(libs ${target} INTERFACE_LINK_LIBRARIES)
  if(NOT libs)
    continue()
  endif()
  list(LENGTH libs before)
  list(REMOVE_ITEM libs LLVM "$<LINK_ONLY:LLVM>")
  list(LENGTH libs after)
  if(NOT before EQUAL after)
    list(APPEND libs ${MOE_STATIC_LLVM_LIBS})
  endif()
  list(REMOVE_ITEM libs MLIR "$<LINK_ONLY:MLIR>")
  set_target_properties(${target} PROPERTIES INTERFACE_LINK_LIBRARIES "${libs}")
endforeach()

# LLVMExtensions names Polly, which Debian does not ship as an archive; no
# tool here registers Polly's passes.
get_target_property(extension_libs LLVMExtensions INTERFACE_LINK_LIBRARIES)
list(REMOVE_ITEM extension_libs Polly)
set_target_properties(LLVMExtensions PROPERTIES
                      INTERFACE_LINK_LIBRARIES "${extension_libs}")

# LLVMSupport names libz3.so for its optional SMT solver, which nothing here
# calls: keep it (and any other unused shared library) out of DT_NEEDED.
add_link_options("LINKER:--as-needed")
