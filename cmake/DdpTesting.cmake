# ddp_add_test_dir(<name> <dir> [<label>]): one GoogleTest executable from
# <dir>/*_test.cpp. Files named *_gpu_test.cpp get the label "gpu" (they skip
# without a GPU), the others <label> (default "unit"); each TEST becomes its
# own CTest test. Every executable links the op registry's library,
# ddp_op_registry (tests/CMakeLists.txt).
include(GoogleTest)

function(ddp_add_test_dir name dir)
  set(_label unit)
  if(ARGC GREATER 2)
    set(_label ${ARGV2})
  endif()
  file(GLOB _unit CONFIGURE_DEPENDS ${dir}/*_test.cpp)
  file(GLOB _gpu CONFIGURE_DEPENDS ${dir}/*_gpu_test.cpp)
  if(_gpu)
    list(REMOVE_ITEM _unit ${_gpu})
  endif()
  foreach(kind unit gpu)
    set(_files ${_${kind}})
    if(NOT _files)
      continue()
    endif()
    set(_exe ${name}_${kind})
    add_executable(${_exe} ${_files})
    target_link_libraries(${_exe} PRIVATE ddp::ddp ddp_op_registry GTest::gtest GTest::gtest_main)
    # tests/ for the test utilities; src/ and kernels/ for white-box tests of
    # internal headers (the kernel registry, the allocators).
    target_include_directories(${_exe} PRIVATE ${PROJECT_SOURCE_DIR}/tests ${PROJECT_SOURCE_DIR}/src
                                              ${PROJECT_SOURCE_DIR}/kernels)
    # White-box tests also call into the CUDA half directly (its allocators,
    # cuDNN helpers), so they link it; libddp.so then finds it loaded (Note
    # [Loading CUDA when first used] in src/tensor/cuda_runtime.h).
    if(TARGET ddp_cuda)
      target_link_libraries(${_exe} PRIVATE ddp_cuda)
    endif()
    set(_kind_label ${kind})
    # GPU tests compare CUDA with the CPU to f32 rounding: cuDNN's TF32 (on
    # by default, Note [cuDNN TF32]) is off unless a test turns it on.
    set(_props LABELS ${_kind_label} ENVIRONMENT DDP_CUDNN_ALLOW_TF32=0)
    if(kind STREQUAL "unit")
      set(_props LABELS ${_label})
    endif()
    gtest_discover_tests(${_exe} PROPERTIES ${_props} DISCOVERY_TIMEOUT 60
                         TEST_PREFIX "${name}.")
  endforeach()
endfunction()
