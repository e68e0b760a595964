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
/// every port) in the widest instruction set this CPU has: AVX-512, else AVX2
/// with FMA, else plain vectors. The best of five trials of about 40 ms; the
/// clock and other processes on the machine move it from run to run.
Peak measurePeak(int threads);

} // namespace attnc::tool
