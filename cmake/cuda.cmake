# cmake/cuda.cmake — enables the CUDA language for the GPU kernels, tests and benchmarks.
#
# Included by the top-level CMakeLists.txt right after find_package(CUDAToolkit). When the toolkit and nvcc are
# both found it enables CUDA (sm_90 by default, for H100/H200; override with -DCMAKE_CUDA_ARCHITECTURES=...),
# builds device code with -O3 and sets ZW_CUDA_ENABLED. Without nvcc it does nothing, so the project still
# configures and builds on CPU-only machines; the GPU folders (src/kernels/cuda, src/tensor/cuda, tests/gpu,
# bench/gpu) test ZW_CUDA_ENABLED themselves.
# Non-goals: choosing a CUDA host compiler other than the C++ one, multi-architecture fat binaries by default.
include(CheckLanguage)

set(ZW_CUDA_ENABLED OFF)
if(CUDAToolkit_FOUND)
  if(NOT CMAKE_CUDA_COMPILER AND CUDAToolkit_NVCC_EXECUTABLE AND EXISTS "${CUDAToolkit_NVCC_EXECUTABLE}")
    set(CMAKE_CUDA_COMPILER "${CUDAToolkit_NVCC_EXECUTABLE}")
  endif()
  check_language(CUDA)
endif()

if(CUDAToolkit_FOUND AND CMAKE_CUDA_COMPILER)
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES 90)
  endif()
  if(NOT CMAKE_CUDA_HOST_COMPILER)
    set(CMAKE_CUDA_HOST_COMPILER "${CMAKE_CXX_COMPILER}")
  endif()
  enable_language(CUDA)
  # C++20 for device code as for host code. CMake 3.25 does not know nvcc's C++20 flag yet: teach it.
  if(NOT CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
    set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
    set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
  endif()
  set(CMAKE_CUDA_STANDARD 20)
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
  set(CMAKE_CUDA_EXTENSIONS OFF)
  add_compile_options($<$<COMPILE_LANGUAGE:CUDA>:-O3>)
  # nvcc's front end flags `status_ = Status(...)` (an assignment returning a [[nodiscard]] class by reference) as
  # an ignored result; gcc and clang do not. Silence that one false positive.
  add_compile_options("$<$<COMPILE_LANGUAGE:CUDA>:SHELL:-diag-suppress 2810>")
  set(ZW_CUDA_ENABLED ON)
  message(STATUS "zerowire: CUDA enabled (nvcc ${CMAKE_CUDA_COMPILER_VERSION}, architectures "
                 "${CMAKE_CUDA_ARCHITECTURES})")
else()
  message(STATUS "zerowire: CUDA kernels not built (no CUDA toolkit or nvcc found)")
endif()

# The directory-wide host flags (-Wall -Wextra ...) are not nvcc options: in the calling directory, restrict every
# plain option to non-CUDA sources and hand the warnings to the host compiler through -Xcompiler instead.
function(zw_cuda_restrict_directory_options)
  get_property(opts DIRECTORY PROPERTY COMPILE_OPTIONS)
  set(wrapped)
  set(host_warnings)
  foreach(opt IN LISTS opts)
    if(opt MATCHES "^\\$<")
      list(APPEND wrapped "${opt}")
    else()
      list(APPEND wrapped "$<$<NOT:$<COMPILE_LANGUAGE:CUDA>>:${opt}>")
      if(opt MATCHES "^-W")
        list(APPEND host_warnings "${opt}")
      endif()
    endif()
  endforeach()
  if(host_warnings)
    list(JOIN host_warnings "," joined)
    list(APPEND wrapped "$<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=${joined}>")
  endif()
  set_property(DIRECTORY PROPERTY COMPILE_OPTIONS "${wrapped}")
endfunction()
