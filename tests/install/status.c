/* Links the installed libattnc.so through `pkg-config attnc` (check_install.sh). */
#include "attnc/attnc.h"

#include <stdio.h>
#include <string.h>

int main(void) {
  const char *name = attnc_status_name(ATTNC_ERROR_SHAPE);
  if (strcmp(name, "ATTNC_ERROR_SHAPE") != 0) {
    fprintf(stderr, "attnc_status_name(ATTNC_ERROR_SHAPE) = \"%s\"\n", name);
    return 1;
  }
  attnc_kernel *kernel = NULL;
  attnc_status status = attnc_kernel_load("/nonexistent/kernel.attnk", &kernel);
  if (status != ATTNC_ERROR_IO) {
    fprintf(stderr, "loading a missing kernel gave %s, expected ATTNC_ERROR_IO\n", attnc_status_name(status));
    return 1;
  }
  printf("status.c: %s; a missing kernel is %s (%s)\n", name, attnc_status_name(status), attnc_last_error());
  return 0;
}
