# Finds OpenBLAS with its CBLAS header. Sets OpenBLAS_FOUND, OpenBLAS_VERSION
# and the imported target OpenBLAS::OpenBLAS. Honours OpenBLAS_ROOT.
find_path(OpenBLAS_INCLUDE_DIR NAMES cblas.h
  HINTS ${OpenBLAS_ROOT} ENV OpenBLAS_ROOT
  PATH_SUFFIXES include include/openblas include/x86_64-linux-gnu/openblas-pthread)
find_library(OpenBLAS_LIBRARY NAMES openblas HINTS ${OpenBLAS_ROOT} ENV OpenBLAS_ROOT
  PATH_SUFFIXES lib lib64 lib/x86_64-linux-gnu/openblas-pthread)
if(OpenBLAS_INCLUDE_DIR AND EXISTS ${OpenBLAS_INCLUDE_DIR}/openblas_config.h)
  file(STRINGS ${OpenBLAS_INCLUDE_DIR}/openblas_config.h _v REGEX "OPENBLAS_VERSION")
  string(REGEX MATCH "[0-9]+\\.[0-9]+\\.[0-9]+" OpenBLAS_VERSION "${_v}")
endif()
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(OpenBLAS REQUIRED_VARS OpenBLAS_LIBRARY OpenBLAS_INCLUDE_DIR
                                  VERSION_VAR OpenBLAS_VERSION)
if(OpenBLAS_FOUND AND NOT TARGET OpenBLAS::OpenBLAS)
  add_library(OpenBLAS::OpenBLAS UNKNOWN IMPORTED)
  set_target_properties(OpenBLAS::OpenBLAS PROPERTIES IMPORTED_LOCATION ${OpenBLAS_LIBRARY}
                        INTERFACE_INCLUDE_DIRECTORIES ${OpenBLAS_INCLUDE_DIR})
endif()
