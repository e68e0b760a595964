#!/usr/bin/env bash
# The include graph points down only (README.md, "Layout"): for each layer,
# the attnc headers its sources may include. Prints every include that
# breaks this and exits 1 if there is one.
set -euo pipefail
cd "${1:-$(dirname "$0")/../..}"
status=0
check() { # FOLDER ALLOWED-REGEX
  local folder=$1 allowed=$2 bad
  bad=$(grep -rnE '#include "attnc/' "$folder" --include='*.h' --include='*.cpp' --include='*.inc' |
        grep -vE "#include \"attnc/($allowed)" || true)
  if [ -n "$bad" ]; then
    echo "$folder includes what is above it:"
    echo "$bad"
    status=1
  fi
}
check support 'support/'
check format  '(support|format)/'
check plan    '(support|plan)/'
check dsl     '(support|dsl)/'
check compiler '(support|format|plan|dsl|frontend|analysis|tuning|reference|codegen|compiler)/'
check runtime '(support|format|plan|runtime)/|attnc\.hp?p?"'
exit $status
