# PowerSGD across processes (label dist), included from this folder's
# CMakeLists.txt: mpi through mpirun and gloo through ddprun, 2 ranks each.
# Small tensors only, so each run takes seconds.
add_executable(powersgd_main powersgd_main.cpp)
target_link_libraries(powersgd_main PRIVATE ddp::ddp GTest::gtest)
target_include_directories(powersgd_main PRIVATE ${PROJECT_SOURCE_DIR}/tests)

if(DDP_HAVE_MPI)
  add_test(NAME parallel.mpi.powersgd.np2
           COMMAND ${MPIEXEC_EXECUTABLE} --allow-run-as-root --oversubscribe
                   -np 2 ${MPIEXEC_PREFLAGS} $<TARGET_FILE:powersgd_main> --backend mpi ${MPIEXEC_POSTFLAGS})
  set_tests_properties(parallel.mpi.powersgd.np2 PROPERTIES
    LABELS dist TIMEOUT 300
    ENVIRONMENT "OMPI_MCA_rmaps_base_oversubscribe=1;OMPI_MCA_mpi_yield_when_idle=1;OMP_NUM_THREADS=1;OPENBLAS_NUM_THREADS=1")
endif()
if(DDP_HAVE_GLOO AND TARGET ddprun)
  add_test(NAME parallel.gloo.powersgd.np2
           COMMAND $<TARGET_FILE:ddprun> --nproc-per-node 2 --master-port 0
                   $<TARGET_FILE:powersgd_main> --backend gloo)
  set_tests_properties(parallel.gloo.powersgd.np2 PROPERTIES
    LABELS dist TIMEOUT 300 ENVIRONMENT "OMP_NUM_THREADS=1;OPENBLAS_NUM_THREADS=1")
endif()
