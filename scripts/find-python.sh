#!/usr/bin/env bash
# Prints the path of a supported Python (3.11, 3.12 or 3.13) and exits 0, or exits 1 printing nothing.
#   scripts/find-python.sh            the oldest supported one found: 3.11 (what CI tests fully) first
#   scripts/find-python.sh --newest   the newest one found (CI's second run)
# Looks on PATH for python3.11 … python3.13 and python3, then in pyenv's versions when pyenv is there
# (its shims answer only for the version selected, so they are checked by running them).
set -euo pipefail

SUPPORTED=(3.11 3.12 3.13)
order=("${SUPPORTED[@]}")
if [ "${1:-}" = --newest ]; then
  order=()
  for ((i = ${#SUPPORTED[@]} - 1; i >= 0; i--)); do order+=("${SUPPORTED[$i]}"); done
fi

minor_of() {  # the interpreter's major.minor, when it runs
  "$1" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null
}

pyenv_root=""
if command -v pyenv >/dev/null; then pyenv_root=$(pyenv root 2>/dev/null || true); fi

for minor in "${order[@]}"; do
  candidates=("python$minor" python3)
  if [ -n "$pyenv_root" ]; then
    for dir in "$pyenv_root"/versions/"$minor".*/bin; do candidates+=("$dir/python$minor"); done
  fi
  for candidate in "${candidates[@]}"; do
    path=$(command -v "$candidate" 2>/dev/null) || continue
    if [ "$(minor_of "$path")" = "$minor" ]; then
      # A pyenv shim answers only under the version pyenv selects: name the real interpreter.
      "$path" -c 'import sys; print(sys.executable)'
      exit 0
    fi
  done
done
exit 1
