find_package(Threads REQUIRED)
# Finds every third-party dependency; all come from Debian packages
# (tools/setup.sh installs them). Nothing is downloaded at build time.

find_package(Protobuf REQUIRED)
find_package(ONNX REQUIRED CONFIG)
# oneDNN: Debian's dnnl-config.cmake insists on OpenCL (its GPU runtime),
# which the CPU engine never uses, so find the library directly.
find_library(PIPEC_DNNL_LIB dnnl)
find_path(PIPEC_DNNL_INCLUDE oneapi/dnnl/dnnl.hpp)
if(NOT PIPEC_DNNL_LIB OR NOT PIPEC_DNNL_INCLUDE)
  message(FATAL_ERROR "oneDNN not found: apt-get install libdnnl-dev")
endif()
add_library(pipec_dnnl INTERFACE)
target_include_directories(pipec_dnnl SYSTEM INTERFACE ${PIPEC_DNNL_INCLUDE})
target_link_libraries(pipec_dnnl INTERFACE ${PIPEC_DNNL_LIB})
find_package(OpenMP REQUIRED)
# Open MPI (libopenmpi-dev): piperun's ranks under mpirun (runtime/Mpi.h).
find_package(MPI REQUIRED COMPONENTS C)
find_package(nlohmann_json REQUIRED CONFIG)
find_package(CLI11 REQUIRED CONFIG)

# OpenBLAS, OpenMP variant: kernels, oneDNN and BLAS then share one OpenMP
# runtime, and each device thread sets its own thread budget with
# omp_set_num_threads (a per-thread setting), which the pthread variant of
# OpenBLAS cannot honour.
find_library(PIPEC_OPENBLAS_LIB openblas
  PATHS /usr/lib/x86_64-linux-gnu/openblas-openmp /usr/lib/aarch64-linux-gnu/openblas-openmp
  NO_DEFAULT_PATH)
find_path(PIPEC_OPENBLAS_INCLUDE cblas.h
  PATHS /usr/include/x86_64-linux-gnu/openblas-openmp /usr/include/aarch64-linux-gnu/openblas-openmp
  NO_DEFAULT_PATH)
if(NOT PIPEC_OPENBLAS_LIB OR NOT PIPEC_OPENBLAS_INCLUDE)
  message(FATAL_ERROR "OpenBLAS (OpenMP variant) not found: apt-get install libopenblas-openmp-dev")
endif()
add_library(pipec_blas INTERFACE)
target_include_directories(pipec_blas SYSTEM INTERFACE ${PIPEC_OPENBLAS_INCLUDE})
target_link_libraries(pipec_blas INTERFACE ${PIPEC_OPENBLAS_LIB} OpenMP::OpenMP_CXX)

# FileCheck and lit for the text tests (llvm-14-tools).
find_program(PIPEC_FILECHECK FileCheck PATHS /usr/lib/llvm-14/bin NO_DEFAULT_PATH)
find_program(PIPEC_FILECHECK FileCheck)
find_file(PIPEC_LIT lit.py PATHS /usr/lib/llvm-14/build/utils/lit NO_DEFAULT_PATH)

# LLVM 14 (llvm-14-dev): the CPU runtime generates the loops of fused
# elementwise nodes with its ORC JIT (runtime/cpu/ElementwiseJit.h).
find_library(PIPEC_LLVM_LIB LLVM-14 PATHS /usr/lib/llvm-14/lib NO_DEFAULT_PATH)
find_path(PIPEC_LLVM_INCLUDE llvm/ExecutionEngine/Orc/LLJIT.h PATHS /usr/lib/llvm-14/include NO_DEFAULT_PATH)
if(NOT PIPEC_LLVM_LIB OR NOT PIPEC_LLVM_INCLUDE)
  message(FATAL_ERROR "LLVM 14 not found: apt-get install llvm-14-dev")
endif()
add_library(pipec_llvm INTERFACE)
target_include_directories(pipec_llvm SYSTEM INTERFACE ${PIPEC_LLVM_INCLUDE})
target_link_libraries(pipec_llvm INTERFACE ${PIPEC_LLVM_LIB})
