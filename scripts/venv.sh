#!/usr/bin/env bash
# The virtual environment, with one of the two locks installed (docs/install.md):
#   scripts/venv.sh runtime   requirements.lock: what the portal needs to run (make run, the image)
#   scripts/venv.sh dev       requirements-dev.lock: the runtime pins plus the test and lint tools
#
# VENV (default .venv) is created with PYTHON when given, else with the first supported Python that
# scripts/find-python.sh finds (3.11, which CI tests fully, then 3.12, then 3.13). A stamp in the venv
# names the lock installed and its digest, so a second call does nothing (in well under a second);
# the dev lock satisfies a runtime request (it holds the same pins and more), never the reverse.
set -euo pipefail
cd "$(dirname "$0")/.."

kind=${1:?usage: scripts/venv.sh runtime|dev}
case "$kind" in
  runtime) lock=requirements.lock ;;
  dev) lock=requirements-dev.lock ;;
  *) echo "scripts/venv.sh: unknown lock kind '$kind' (runtime or dev)" >&2; exit 2 ;;
esac
VENV=${VENV:-.venv}
UV_VERSION=${UV_VERSION:?UV_VERSION is set by the Makefile}
SUPPORTED="3.11 3.12 3.13"
stamp="$VENV/.gpuportal-lock"

supported() {  # prints the interpreter's major.minor when it is supported
  local version
  version=$("$1" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null) || return 1
  case " $SUPPORTED " in *" $version "*) echo "$version" ;; *) return 1 ;; esac
}

digest() { cat "$1" pyproject.toml | sha256sum | cut -c1-16; }

if [ -x "$VENV/bin/python" ] && ! supported "$VENV/bin/python" >/dev/null; then
  echo "$VENV holds an unsupported or broken Python: remove it (make clean) and run again" >&2
  exit 1
fi

if [ ! -x "$VENV/bin/python" ]; then
  if [ -n "${PYTHON:-}" ]; then
    python=$(command -v "$PYTHON" || true)
    if [ -z "$python" ] || ! supported "$python" >/dev/null; then
      echo "PYTHON=$PYTHON does not run as Python 3.11, 3.12 or 3.13" >&2; exit 1
    fi
  elif ! python=$(scripts/find-python.sh); then
    echo "GPU Portal needs Python 3.11, 3.12 or 3.13 and found none (python3.11, python3.12, python3.13" >&2
    echo "or python3 on PATH, or a pyenv version). Install one (Debian/Ubuntu: apt-get install python3" >&2
    echo "python3-venv) or name it: make run PYTHON=/path/to/python3.12" >&2
    exit 1
  fi
  echo "Creating $VENV with $python (Python $(supported "$python"))"
  if ! "$python" -m venv "$VENV"; then
    rm -rf "$VENV"
    echo "$python could not create a virtual environment; on Debian/Ubuntu install python3-venv" >&2
    echo "(or python$(supported "$python")-venv) and run again" >&2
    exit 1
  fi
fi

want="$kind $(digest "$lock")"
have=$(cat "$stamp" 2>/dev/null || true)
if [ "$have" = "$want" ] || { [ "$kind" = runtime ] && [ "$have" = "dev $(digest requirements-dev.lock)" ]; }; then
  exit 0
fi

echo "Installing $lock into $VENV (the first time downloads the packages)"
if [ "$("$VENV/bin/uv" --version 2>/dev/null | cut -d' ' -f2)" != "$UV_VERSION" ]; then
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check "uv==$UV_VERSION"
fi
"$VENV/bin/uv" pip sync -q --python "$VENV/bin/python" "$lock"
"$VENV/bin/uv" pip install -q --python "$VENV/bin/python" --no-deps -e .
echo "$want" >"$stamp"
