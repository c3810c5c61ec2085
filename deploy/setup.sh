#!/usr/bin/env bash
# Installs every dependency (Debian packages, PyPI packages) and builds
# moestream into build/ (Release). Idempotent; safe to re-run.
#   deploy/setup.sh [--sanitize | --fuzz]
#     --sanitize builds build-asan/ with clang-14, ASan+UBSan at -O1: the unit tests and the
#       libFuzzer targets, sharing one compile of the libraries (docs/FUZZING.md);
#     --fuzz builds build-fuzz/ the same way with only the fuzz targets and what they reach.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi

APT_PACKAGES=(
  build-essential cmake ninja-build pkg-config git python3 python3-pip
  libabsl-dev libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  liburing-dev libgtest-dev libgmock-dev libbenchmark-dev
  nlohmann-json3-dev libpcre2-dev libicu-dev zlib1g-dev prometheus-cpp-dev libboost1.74-dev curl
  clang-14 libclang-rt-14-dev libomp-14-dev
  iproute2 nftables util-linux
)
missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "[setup] apt-get install ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# Python packages used by the default test path (no torch here: oracle and
# training scripts have their own requirements files and are run by hand).
PY=${PYTHON:-python3}
if ! $PY -c "import numpy, safetensors, ml_dtypes, jinja2, openai, kubernetes_validate, yaml" 2>/dev/null ||
   [ "$($PY -c 'import kubernetes_validate.version as v; print(v.__version__)' 2>/dev/null)" != 1.37.0 ]; then
  echo "[setup] pip install -r deploy/requirements-test.txt"
  $PY -m pip install -q -r deploy/requirements-test.txt
fi
# The renderer of deploy/k8s's goldens (kubectl v1.32.3 = kustomize v5.5.0) into .cache/kubectl/:
# Debian 12 has none of that version (docs/KUBERNETES.md "Tests").
PYTHON=$PY "$ROOT/tools/k8s/install_kubectl.sh"

BUILD_DIR=build
EXTRA=()
if [ "${1:-}" = "--sanitize" ]; then
  BUILD_DIR=build-asan
  # Build type "Sanitize": no flags of its own; CMakeLists.txt sets -O1 -gline-tables-only.
  EXTRA=(-DCMAKE_C_COMPILER=clang-14 -DCMAKE_CXX_COMPILER=clang++-14 -DMOE_SANITIZE=ON -DMOE_FUZZ=ON
         -DCMAKE_BUILD_TYPE=Sanitize -DMOE_BUILD_BENCH=OFF)
elif [ "${1:-}" = "--fuzz" ]; then
  BUILD_DIR=build-fuzz
  EXTRA=(-DCMAKE_C_COMPILER=clang-14 -DCMAKE_CXX_COMPILER=clang++-14 -DMOE_FUZZ=ON -DMOE_FUZZ_ONLY=ON
         -DCMAKE_BUILD_TYPE=Sanitize -DMOE_BUILD_BENCH=OFF)
fi
JOBS=${JOBS:-$(nproc)}
cmake -S "$ROOT" -B "$ROOT/$BUILD_DIR" -G Ninja -DPython3_EXECUTABLE="$(command -v $PY)" "${EXTRA[@]}" >/dev/null
if [ "${1:-}" = "--sanitize" ]; then
  cmake --build "$ROOT/$BUILD_DIR" --target unit_tests fuzzers -j "$JOBS"
elif [ "${1:-}" = "--fuzz" ]; then
  cmake --build "$ROOT/$BUILD_DIR" --target fuzzers -j "$JOBS"
else
  cmake --build "$ROOT/$BUILD_DIR" -j "$JOBS"
fi
echo "[setup] built $ROOT/$BUILD_DIR"
