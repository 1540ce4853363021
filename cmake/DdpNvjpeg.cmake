# The nvJPEG device decoder of the image datasets (DeviceDecodeLoader,
# ddp/data/device_decode.h; Note [Decoding on the GPU]). Included from
# src/CMakeLists.txt after the ddp target exists.
#
# DDP_WITH_NVJPEG: AUTO (build it when CUDA is on and nvjpeg.h is found), ON
# (fail without) or OFF. Only nvjpeg.h is needed to build: libddp does not
# link libnvjpeg but opens it at first use (Note [Loading nvJPEG] in
# src/data/device_jpeg_nvjpeg.cpp). The header is looked for in NVJPEG_ROOT
# (variable or environment) when given, else in the CUDA toolkit and in the
# PyPI wheel nvidia-nvjpeg (site-packages/nvidia/cu<major>/include, or
# nvidia/nvjpeg/include for CUDA 12's; tools/install_deps.sh installs it),
# and must be of the toolkit's major version.
#
# Only the decoder's own files see DDP_HAVE_NVJPEG and the header's folder
# (source-file properties), so turning it on or off recompiles those files,
# not libddp. Sets DDP_HAVE_NVJPEG.
set(DDP_WITH_NVJPEG AUTO CACHE STRING "Build the nvJPEG device decoder: AUTO, ON or OFF")
set_property(CACHE DDP_WITH_NVJPEG PROPERTY STRINGS AUTO ON OFF)

set(_nvjpeg_found OFF)
if(DDP_HAVE_CUDA AND NOT DDP_WITH_NVJPEG STREQUAL "OFF")
  set(_nvjpeg_roots ${NVJPEG_ROOT} $ENV{NVJPEG_ROOT})
  if(_nvjpeg_roots)
    find_path(NVJPEG_INCLUDE_DIR NAMES nvjpeg.h PATHS ${_nvjpeg_roots} PATH_SUFFIXES include
              NO_DEFAULT_PATH)
  else()
    set(_nvjpeg_hints)
    foreach(_py /usr/bin/python3 python3)
      execute_process(COMMAND ${_py} -c "import nvidia; print(';'.join(nvidia.__path__))"
                      OUTPUT_VARIABLE _nv OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET
                      RESULT_VARIABLE _rc)
      if(_rc EQUAL 0 AND _nv)
        foreach(_d ${_nv})
          list(APPEND _nvjpeg_hints ${_d}/cu${CUDAToolkit_VERSION_MAJOR} ${_d}/nvjpeg)
        endforeach()
      endif()
    endforeach()
    find_path(NVJPEG_INCLUDE_DIR NAMES nvjpeg.h
              HINTS ${CUDAToolkit_INCLUDE_DIRS} ${_nvjpeg_hints} PATH_SUFFIXES include)
  endif()
  if(NVJPEG_INCLUDE_DIR)
    file(STRINGS ${NVJPEG_INCLUDE_DIR}/nvjpeg.h _v REGEX "define NVJPEG_VER_(MAJOR|MINOR|PATCH) ")
    string(REGEX REPLACE ".*MAJOR ([0-9]+).*" "\\1" _maj "${_v}")
    string(REGEX REPLACE ".*MINOR ([0-9]+).*" "\\1" _min "${_v}")
    string(REGEX REPLACE ".*PATCH ([0-9]+).*" "\\1" _pat "${_v}")
    set(NVJPEG_VERSION "${_maj}.${_min}.${_pat}")
    if(_maj STREQUAL CUDAToolkit_VERSION_MAJOR)
      set(_nvjpeg_found ON)
    else()
      message(STATUS "nvJPEG ${NVJPEG_VERSION} (${NVJPEG_INCLUDE_DIR}) is not for CUDA "
                     "${CUDAToolkit_VERSION_MAJOR}: not used")
    endif()
  endif()
endif()
ddp_resolve_option(NVJPEG "${_nvjpeg_found}")

if(DDP_HAVE_NVJPEG)
  file(GLOB_RECURSE _nvjpeg_sources CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/*_nvjpeg.cpp)
  target_sources(ddp_cuda PRIVATE ${_nvjpeg_sources})  # Note [Loading CUDA when first used]
  set(_nvjpeg_defs DDP_HAVE_NVJPEG=1)
  # The wheel's library folder, the last place libddp looks (Note [Loading nvJPEG]).
  get_filename_component(_nvjpeg_lib ${NVJPEG_INCLUDE_DIR}/../lib ABSOLUTE)
  if(EXISTS ${_nvjpeg_lib}/libnvjpeg.so.${_maj})
    list(APPEND _nvjpeg_defs DDP_NVJPEG_BUILD_LIBRARY_DIR="${_nvjpeg_lib}")
  endif()
  set_source_files_properties(${_nvjpeg_sources} PROPERTIES
    COMPILE_DEFINITIONS "${_nvjpeg_defs}" INCLUDE_DIRECTORIES ${NVJPEG_INCLUDE_DIR})
  set_source_files_properties(${PROJECT_SOURCE_DIR}/src/data/device_decode.cpp PROPERTIES
    COMPILE_DEFINITIONS DDP_HAVE_NVJPEG=1)
  message(STATUS "nvJPEG device decoder: on (nvJPEG ${NVJPEG_VERSION} headers in "
                 "${NVJPEG_INCLUDE_DIR}; the library is opened at run time)")
else()
  message(STATUS "nvJPEG device decoder: off (DDP_WITH_NVJPEG=${DDP_WITH_NVJPEG})")
endif()
