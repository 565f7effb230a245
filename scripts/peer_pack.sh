#!/usr/bin/env bash
# Packs the peer's source for the device machine: a llama.cpp git checkout (e.g. cloned from
# node-llama-cpp@3.21.1's llama/gitRelease.bundle, commit 80fb11ac) pruned to what building
# llama-bench and llama-server for the CPU and CUDA needs, as one xz tarball (~2.3 MB) to carry
# next to the work tree (the device has no internet). scripts/peer_side_by_side.sh unpacks and
# builds it there. PRUNED.txt inside has the configure flags (the server's: no web UI, no download).
# Nothing of the peer enters this repository: the tarball goes to an ignored path (.carry/).
#   scripts/peer_pack.sh LLAMA_CPP_CHECKOUT [OUT.tar.xz]   (default OUT: .carry/llama-src.tar.xz)
set -euo pipefail
src=$(cd "${1:?usage: peer_pack.sh LLAMA_CPP_CHECKOUT [OUT.tar.xz]}" && pwd)
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
out=$(realpath -m "${2:-$(dirname "$0")/../.carry/llama-src.tar.xz}")
list=$stage/files.txt
mkdir -p "$stage/llama.cpp"
cd "$src"
commit=$(git rev-parse --short=8 HEAD)
git ls-files -z | tr '\0' '\n' | grep -E \
 -e '^(CMakeLists\.txt|LICENSE)$' \
 -e '^cmake/(build-info|common|git-vars|license)\.cmake$' \
 -e '^cmake/llama(-config\.cmake|\.pc)\.in$' \
 -e '^include/' -e '^src/' -e '^common/' \
 -e '^ggml/(CMakeLists\.txt|cmake/|include/)' \
 -e '^ggml/src/[^/]+$' \
 -e '^ggml/src/ggml-cpu/' \
 -e '^ggml/src/ggml-cuda/' \
 -e '^vendor/CMakeLists\.txt$' \
 -e '^vendor/(cpp-httplib|nlohmann|sheredom|hash|miniaudio|stb)/' \
 -e '^tools/llama-bench/' \
 -e '^tools/(server|mtmd)/CMakeLists\.txt$' \
 -e '^tools/server/[^/]+\.(cpp|h)$' \
 -e '^tools/mtmd/((models|debug)/)?[^/]+\.(cpp|h)$' \
 -e '^tools/ui/(CMakeLists\.txt|embed\.cpp)$' -e '^scripts/ui-assets\.cmake$' \
 | grep -v -E \
 -e '^ggml/src/ggml-cpu/(arch/(arm|loongarch|powerpc|riscv|s390|wasm)|spacemit|kleidiai)/' \
 -e '(^|/)README\.md$' -e '\.(md|py)$' \
 > "$list"
echo "peer_pack: $(wc -l < "$list") files of llama.cpp $commit"
tar -cf - -T "$list" | tar -xf - -C "$stage/llama.cpp"
# tools/CMakeLists.txt lists a dozen tools; only llama-bench and (LLAMA_BUILD_SERVER) the server ship.
cat > "$stage/llama.cpp/tools/CMakeLists.txt" <<'CM'
# Pruned tree (minfer peer benchmark): llama-bench, and llama-server with what it links
# (mtmd, the web UI library) when LLAMA_BUILD_SERVER is on.
find_package(Threads REQUIRED)
llama_add_compile_flags()
add_subdirectory(llama-bench)
if (LLAMA_BUILD_SERVER)
    add_subdirectory(mtmd)
    add_subdirectory(ui)
    add_subdirectory(server)
endif()
CM
cat > "$stage/llama.cpp/PRUNED.txt" <<TXT
llama.cpp $commit, pruned to what llama-bench and llama-server need (ggml core, ggml-cpu x86,
ggml-cuda, src, include, common, vendor, tools/llama-bench, the sources of tools/server and
tools/mtmd, tools/ui's CMakeLists.txt and embed.cpp, scripts/ui-assets.cmake; no web UI sources,
no tests, docs, Python or media; tools/CMakeLists.txt replaced).
Configure with: -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF
  -DLLAMA_BUILD_APP=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_COMMIT=$commit
  (CUDA: -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DGGML_CUDA_NCCL=OFF)
llama-server too: -DLLAMA_BUILD_SERVER=ON -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF
  (no web UI download from Hugging Face nor npm build: the server has no embedded web UI and the
  build warns 'no assets available'; the HTTP API is unaffected), then ninja llama-server.
TXT
echo "$commit" > "$stage/llama.cpp/.commit"
mkdir -p "$(dirname "$out")"
tar -C "$stage" --sort=name --owner=0 --group=0 --numeric-owner --mtime=@$(git log -1 --format=%ct) -cf - llama.cpp | xz -9e -T1 > "$out"
ls -l "$out"; du -sh "$stage/llama.cpp"
