# cmake -DNVCC=... -DSOURCE=... -DFATBIN=... -DREPORT=... -P CompileCudaKernels.cmake:
# compiles the cuda target's kernels into FATBIN and keeps ptxas's report of
# every kernel's registers, shared memory, stack and spills in REPORT (what
# tests/runtime's CudaKernels.NoSpills reads, and docs/cuda.md cites).
execute_process(
  COMMAND ${NVCC} -std=c++17 -O3 -use_fast_math -fatbin -Xptxas -v
          -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90a,code=sm_90a
          -gencode arch=compute_80,code=compute_80 -o ${FATBIN} ${SOURCE}
  RESULT_VARIABLE rc
  OUTPUT_VARIABLE out
  ERROR_VARIABLE err)
file(WRITE ${REPORT} "${out}${err}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "nvcc failed on ${SOURCE}:\n${out}${err}")
endif()
