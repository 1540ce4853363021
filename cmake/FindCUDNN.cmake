# Finds cuDNN 9 (or 8). Looks first, and only, in CUDNN_ROOT when one is given
# (CMake or environment variable; for a pip nvidia-cudnn-cu12/-cu13 wheel, the
# folder that `import nvidia.cudnn` names, holding lib/ and include/), else in
# the CUDA toolkit and the system. Sets CUDNN_FOUND, CUDNN_VERSION,
# CUDNN_LIBRARY, CUDNN_LIBRARY_DIR and target CUDNN::cudnn.
#
# Note [Versioned cuDNN and NCCL libraries]
# A pip wheel ships only the versioned file (lib/libcudnn.so.9, no
# libcudnn.so), while /usr/local/cuda may hold both. Searching name by name
# (CMake's default) would take the unversioned libcudnn.so of the toolkit
# before ever trying libcudnn.so.9 in the root the user named, and link
# against another copy than the headers found there. So the versioned names
# come first and NAMES_PER_DIR makes every directory try all names before
# the next one: the given root wins whichever names it has. cuDNN 9 opens
# its sub-libraries (libcudnn_graph, _engines_*, _ops, ...) with dlopen from
# its own directory; see Note [cuDNN and NCCL on the run-time path] in
# DdpDependencies.cmake for how the programs find that directory.
set(_cudnn_names libcudnn.so.9 libcudnn.so.8 cudnn)
set(_cudnn_roots ${CUDNN_ROOT} $ENV{CUDNN_ROOT})
if(_cudnn_roots)
  find_path(CUDNN_INCLUDE_DIR NAMES cudnn_version.h PATHS ${_cudnn_roots} PATH_SUFFIXES include
            NO_DEFAULT_PATH)
  find_library(CUDNN_LIBRARY NAMES ${_cudnn_names} NAMES_PER_DIR PATHS ${_cudnn_roots}
               PATH_SUFFIXES lib lib64 lib/x64 NO_DEFAULT_PATH)
endif()
# Not in the root (or none given): the toolkit, then the system.
set(_hints ${CUDAToolkit_LIBRARY_ROOT} /usr/local/cuda)
find_path(CUDNN_INCLUDE_DIR NAMES cudnn_version.h HINTS ${_hints} PATH_SUFFIXES include)
find_library(CUDNN_LIBRARY NAMES ${_cudnn_names} NAMES_PER_DIR HINTS ${_hints}
             PATH_SUFFIXES lib lib64 lib/x64)
if(CUDNN_INCLUDE_DIR)
  file(STRINGS ${CUDNN_INCLUDE_DIR}/cudnn_version.h _v REGEX "define CUDNN_(MAJOR|MINOR|PATCHLEVEL) ")
  string(REGEX REPLACE ".*CUDNN_MAJOR ([0-9]+).*" "\\1" _maj "${_v}")
  string(REGEX REPLACE ".*CUDNN_MINOR ([0-9]+).*" "\\1" _min "${_v}")
  string(REGEX REPLACE ".*CUDNN_PATCHLEVEL ([0-9]+).*" "\\1" _pat "${_v}")
  set(CUDNN_VERSION "${_maj}.${_min}.${_pat}")
endif()
if(CUDNN_LIBRARY)
  get_filename_component(CUDNN_LIBRARY_DIR ${CUDNN_LIBRARY} DIRECTORY)
endif()
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(CUDNN REQUIRED_VARS CUDNN_LIBRARY CUDNN_INCLUDE_DIR VERSION_VAR CUDNN_VERSION)
if(CUDNN_FOUND AND NOT TARGET CUDNN::cudnn)
  add_library(CUDNN::cudnn UNKNOWN IMPORTED)
  set_target_properties(CUDNN::cudnn PROPERTIES IMPORTED_LOCATION ${CUDNN_LIBRARY}
                        INTERFACE_INCLUDE_DIRECTORIES ${CUDNN_INCLUDE_DIR})
endif()
