#!/bin/bash
# Builds llama_decode (llama.cpp's side of run.py) against the llama.cpp vendored in the llama-cpp-python
# PyPI sdist, as tools/bench/ggml_matmul_bench.cc is built. Not part of the repo build (hand-run comparison).
#   tools/bench/side_by_side/build_llama.sh WORKDIR [VERSION]   -> WORKDIR/llama_decode
# Takes ~50 minutes on the 2-vCPU machine (run it under /work/bin/busy).
set -eu
W=$1; V=${2:-0.3.36}
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$W" && cd "$W"
[ -f llama_cpp_python-$V.tar.gz ] || pip download "llama-cpp-python==$V" --no-binary llama-cpp-python --no-deps -d .
[ -d llama_cpp_python-$V ] || tar xzf llama_cpp_python-$V.tar.gz
L=$W/llama_cpp_python-$V/vendor/llama.cpp
touch "$L/ggml/ggml.pc.in"  # the sdist omits it; ggml's CMake only installs it
cmake -S "$L" -B lbuild -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DBUILD_SHARED_LIBS=OFF \
  -DGGML_BACKEND_DL=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
  -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_TOOLS=OFF > cmake.log
cmake --build lbuild --target llama -j2 > build.log
g++ -O2 -std=c++17 -I"$L/include" -I"$L/ggml/include" "$HERE/llama_decode.cc" lbuild/src/libllama.a \
  lbuild/ggml/src/libggml.a lbuild/ggml/src/libggml-cpu.a lbuild/ggml/src/libggml-base.a -fopenmp -lpthread \
  -o llama_decode
echo "$W/llama_decode"
