//===- LowerToMlir.cpp - Pattern IR to the MLIR sparse-tensor dialect -----===//
//
// Expects: a canonical PatternIR.
// Guarantees: MLIR text (func, linalg, sparse_tensor, bufferization, arith,
// math, tensor) with one function @attnc_head_<k>_impl per distinct head
// set. Each function takes the head's connectivity as a CSR-encoded sparse
// tensor (32-bit pos/crd) and computes attention with a chain of linalg ops
// that update the mask's values in place:
//
//   clear   M = 0 on stored entries
//   SDDMM   M(i,j) = sum_k Q(i,k) K(j,k)           (stored entries only)
//   max     m(i)   = max_j M(i,j)                  (stored entries only)
//   exp     M(i,j) = exp(scale * (M(i,j) - m(i)))
//   sum     s(i)   = sum_j M(i,j);  r(i) = 1 / s(i)
//   SpMM    O(i,c) = sum_j M(i,j) V(j,c) r(i)
//
// Sizes are dynamic (`?`): n and d are run-time values. O and the row
// vectors are caller buffers (destination passing) so that the generated
// code allocates nothing. Rows without keys are never visited by SpMM and
// stay 0. Every op carries the location of the pattern statement that
// defines the head's set.
//
//===----------------------------------------------------------------------===//
#include "attnc/codegen/LowerToMlir.h"

#include <sstream>

namespace attnc::codegen {

namespace {

std::string escape(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\')
      out += '\\';
    out += c;
  }
  return out;
}

std::string location(const dsl::SourceManager &sources, SourceRange r) {
  if (!r.isValid())
    return "loc(unknown)";
  auto [line, col] = sources.lineAndColumn(r.begin);
  return "loc(\"" + escape(sources.name(r.begin.buffer)) + "\":" + std::to_string(line) + ":" +
         std::to_string(col) + ")";
}

constexpr const char *kPreamble = R"(#CSR = #sparse_tensor.encoding<{
  map = (i, j) -> (i : dense, j : compressed), posWidth = 32, crdWidth = 32
}>
#elementwise = {
  indexing_maps = [affine_map<(i, j) -> (i, j)>],
  iterator_types = ["parallel", "parallel"]
}
#sddmm = {
  indexing_maps = [affine_map<(i, j, k) -> (i, k)>, affine_map<(i, j, k) -> (j, k)>,
                   affine_map<(i, j, k) -> (i, j)>],
  iterator_types = ["parallel", "parallel", "reduction"]
}
#row_reduce = {
  indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i)>],
  iterator_types = ["parallel", "reduction"]
}
#row_broadcast = {
  indexing_maps = [affine_map<(i, j) -> (i)>, affine_map<(i, j) -> (i, j)>],
  iterator_types = ["parallel", "parallel"]
}
#vector_map = {
  indexing_maps = [affine_map<(i) -> (i)>, affine_map<(i) -> (i)>],
  iterator_types = ["parallel"]
}
#spmm = {
  indexing_maps = [affine_map<(i, j, c) -> (i, j)>, affine_map<(i, j, c) -> (j, c)>,
                   affine_map<(i, j, c) -> (i)>, affine_map<(i, j, c) -> (i, c)>],
  iterator_types = ["parallel", "reduction", "parallel"]
}
)";

