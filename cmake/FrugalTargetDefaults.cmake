# Warnings and the precompiled LibTorch header, the same for every target of ours: one PCH is
# built (for the library) and reused, which needs identical compile options everywhere.
function(frugal_target_defaults target)
  # -fPIC everywhere (not CMake's -fPIC/-fPIE split): the library can go into a user's shared
  # library, and executables may reuse the library's precompiled header only with equal flags.
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic -fPIC)
  if(NOT FRUGAL_USE_PCH)
    return()
  endif()
  if(target STREQUAL "frugal")
    target_precompile_headers(frugal PRIVATE <torch/torch.h>)
  else()
    target_precompile_headers(${target} REUSE_FROM frugal)
  endif()
endfunction()
