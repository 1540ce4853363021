# Tests of the trainers' monitoring flags (docs/metrics.md); included from
# examples/CMakeLists.txt after smoke_tests.cmake (whose ddp_example_test
# they use).
#   tensorboard: one rank trains a few steps; tests/metrics/
#                tensorboard_readback.py reads the event files with the
#                tensorboard package (PyPI) and compares them with the
#                metrics JSON lines. Label unit.
#   prometheus:  two ranks under mpirun serve /metrics; the real Prometheus
#                server (Debian's prometheus) scrapes them and its query API
#                must have both ranks' series. Label dist.

set(_ddp_metrics_py ${PROJECT_SOURCE_DIR}/tests/metrics)
set(_ddp_metrics_work ${CMAKE_CURRENT_BINARY_DIR}/metrics_tests)

foreach(spec "resnet|train_resnet" "gpt|train_gpt" "unwritable|train_resnet")
  string(REPLACE "|" ";" parts "${spec}")
  list(GET parts 0 kind)
  list(GET parts 1 program)
  add_test(NAME metrics.tensorboard.${kind}
           COMMAND /usr/bin/python3 ${_ddp_metrics_py}/tensorboard_readback.py ${kind}
                   $<TARGET_FILE:${program}> ${_ddp_metrics_work}/tensorboard_${kind})
  set_tests_properties(metrics.tensorboard.${kind} PROPERTIES LABELS unit TIMEOUT 300)
endforeach()

if(DDP_HAVE_MPI)
  find_program(DDP_PROMETHEUS prometheus)
  if(DDP_PROMETHEUS)
    add_test(NAME metrics.prometheus.mpi_np2_scrape
             COMMAND /usr/bin/python3 ${_ddp_metrics_py}/prometheus_scrape.py scrape
                     ${DDP_PROMETHEUS} ${MPIEXEC_EXECUTABLE} $<TARGET_FILE:train_resnet>
                     ${_ddp_metrics_work}/prometheus_scrape)
    set_tests_properties(metrics.prometheus.mpi_np2_scrape PROPERTIES LABELS dist TIMEOUT 600)
  else()
    message(WARNING "prometheus not found: metrics.prometheus.mpi_np2_scrape is not registered "
                    "(install Debian's prometheus: tools/install_deps.sh)")
  endif()
  add_test(NAME metrics.prometheus.mpi_np2_port_in_use
           COMMAND /usr/bin/python3 ${_ddp_metrics_py}/prometheus_scrape.py port-in-use
                   ${MPIEXEC_EXECUTABLE} $<TARGET_FILE:train_resnet>
                   ${_ddp_metrics_work}/port_in_use)
  set_tests_properties(metrics.prometheus.mpi_np2_port_in_use PROPERTIES LABELS dist TIMEOUT 300)
endif()

# Bad monitoring flags exit 2 naming the flag.
foreach(spec
    "resnet_metrics_port_range|train_resnet|--metrics-port|70000|--metrics-port: 70000 is above 65535"
    "resnet_metrics_port_negative|train_resnet|--metrics-port|-1|--metrics-port: '-1' is below the minimum 0"
    "gpt_job_name_without_port|train_gpt|--job-name|x|--job-name: needs --metrics-port")
  string(REPLACE "|" ";" parts "${spec}")
  list(POP_FRONT parts name program)
  list(POP_BACK parts regex)
  string(REGEX REPLACE "([][+.*()^$?])" "\\\\\\1" regex "${regex}")
  ddp_example_test(examples.flags.${name} LABELS unit
    CMD1 $<TARGET_FILE:${program}> ${parts} EXPECT_RC 2 EXPECT_REGEX "${regex}")
endforeach()