/// The body of one head function; $LOC is replaced by the set's location.
constexpr const char *kHeadBody = R"(
  %zero = arith.constant 0.0 : f32 $LOC
  %one = arith.constant 1.0 : f32 $LOC
  %ninf = arith.constant 0xFF800000 : f32 $LOC
  linalg.fill ins(%zero : f32) outs(%o_buf : memref<?x?xf32>) $LOC
  linalg.fill ins(%ninf : f32) outs(%max_buf : memref<?xf32>) $LOC
  linalg.fill ins(%zero : f32) outs(%sum_buf : memref<?xf32>) $LOC
  %o0 = bufferization.to_tensor %o_buf restrict writable : memref<?x?xf32> $LOC
  %max0 = bufferization.to_tensor %max_buf restrict writable : memref<?xf32> $LOC
  %sum0 = bufferization.to_tensor %sum_buf restrict writable : memref<?xf32> $LOC
  %inv0 = bufferization.to_tensor %inv_buf restrict writable : memref<?xf32> $LOC

  // Clear the stored entries: SDDMM accumulates into them.
  %cleared = linalg.generic #elementwise outs(%mask : tensor<?x?xf32, #CSR>) {
  ^bb0(%x: f32):
    %u = sparse_tensor.unary %x : f32 to f32
      present = {
      ^bb0(%p: f32):
        %z = arith.constant 0.0 : f32
        sparse_tensor.yield %z : f32
      }
      absent = {}
    linalg.yield %u : f32
  } -> tensor<?x?xf32, #CSR> $LOC

  // SDDMM: scores only where the pattern has a pair.
  %scores = linalg.generic #sddmm
      ins(%q, %k : tensor<?x?xf32>, tensor<?x?xf32>)
      outs(%cleared : tensor<?x?xf32, #CSR>) {
  ^bb0(%a: f32, %b: f32, %x: f32):
    %u = sparse_tensor.unary %x : f32 to f32
      present = {
      ^bb0(%p: f32):
        %prod = arith.mulf %a, %b : f32
        sparse_tensor.yield %prod : f32
      }
      absent = {}
    %r = sparse_tensor.reduce %x, %u, %zero : f32 {
    ^bb0(%l: f32, %rr: f32):
      %add = arith.addf %l, %rr : f32
      sparse_tensor.yield %add : f32
    }
    linalg.yield %r : f32
  } -> tensor<?x?xf32, #CSR> $LOC

  // Row max over stored entries only (maxnumf with a -inf identity keeps
  // implicit zeros out).
  %max = linalg.generic #row_reduce
      ins(%scores : tensor<?x?xf32, #CSR>) outs(%max0 : tensor<?xf32>) {
  ^bb0(%a: f32, %b: f32):
    %r = sparse_tensor.reduce %a, %b, %ninf : f32 {
    ^bb0(%x: f32, %y: f32):
      %m = arith.maxnumf %x, %y : f32
      sparse_tensor.yield %m : f32
    }
    linalg.yield %r : f32
  } -> tensor<?xf32> $LOC

  // exp(scale * (s - max)) in place.
  %probs = linalg.generic #row_broadcast
      ins(%max : tensor<?xf32>) outs(%scores : tensor<?x?xf32, #CSR>) {
  ^bb0(%m: f32, %x: f32):
    %u = sparse_tensor.unary %x : f32 to f32
      present = {
      ^bb0(%y: f32):
        %t = arith.subf %y, %m : f32
        %ts = arith.mulf %t, %scale : f32
        %e = math.exp %ts : f32
        sparse_tensor.yield %e : f32
      }
      absent = {}
    linalg.yield %u : f32
  } -> tensor<?x?xf32, #CSR> $LOC

  %sum = linalg.generic #row_reduce
      ins(%probs : tensor<?x?xf32, #CSR>) outs(%sum0 : tensor<?xf32>) {
  ^bb0(%a: f32, %b: f32):
    %r = arith.addf %a, %b : f32
    linalg.yield %r : f32
  } -> tensor<?xf32> $LOC

  %inv = linalg.generic #vector_map
      ins(%sum : tensor<?xf32>) outs(%inv0 : tensor<?xf32>) {
  ^bb0(%a: f32, %b: f32):
    %r = arith.divf %one, %a : f32
    linalg.yield %r : f32
  } -> tensor<?xf32> $LOC

  // SpMM with the normalisation folded in.
  %o = linalg.generic #spmm
      ins(%probs, %v, %inv : tensor<?x?xf32, #CSR>, tensor<?x?xf32>, tensor<?xf32>)
      outs(%o0 : tensor<?x?xf32>) {
  ^bb0(%p: f32, %x: f32, %r: f32, %acc: f32):
    %t = arith.mulf %p, %x : f32
    %t2 = arith.mulf %t, %r : f32
    %add = arith.addf %acc, %t2 : f32
    linalg.yield %add : f32
  } -> tensor<?x?xf32> $LOC

  bufferization.materialize_in_destination %o in restrict writable %o_buf
      : (tensor<?x?xf32>, memref<?x?xf32>) -> () $LOC
  return $LOC
}
)";

void replaceAll(std::string &s, const std::string &from, const std::string &to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
    s.replace(at, from.size(), to);
}

} // namespace

std::string headFunctionName(size_t set) { return "attnc_head_" + std::to_string(set) + "_impl"; }

std::string lowerToMlir(const ir::PatternIR &ir, const dsl::SourceManager &sources) {
  std::ostringstream os;
  os << "// attnc: pattern '" << ir.name << "', " << ir.heads.size()
     << " distinct head set(s); generated by attnc, do not edit.\n";
  os << kPreamble;
  for (size_t k = 0; k < ir.heads.size(); ++k) {
    const ir::PatternIR::Head &head = ir.heads[k];
    std::string loc = location(sources, head.set->loc);
    os << "\n// Heads";
    for (int64_t h : head.heads)
      os << " " << h;
    os << ": " << ir::printSet(*head.set, {}, 0).substr(0, ir::printSet(*head.set).find('\n'))
       << "\n";
    os << "func.func @" << headFunctionName(k)
       << "(%q: tensor<?x?xf32>, %k: tensor<?x?xf32>, %v: tensor<?x?xf32>,\n"
          "    %mask: tensor<?x?xf32, #CSR>, %o_buf: memref<?x?xf32>, %max_buf: memref<?xf32>,\n"
          "    %sum_buf: memref<?xf32>, %inv_buf: memref<?xf32>, %scale: f32) {";
    std::string body = kHeadBody;
    replaceAll(body, "$LOC", loc);
    os << body;
  }
  return os.str();
}

} // namespace attnc::codegen
