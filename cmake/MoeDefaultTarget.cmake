# Reads the default target (include/moe/Target/DefaultTarget.h, the one
# definition) into CMake variables, for what is configured without a C++
# compiler reading the header: the Python package's defaults (also in the
# runtime-only build, which has no MLIR) and the CUDA toolkit the build
# looks in. Sets MOE_DEFAULT_CHIP, MOE_DEFAULT_FEATURES, MOE_DEFAULT_NUM_SMS,
# MOE_DEFAULT_DEVICE_NAME and MOE_DEFAULT_CUDA_TOOLKIT; CMake re-runs when
# the header changes.

set(moe_default_target_header
    ${CMAKE_CURRENT_LIST_DIR}/../include/moe/Target/DefaultTarget.h)
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS
             ${moe_default_target_header})
file(READ ${moe_default_target_header} moe_default_target_text)

# Sets `variable` to the value of the header's `inline constexpr ... name...
# = value;`, without the quotes of a string.
function(moe_read_default_target variable name)
  set(pattern "inline constexpr [a-z0-9_]+ ${name}(\\[\\])? = (\"[^\"]*\"|[0-9]+);")
  if(NOT moe_default_target_text MATCHES "${pattern}")
    message(FATAL_ERROR "${moe_default_target_header}: no `${name}`")
  endif()
  string(REGEX REPLACE "^\"(.*)\"$" "\\1" value "${CMAKE_MATCH_2}")
  set(${variable} "${value}" PARENT_SCOPE)
endfunction()

moe_read_default_target(MOE_DEFAULT_CHIP kDefaultChip)
moe_read_default_target(MOE_DEFAULT_FEATURES kDefaultFeatures)
moe_read_default_target(MOE_DEFAULT_NUM_SMS kDefaultNumSMs)
moe_read_default_target(MOE_DEFAULT_DEVICE_NAME kDefaultDeviceName)
moe_read_default_target(MOE_DEFAULT_CUDA_TOOLKIT kDefaultCudaToolkit)
