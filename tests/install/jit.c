/* Links the installed libattnc_jit.so through `pkg-config attnc-jit`
 * (check_install.sh): JIT-compiles the pattern file argv[1] with the fused
 * backend and runs it on [1, 1, 64, 8] with every row of V equal, so that
 * every output row must equal it (the softmax weights of a non-empty row sum
 * to 1, and every row of a causal pattern holds its diagonal). */
#include "attnc/attnc.h"
#include "attnc/attnc_jit.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

enum { N = 64, D = 8 };

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s PATTERN.attn\n", argv[0]);
    return 2;
  }
  const char *defines[] = {"l=16", "c=4"};
  attnc_jit_options options = {defines, 2, NULL, NULL, 0, "fused"};
  attnc_kernel *kernel = NULL;
  if (attnc_jit_compile_file(argv[1], &options, &kernel) != ATTNC_OK) {
    fprintf(stderr, "jit.c: %s\n", attnc_last_error());
    return 1;
  }
  static float q[N * D], k[N * D], v[N * D], o[N * D];
  for (int x = 0; x < N * D; ++x) {
    q[x] = (float)((x * 37) % 11) / 11.0f - 0.5f;
    k[x] = (float)((x * 53) % 13) / 13.0f - 0.5f;
    v[x] = (float)(x % D) + 1.0f;
    o[x] = NAN;
  }
  attnc_tensor tq = {q, ATTNC_DTYPE_F32, {1, 1, N, D}, {N * D, N * D, D, 1}};
  attnc_tensor tk = tq, tv = tq, to = tq;
  tk.data = k;
  tv.data = v;
  to.data = o;
  attnc_status status = attnc_run(kernel, &tq, &tk, &tv, &to, NULL);
  if (status != ATTNC_OK) {
    fprintf(stderr, "jit.c: attnc_run: %s: %s\n", attnc_status_name(status), attnc_last_error());
    attnc_kernel_free(kernel);
    return 1;
  }
  double worst = 0;
  for (int x = 0; x < N * D; ++x) {
    double err = fabs((double)o[x] - (double)v[x]);
    if (!(err <= worst)) /* NaN-safe */
      worst = isnan(err) ? INFINITY : err;
  }
  printf("jit.c: pattern %s (%s), backend %s, max abs error %.3g\n", attnc_kernel_metadata(kernel, "pattern"),
         attnc_kernel_metadata(kernel, "params"), attnc_kernel_metadata(kernel, "backend"), worst);
  attnc_kernel_free(kernel);
  return worst <= 1e-5 ? 0 : 1;
}
