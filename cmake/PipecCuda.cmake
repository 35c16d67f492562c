# The CUDA backend (runtime/cuda/, docs/cuda.md): built whenever the CUDA
# toolkit is present (nvcc, cuBLAS, cuDNN, NCCL; /usr/local/cuda or
# CUDAToolkit_ROOT), for sm_80 and sm_90. Without it the backend is off and
# `piperun --device cuda` says so. PIPEC_CUDA=OFF turns it off by hand.
option(PIPEC_CUDA "Build the CUDA backend when the CUDA toolkit is present" ON)
set(PIPEC_HAVE_CUDA OFF)
if(PIPEC_CUDA AND (PIPEC_SANITIZE OR PIPEC_FUZZ))
  # ASan's shadow memory and the CUDA driver's mappings do not mix, and the
  # sanitizer and fuzz builds are about the host code.
  message(STATUS "pipec: CUDA backend off in the sanitizer and fuzz builds")
elseif(PIPEC_CUDA)
  if(NOT DEFINED CUDAToolkit_ROOT AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CUDAToolkit_ROOT /usr/local/cuda)
  endif()
  if(NOT CMAKE_CUDA_COMPILER AND DEFINED CUDAToolkit_ROOT AND EXISTS ${CUDAToolkit_ROOT}/bin/nvcc)
    set(CMAKE_CUDA_COMPILER ${CUDAToolkit_ROOT}/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 80 90)
    endif()
    enable_language(CUDA)
    # CMake 3.25 does not know nvcc 13's C++20 flag; the sources are C++20
    # (and CUDA sources take the project's C++ dialect). Relaxed constexpr:
    # the bodies call std:: constexpr functions.
    set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
    set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
    list(APPEND CMAKE_CUDA_COMPILE_FEATURES cuda_std_20)
    set(CMAKE_CUDA_STANDARD 20)
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    string(APPEND CMAKE_CUDA_FLAGS " --expt-relaxed-constexpr")
    find_package(CUDAToolkit)
    find_library(PIPEC_CUDNN_LIB cudnn HINTS ${CUDAToolkit_LIBRARY_DIR} ${CUDAToolkit_ROOT}/lib64)
    find_library(PIPEC_NCCL_LIB nccl HINTS ${CUDAToolkit_LIBRARY_DIR} ${CUDAToolkit_ROOT}/lib64)
    find_path(PIPEC_CUDNN_INCLUDE cudnn.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
    find_path(PIPEC_NCCL_INCLUDE nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
    if(CUDAToolkit_FOUND AND PIPEC_CUDNN_LIB AND PIPEC_NCCL_LIB AND PIPEC_CUDNN_INCLUDE AND PIPEC_NCCL_INCLUDE)
      set(PIPEC_HAVE_CUDA ON)
      message(STATUS "pipec: CUDA backend on (CUDA ${CUDAToolkit_VERSION}, architectures ${CMAKE_CUDA_ARCHITECTURES})")
    else()
      message(STATUS "pipec: CUDA backend off: the toolkit lacks cuDNN or NCCL "
                     "(cudnn: ${PIPEC_CUDNN_LIB}, nccl: ${PIPEC_NCCL_LIB})")
    endif()
  else()
    message(STATUS "pipec: CUDA backend off: no CUDA compiler (nvcc) found; set CUDAToolkit_ROOT")
  endif()
endif()
