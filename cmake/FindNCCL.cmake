# Finds NCCL 2. Looks first, and only, in NCCL_ROOT when one is given (CMake
# or environment variable; for a pip nvidia-nccl-cu12/-cu13 wheel, the folder
# that `import nvidia.nccl` names), else in the CUDA toolkit and the system.
# Sets NCCL_FOUND, NCCL_VERSION, NCCL_LIBRARY, NCCL_LIBRARY_DIR and target
# NCCL::nccl. The versioned libnccl.so.2 is preferred in each directory:
# see Note [Versioned cuDNN and NCCL libraries] in FindCUDNN.cmake.
set(_nccl_names libnccl.so.2 nccl)
set(_nccl_roots ${NCCL_ROOT} $ENV{NCCL_ROOT})
if(_nccl_roots)
  find_path(NCCL_INCLUDE_DIR NAMES nccl.h PATHS ${_nccl_roots} PATH_SUFFIXES include NO_DEFAULT_PATH)
  find_library(NCCL_LIBRARY NAMES ${_nccl_names} NAMES_PER_DIR PATHS ${_nccl_roots}
               PATH_SUFFIXES lib lib64 NO_DEFAULT_PATH)
endif()
set(_hints ${CUDAToolkit_LIBRARY_ROOT} /usr/local/cuda)
find_path(NCCL_INCLUDE_DIR NAMES nccl.h HINTS ${_hints} PATH_SUFFIXES include)
find_library(NCCL_LIBRARY NAMES ${_nccl_names} NAMES_PER_DIR HINTS ${_hints} PATH_SUFFIXES lib lib64)
if(NCCL_INCLUDE_DIR)
  file(STRINGS ${NCCL_INCLUDE_DIR}/nccl.h _v REGEX "define NCCL_(MAJOR|MINOR|PATCH) ")
  string(REGEX REPLACE ".*NCCL_MAJOR ([0-9]+).*" "\\1" _maj "${_v}")
  string(REGEX REPLACE ".*NCCL_MINOR ([0-9]+).*" "\\1" _min "${_v}")
  string(REGEX REPLACE ".*NCCL_PATCH ([0-9]+).*" "\\1" _pat "${_v}")
  set(NCCL_VERSION "${_maj}.${_min}.${_pat}")
endif()
if(NCCL_LIBRARY)
  get_filename_component(NCCL_LIBRARY_DIR ${NCCL_LIBRARY} DIRECTORY)
endif()
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(NCCL REQUIRED_VARS NCCL_LIBRARY NCCL_INCLUDE_DIR VERSION_VAR NCCL_VERSION)
if(NCCL_FOUND AND NOT TARGET NCCL::nccl)
  add_library(NCCL::nccl UNKNOWN IMPORTED)
  set_target_properties(NCCL::nccl PROPERTIES IMPORTED_LOCATION ${NCCL_LIBRARY}
                        INTERFACE_INCLUDE_DIRECTORIES ${NCCL_INCLUDE_DIR})
endif()
