# Finds LibTorch inside the PyPI torch wheel of ${FRUGAL_PYTHON}, unless Torch_DIR or
# CMAKE_PREFIX_PATH already lead to one.
macro(frugal_find_torch)
  # Without an architecture list, LibTorch's config probes for a GPU by compiling and running a
  # CUDA program: slow, and pointless where there is no GPU. Hopper and Ampere by default.
  if(NOT DEFINED TORCH_CUDA_ARCH_LIST AND NOT DEFINED ENV{TORCH_CUDA_ARCH_LIST})
    set(TORCH_CUDA_ARCH_LIST "8.0;9.0")
  endif()
  find_package(Torch QUIET)
  if(NOT Torch_FOUND)
    execute_process(
      COMMAND "${FRUGAL_PYTHON}" -c "import torch, sys; sys.stdout.write(torch.utils.cmake_prefix_path)"
      OUTPUT_VARIABLE _frugal_torch_prefix
      ERROR_VARIABLE _frugal_torch_error
      RESULT_VARIABLE _frugal_torch_rc)
    if(NOT _frugal_torch_rc EQUAL 0)
      message(FATAL_ERROR
        "Frugal: cannot import torch with FRUGAL_PYTHON='${FRUGAL_PYTHON}':\n${_frugal_torch_error}\n"
        "Run scripts/install-deps.sh and configure with -DFRUGAL_PYTHON=$HOME/.cache/frugal/venv/bin/python")
    endif()
    list(APPEND CMAKE_PREFIX_PATH "${_frugal_torch_prefix}")
    find_package(Torch REQUIRED)
  endif()
  # The wheel's CMake config lists kineto, which the wheel does not ship; nothing of ours uses it.
  message(STATUS "Frugal: LibTorch ${Torch_VERSION} from ${TORCH_INSTALL_PREFIX}")
endmacro()
