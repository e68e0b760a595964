//===- Peak.h - The machine's FMA peak, measured in this process ----------===//
#pragma once

#include <string>

namespace attnc::tool {

/// What measurePeak found.
struct Peak {
  double gflops = 0; ///< 2 flops per lane per FMA, summed over the threads
  std::string isa;   ///< "avx512f", "avx2+fma" or "generic" (vectors of 4 floats, a multiply and an add)
  int lanes = 0;     ///< floats per vector instruction
  int threads = 0;
};

/// The FMA throughput of `threads` threads running at once, each an FMA loop
/// of independent vector accumulators (enough to cover the FMA latency on
/// every port) in the instruction set the CPU kernels run (attnc_cpu_isa():
/// AVX-512, AVX2 with FMA, or the portable path's 128-bit vectors, a multiply
/// and an add where the baseline target has no FMA). The best of five trials
/// of about 40 ms; the clock and other processes on the machine move it from
/// run to run.
Peak measurePeak(int threads);

} // namespace attnc::tool
