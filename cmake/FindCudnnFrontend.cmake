# Finds the header-only cuDNN frontend (cudnn_frontend.h, the C++ graph API
# over cuDNN's backend API). It ships in the PyPI wheel nvidia-cudnn-frontend,
# whose include/ lands beside the Python package: site-packages/include.
# Looks first, and only, in CUDNN_FRONTEND_ROOT (variable or environment) when
# one is given; otherwise asks the Python interpreter where the wheel is, then
# the system. Sets CudnnFrontend_FOUND, CudnnFrontend_VERSION and the
# interface target CudnnFrontend::headers.
set(_fe_roots ${CUDNN_FRONTEND_ROOT} $ENV{CUDNN_FRONTEND_ROOT})
if(_fe_roots)
  find_path(CudnnFrontend_INCLUDE_DIR NAMES cudnn_frontend.h PATHS ${_fe_roots}
            PATH_SUFFIXES include NO_DEFAULT_PATH)
else()
  set(_fe_hints)
  foreach(_py /usr/bin/python3 python3)
    execute_process(COMMAND ${_py} -c "import cudnn, os; print(os.path.dirname(os.path.dirname(cudnn.__file__)))"
                    OUTPUT_VARIABLE _site OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET
                    RESULT_VARIABLE _rc)
    if(_rc EQUAL 0 AND _site)
      list(APPEND _fe_hints ${_site})
    endif()
  endforeach()
  file(GLOB _fe_site /usr/local/lib/python3*/dist-packages /usr/lib/python3/dist-packages)
  find_path(CudnnFrontend_INCLUDE_DIR NAMES cudnn_frontend.h HINTS ${_fe_hints} ${_fe_site}
            PATH_SUFFIXES include)
endif()
if(CudnnFrontend_INCLUDE_DIR AND EXISTS ${CudnnFrontend_INCLUDE_DIR}/cudnn_frontend_version.h)
  file(STRINGS ${CudnnFrontend_INCLUDE_DIR}/cudnn_frontend_version.h _v
       REGEX "define CUDNN_FRONTEND_(MAJOR|MINOR|PATCH)_VERSION ")
  string(REGEX REPLACE ".*MAJOR_VERSION ([0-9]+).*" "\\1" _maj "${_v}")
  string(REGEX REPLACE ".*MINOR_VERSION ([0-9]+).*" "\\1" _min "${_v}")
  string(REGEX REPLACE ".*PATCH_VERSION ([0-9]+).*" "\\1" _pat "${_v}")
  set(CudnnFrontend_VERSION "${_maj}.${_min}.${_pat}")
endif()
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(CudnnFrontend REQUIRED_VARS CudnnFrontend_INCLUDE_DIR
                                  VERSION_VAR CudnnFrontend_VERSION)
if(CudnnFrontend_FOUND AND NOT TARGET CudnnFrontend::headers)
  add_library(CudnnFrontend::headers INTERFACE IMPORTED)
  # SYSTEM: its headers are not ours to warn about.
  set_target_properties(CudnnFrontend::headers PROPERTIES
                        INTERFACE_SYSTEM_INCLUDE_DIRECTORIES ${CudnnFrontend_INCLUDE_DIR}
                        INTERFACE_INCLUDE_DIRECTORIES ${CudnnFrontend_INCLUDE_DIR})
endif()
