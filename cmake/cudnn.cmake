# cmake/cudnn.cmake — cuDNN and the cudnn-frontend headers, for causal attention on cuDNN's fused flash-attention
# graphs (src/tensor/cuda/cudnn). Included by src/tensor when CUDA is enabled.
#
# cuDNN: cudnn.h and libcudnn from the CUDA toolkit's directories, the system's, or ZW_CUDNN_ROOT. The frontend is
# header-only and not packaged by Debian: ZW_CUDNN_FRONTEND_INCLUDE names its include directory; by default the
# copy tools/cudnn-frontend.sh fetches (the pinned nvidia-cudnn-frontend wheel from PyPI, unpacked into
# ${ZW_CACHE:-~/.cache/zerowire}) or one placed under .deps/cudnn-frontend/include (how a machine without PyPI gets
# it). Sets ZW_CUDNN_ENABLED and, when on, the target zw_cudnn (includes and library). Without either part the
# tensor layer builds without the cuDNN path (attention_cudnn_none.cc), saying which part was missing.
set(ZW_CUDNN_ENABLED OFF)
set(ZW_CUDNN_FRONTEND_VERSION 1.32.0)
if(DEFINED ENV{ZW_CACHE})
  set(_zw_cache "$ENV{ZW_CACHE}")
else()
  set(_zw_cache "$ENV{HOME}/.cache/zerowire")
endif()
find_path(ZW_CUDNN_FRONTEND_INCLUDE cudnn_frontend.h
          HINTS "${PROJECT_SOURCE_DIR}/.deps/cudnn-frontend/include"
                "${_zw_cache}/cudnn-frontend-${ZW_CUDNN_FRONTEND_VERSION}/include"
          NO_DEFAULT_PATH)
set(ZW_CUDNN_ROOT "" CACHE PATH "where cuDNN is installed (include/, lib/), when not beside the CUDA toolkit")
find_path(ZW_CUDNN_INCLUDE cudnn.h HINTS ${ZW_CUDNN_ROOT}/include ${CUDAToolkit_INCLUDE_DIRS}
          PATH_SUFFIXES x86_64-linux-gnu)
find_library(ZW_CUDNN_LIBRARY cudnn HINTS ${ZW_CUDNN_ROOT}/lib ${ZW_CUDNN_ROOT}/lib64 ${CUDAToolkit_LIBRARY_DIR}
             PATH_SUFFIXES x86_64-linux-gnu)
if(NOT ZW_CUDNN_INCLUDE OR NOT ZW_CUDNN_LIBRARY)
  message(STATUS "zerowire: attention on cuDNN not built (cudnn.h or libcudnn not found; set ZW_CUDNN_ROOT)")
elseif(NOT ZW_CUDNN_FRONTEND_INCLUDE)
  message(STATUS "zerowire: attention on cuDNN not built (the cudnn-frontend headers were not found: run "
                 "tools/cudnn-frontend.sh, or set ZW_CUDNN_FRONTEND_INCLUDE)")
else()
  set(ZW_CUDNN_ENABLED ON)
  add_library(zw_cudnn INTERFACE)
  target_include_directories(zw_cudnn SYSTEM INTERFACE ${ZW_CUDNN_FRONTEND_INCLUDE} ${ZW_CUDNN_INCLUDE})
  # The frontend compiles some of its own engines at run time (NVRTC), even where only SDPA is used.
  target_link_libraries(zw_cudnn INTERFACE ${ZW_CUDNN_LIBRARY} CUDA::nvrtc)
  message(STATUS "zerowire: attention on cuDNN (${ZW_CUDNN_LIBRARY}, frontend headers ${ZW_CUDNN_FRONTEND_INCLUDE})")
endif()
