# Finds oneDNN (libdnnl). Debian's dnnl-config.cmake insists on OpenCL
# development files even for CPU use, so this module looks for the header and
# library directly. Sets DNNL_FOUND, DNNL_VERSION and target DNNL::dnnl.
find_path(DNNL_INCLUDE_DIR NAMES dnnl.hpp HINTS ${DNNL_ROOT} ENV DNNL_ROOT PATH_SUFFIXES include)
find_library(DNNL_LIBRARY NAMES dnnl HINTS ${DNNL_ROOT} ENV DNNL_ROOT PATH_SUFFIXES lib lib64)
if(DNNL_INCLUDE_DIR AND EXISTS ${DNNL_INCLUDE_DIR}/oneapi/dnnl/dnnl_version.h)
  file(STRINGS ${DNNL_INCLUDE_DIR}/oneapi/dnnl/dnnl_version.h _v REGEX "define DNNL_VERSION_(MAJOR|MINOR|PATCH) ")
  string(REGEX REPLACE ".*DNNL_VERSION_MAJOR ([0-9]+).*" "\\1" _maj "${_v}")
  string(REGEX REPLACE ".*DNNL_VERSION_MINOR ([0-9]+).*" "\\1" _min "${_v}")
  string(REGEX REPLACE ".*DNNL_VERSION_PATCH ([0-9]+).*" "\\1" _pat "${_v}")
  set(DNNL_VERSION "${_maj}.${_min}.${_pat}")
endif()
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(DNNL REQUIRED_VARS DNNL_LIBRARY DNNL_INCLUDE_DIR VERSION_VAR DNNL_VERSION)
if(DNNL_FOUND AND NOT TARGET DNNL::dnnl)
  add_library(DNNL::dnnl UNKNOWN IMPORTED)
  set_target_properties(DNNL::dnnl PROPERTIES IMPORTED_LOCATION ${DNNL_LIBRARY}
                        INTERFACE_INCLUDE_DIRECTORIES ${DNNL_INCLUDE_DIR})
endif()
