# Each DDP_WITH_<X> is AUTO (use when found), ON (fail when missing) or OFF.
foreach(dep CUDA NCCL MPI GLOO)
  set(DDP_WITH_${dep} AUTO CACHE STRING "Build with ${dep}: AUTO, ON or OFF")
  set_property(CACHE DDP_WITH_${dep} PROPERTY STRINGS AUTO ON OFF)
endforeach()
set(DDP_CUDA_ARCHS "80;90" CACHE STRING "CUDA architectures to compile kernels for")

# ddp_resolve_option(<X> <found>): sets DDP_HAVE_<X> from the option and
# whether the dependency was found; ON without the dependency is an error.
function(ddp_resolve_option dep found)
  set(want ${DDP_WITH_${dep}})
  if(want STREQUAL "OFF")
    set(DDP_HAVE_${dep} OFF PARENT_SCOPE)
  elseif(found)
    set(DDP_HAVE_${dep} ON PARENT_SCOPE)
  elseif(want STREQUAL "ON")
    message(FATAL_ERROR "DDP_WITH_${dep}=ON but ${dep} was not found")
  else()
    set(DDP_HAVE_${dep} OFF PARENT_SCOPE)
  endif()
endfunction()
