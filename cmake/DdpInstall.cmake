# Installs libddp.so, the headers and a CMake package so that an outside
# project can do find_package(ddp CONFIG REQUIRED) and link ddp::ddp.
include(CMakePackageConfigHelpers)

install(TARGETS ddp EXPORT ddpTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
# libddp_cuda.so goes beside libddp.so, which opens it from there (Note
# [Loading CUDA when first used] in src/tensor/cuda_runtime.h); programs do
# not link it, so it is not exported.
if(TARGET ddp_cuda)
  install(TARGETS ddp_cuda LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
endif()
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/ddp ${PROJECT_BINARY_DIR}/include/ddp
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT ddpTargets NAMESPACE ddp:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/ddp)

configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/ddpConfig.cmake.in
  ${PROJECT_BINARY_DIR}/ddpConfig.cmake INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/ddp)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/ddpConfigVersion.cmake
  COMPATIBILITY SameMajorVersion)
install(FILES ${PROJECT_BINARY_DIR}/ddpConfig.cmake ${PROJECT_BINARY_DIR}/ddpConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/ddp)
