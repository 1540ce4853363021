# SyncBatchNorm across processes (label dist), included from this folder's
# CMakeLists.txt: mpi through mpirun at 2 and 3 ranks, gloo through ddprun.
# Small tensors only, so each run takes seconds.
add_executable(sync_batch_norm_main sync_batch_norm_main.cpp)
target_link_libraries(sync_batch_norm_main PRIVATE ddp::ddp GTest::gtest)
target_include_directories(sync_batch_norm_main PRIVATE ${PROJECT_SOURCE_DIR}/tests)

foreach(np 2 3)
  if(DDP_HAVE_MPI)
    add_test(NAME parallel.mpi.sync_batch_norm.np${np}
             COMMAND ${MPIEXEC_EXECUTABLE} --allow-run-as-root --oversubscribe
                     -np ${np} ${MPIEXEC_PREFLAGS}
                     $<TARGET_FILE:sync_batch_norm_main> --backend mpi ${MPIEXEC_POSTFLAGS})
    set_tests_properties(parallel.mpi.sync_batch_norm.np${np} PROPERTIES
      LABELS dist TIMEOUT 300
      ENVIRONMENT "OMPI_MCA_rmaps_base_oversubscribe=1;OMPI_MCA_mpi_yield_when_idle=1;OMP_NUM_THREADS=1;OPENBLAS_NUM_THREADS=1")
  endif()
  if(DDP_HAVE_GLOO AND TARGET ddprun)
    add_test(NAME parallel.gloo.sync_batch_norm.np${np}
             COMMAND $<TARGET_FILE:ddprun> --nproc-per-node ${np} --master-port 0
                     $<TARGET_FILE:sync_batch_norm_main> --backend gloo)
    set_tests_properties(parallel.gloo.sync_batch_norm.np${np} PROPERTIES
      LABELS dist TIMEOUT 300 ENVIRONMENT "OMP_NUM_THREADS=1;OPENBLAS_NUM_THREADS=1")
  endif()
endforeach()
