# Finds libddp's dependencies. Required: fmt, a CBLAS (OpenBLAS), zlib (CRC-32
# of checkpoints, gzip datasets), nlohmann-json. Optional: CUDA (+cuBLAS,
# cuDNN), NCCL, MPI, Gloo, oneDNN, GTest.

find_package(fmt REQUIRED)
find_package(OpenBLAS REQUIRED)  # cmake/FindOpenBLAS.cmake
find_package(Threads REQUIRED)
find_package(ZLIB REQUIRED)
find_package(nlohmann_json 3.10 REQUIRED)
find_package(GTest)  # tests only
find_package(DNNL)  # cmake/FindDNNL.cmake
set(DDP_HAVE_DNNL ${DNNL_FOUND})

# ---- CUDA ------------------------------------------------------------------
set(_cuda_found OFF)
if(NOT DDP_WITH_CUDA STREQUAL "OFF")
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    set(CMAKE_CUDA_ARCHITECTURES ${DDP_CUDA_ARCHS} CACHE STRING "" FORCE)
    enable_language(CUDA)
    find_package(CUDAToolkit)
    if(CUDAToolkit_FOUND)
      set(_cuda_found ON)
    endif()
  endif()
endif()
ddp_resolve_option(CUDA "${_cuda_found}")
if(DDP_HAVE_CUDA)
  # CMake 3.25 does not know nvcc's C++20 flag (nvcc >= 12 has it): teach it.
  if(NOT CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
    set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
    set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
    list(APPEND CMAKE_CUDA_COMPILE_FEATURES cuda_std_20)
  endif()
  set(CMAKE_CUDA_STANDARD 20)
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
  find_package(CUDNN)  # cmake/FindCUDNN.cmake; honours CUDNN_ROOT
  set(DDP_HAVE_CUDNN ${CUDNN_FOUND})
endif()

# ---- NCCL ------------------------------------------------------------------
set(_nccl_found OFF)
if(DDP_HAVE_CUDA AND NOT DDP_WITH_NCCL STREQUAL "OFF")
  find_package(NCCL)  # cmake/FindNCCL.cmake; honours NCCL_ROOT
  set(_nccl_found ${NCCL_FOUND})
endif()
ddp_resolve_option(NCCL "${_nccl_found}")

# ---- MPI -------------------------------------------------------------------
set(_mpi_found OFF)
if(NOT DDP_WITH_MPI STREQUAL "OFF")
  find_package(MPI COMPONENTS C)
  set(_mpi_found ${MPI_C_FOUND})
endif()
ddp_resolve_option(MPI "${_mpi_found}")

# ---- Gloo ------------------------------------------------------------------
set(_gloo_found OFF)
if(NOT DDP_WITH_GLOO STREQUAL "OFF")
  find_package(Gloo CONFIG QUIET)
  set(_gloo_found ${Gloo_FOUND})
endif()
ddp_resolve_option(GLOO "${_gloo_found}")

# ---- cpp-httplib (the metrics server, src/metrics/server.cpp) ----------------
# Debian's libcpp-httplib-dev: a header plus libcpp-httplib.so, whose
# compile definitions (OpenSSL, zlib, brotli) come from pkg-config.
find_package(PkgConfig REQUIRED)
pkg_check_modules(HTTPLIB IMPORTED_TARGET cpp-httplib)
if(NOT HTTPLIB_FOUND)
  message(FATAL_ERROR "cpp-httplib not found: install libcpp-httplib-dev (tools/install_deps.sh)")
endif()
