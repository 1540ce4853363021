# Finds libddp's dependencies. Required: fmt, a CBLAS (OpenBLAS), zlib (CRC-32
# of checkpoints, gzip datasets), nlohmann-json, libjpeg-turbo and libpng
# (the image datasets). Optional: CUDA (+cuBLAS,
# cuDNN), NCCL, MPI, Gloo, oneDNN, GTest.

find_package(fmt REQUIRED)
find_package(OpenBLAS REQUIRED)  # cmake/FindOpenBLAS.cmake
find_package(Threads REQUIRED)
find_package(ZLIB REQUIRED)
find_package(nlohmann_json 3.10 REQUIRED)
# libjpeg-turbo's libjpeg API (cropped and DCT-scaled decoding) and libpng.
find_package(JPEG REQUIRED)
find_package(PNG REQUIRED)
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
  # libddp's cuDNN layers are written against the frontend's graph API
  # (header-only, PyPI wheel nvidia-cudnn-frontend), so cuDNN counts as found
  # only with it. See Note [cuDNN graph API] in kernels/cuda/cudnn_graph.h.
  if(CUDNN_FOUND)
    find_package(CudnnFrontend)  # cmake/FindCudnnFrontend.cmake; honours CUDNN_FRONTEND_ROOT
    if(NOT CudnnFrontend_FOUND)
      message(WARNING "cuDNN ${CUDNN_VERSION} found but not the cuDNN frontend headers "
                      "(pip install nvidia-cudnn-frontend, or -DCUDNN_FRONTEND_ROOT=...): "
                      "building without cuDNN, so CUDA convolutions, batch norm and fused "
                      "attention are unavailable")
    endif()
  endif()
  if(CUDNN_FOUND AND CudnnFrontend_FOUND)
    set(DDP_HAVE_CUDNN ON)
  else()
    set(DDP_HAVE_CUDNN OFF)
  endif()
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

# ---- cpp-httplib (the metrics tests' HTTP client) -----------------------------
# libddp's metrics server is its own event loop (Note [Metrics server under
# load]); the tests talk to it with cpp-httplib's client.
# Debian's libcpp-httplib-dev: a header plus libcpp-httplib.so, whose
# compile definitions (OpenSSL, zlib, brotli) come from pkg-config.
find_package(PkgConfig REQUIRED)
pkg_check_modules(HTTPLIB IMPORTED_TARGET cpp-httplib)
if(NOT HTTPLIB_FOUND)
  message(FATAL_ERROR "cpp-httplib not found: install libcpp-httplib-dev (tools/install_deps.sh)")
endif()

# ---- run-time path of cuDNN and NCCL -----------------------------------------
# Note [cuDNN and NCCL on the run-time path]
# cuDNN and NCCL may come from outside the system's library path, typically
# PyTorch's pip wheels (site-packages/nvidia/cudnn/lib, .../nccl/lib).
# Every program and libddp itself gets their folders in its RPATH (the build
# tree's and the installed one's), so nothing needs LD_LIBRARY_PATH and the
# copy that runs is the one the headers came from. cuDNN 9's libcudnn.so.9
# then opens its sub-libraries (libcudnn_graph.so.9, libcudnn_engines_*.so.9,
# libcudnn_ops.so.9, ...) with dlopen; those are looked up through
# libcudnn's own RUNPATH ($ORIGIN in NVIDIA's wheels and tarballs), not
# ours, so a libcudnn without it is reported here: it would then need its
# folder in LD_LIBRARY_PATH. ddp_info prints which files were loaded.
set(DDP_RUNTIME_LIBRARY_DIRS)
foreach(_dir ${CUDNN_LIBRARY_DIR} ${NCCL_LIBRARY_DIR})
  if(DDP_HAVE_CUDA AND _dir AND NOT _dir IN_LIST CMAKE_CXX_IMPLICIT_LINK_DIRECTORIES
     AND NOT _dir IN_LIST DDP_RUNTIME_LIBRARY_DIRS)
    list(APPEND DDP_RUNTIME_LIBRARY_DIRS ${_dir})
  endif()
endforeach()
list(APPEND CMAKE_BUILD_RPATH ${DDP_RUNTIME_LIBRARY_DIRS})
list(APPEND CMAKE_INSTALL_RPATH ${DDP_RUNTIME_LIBRARY_DIRS})
if(DDP_HAVE_CUDNN)
  file(READ_ELF ${CUDNN_LIBRARY} RUNPATH _cudnn_runpath RPATH _cudnn_rpath CAPTURE_ERROR _elf_error)
  if(NOT _elf_error AND NOT "${_cudnn_runpath}${_cudnn_rpath}" MATCHES "\\$ORIGIN")
    message(WARNING "${CUDNN_LIBRARY} has no $ORIGIN run-time path: cuDNN will not find its "
                    "sub-libraries unless ${CUDNN_LIBRARY_DIR} is in LD_LIBRARY_PATH")
  endif()
endif()
