# Per-kernel resources of the nvcc build (registers, static shared memory, stack frame, spills),
# as ptxas reports them: every CUDA compile of the library layers runs with --resource-usage
# under cmake/cuda_resource_usage.sh, which keeps the report beside the object
# (<object>.resource-usage.txt). scripts/kernel_resources.py collects the reports into
# bench/model/kernel_resources_sm90.txt (--write) or checks the build against it (--check, a ctest
# entry). Included from the top-level CMakeLists.txt in the nvcc build only; the simulator build
# compiles the same sources with the host compiler and has no ptxas.
option(EMBER_KERNEL_RESOURCES "Keep ptxas's per-kernel resource report beside each CUDA object" ON)
if(EMBER_KERNEL_RESOURCES)
  foreach(layer ${EMBER_CUDA_TARGETS})
    # --resource-usage only prints; the generated code is the same. The launcher runs first and
    # hands the compile to ccache (when found), whose cache replays the report on a hit.
    target_compile_options(${layer} PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:--resource-usage>)
    set(_ember_launcher ${PROJECT_SOURCE_DIR}/cmake/cuda_resource_usage.sh ${CMAKE_CUDA_COMPILER_LAUNCHER})
    set_target_properties(${layer} PROPERTIES CUDA_COMPILER_LAUNCHER "${_ember_launcher}")
  endforeach()
  message(STATUS "ember: ptxas resource reports kept beside the CUDA objects (EMBER_KERNEL_RESOURCES=ON)")
endif()
