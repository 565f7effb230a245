#!/usr/bin/env bash
# Builds the CUDA configuration on this (Debian 12) machine and packs what the device machine
# (Ubuntu 24.04, driver and CUDA runtime but no Debian -dev packages) needs to run the device
# tests into .device/ (git-ignored):
#   .device/bin/minfer, .device/bin/minfer_tests   without debug info (symbols kept), static cudart
#   .device/bin/bench_cuda_matmul, bench_cuda_mmq  the device micro-benchmarks (only with
#                                                  BUNDLE_BENCH=1: the device tool's transfer
#                                                  limit is 64 MiB with the work tree)
#   .device/bin/libminfer_cuda_trace.so            the kernel-timeline tracer (tools/cuda_trace;
#                                                  when the toolkit has CUPTI): on the device,
#                                                  CUDA_INJECTION64_PATH=.device/bin/libminfer_cuda_trace.so
#   .device/lib/*.so*                              shared libraries the binaries load that are
#                                                  not part of the device's base system (ldd)
# Then on the device: scripts/cuda_test.sh (it finds .device/ or unpacks .device.tar.xz, and sets
# LD_LIBRARY_PATH). Carry either .device or .device.tar.xz (smaller).
#
#   scripts/device_bundle.sh                 # archs from MINFER_CUDA_ARCHS (default 90a-real)
#   MINFER_CUDA_ARCHS="80;89;90a;120" scripts/device_bundle.sh
#   BUNDLE_SMALL=1 scripts/device_bundle.sh  # symbol tables stripped too, no tracer and no CUPTI,
#                                            # no OpenSSL or zlib (the device's own load; about
#                                            # 3 MB less packed, backtraces unnamed)
# At the end it prints the size the device tool would carry (tracked files + .device.tar.xz +
# .carry/) against its 64 MiB limit (scripts/carry_size.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
archs=${MINFER_CUDA_ARCHS:-90a-real}  # SASS only: the PTX copy would double the fatbins
jobs=${JOBS:-$(nproc)}
cmake -S . -B build-cuda -G Ninja -DCMAKE_BUILD_TYPE=Release -DMINFER_CUDA=ON \
  -DMINFER_CUDA_ARCHS="$archs" -DMINFER_WERROR=ON >/dev/null
targets=(minfer minfer_tests)
files=(build-cuda/tools/minfer/minfer build-cuda/tests/minfer_tests)
if [[ ${BUNDLE_BENCH:-0} == 1 ]]; then
  targets+=(bench_cuda_matmul bench_cuda_mmq)
  files+=(build-cuda/bench/bench_cuda_matmul build-cuda/bench/bench_cuda_mmq)
fi
# The kernel-timeline tracer (tools/cuda_trace), where the toolkit has CUPTI (not in a small bundle).
small=${BUNDLE_SMALL:-0}
if [[ $small != 1 ]] && ninja -C build-cuda -t targets all | grep -q '^minfer_cuda_trace:'; then
  targets+=(minfer_cuda_trace)
fi
ninja -C build-cuda -j"$jobs" "${targets[@]}"

rm -rf .device
mkdir -p .device/bin .device/lib
cp "${files[@]}" .device/bin/
if [[ $small != 1 && -f build-cuda/tools/cuda_trace/libminfer_cuda_trace.so ]]; then
  cp build-cuda/tools/cuda_trace/libminfer_cuda_trace.so .device/bin/
fi
bins=(.device/bin/*)
if [[ $small == 1 ]]; then
  strip --strip-all "${bins[@]}"
else
  strip --strip-debug "${bins[@]}"  # keeps the symbol table: backtraces on the device name functions
fi

# Libraries the device has in a newer, compatible version (glibc, the C++ runtime) stay out:
# a carried older copy would shadow them. Everything else ldd resolves is carried.
base='^(linux-vdso|ld-linux|libc\.so|libm\.so|libstdc\+\+\.so|libgcc_s\.so|libpthread\.so|libdl\.so|librt\.so)'
# A small bundle also leaves out OpenSSL and zlib (2.3 MB of 16): the device image's Python has
# them (its ssl module and zlib load libssl.so.3, libcrypto.so.3 and libz.so.1), and OpenSSL 3
# keeps one ABI across its 3.x releases.
[[ $small == 1 ]] && base="${base%)}|libssl\.so|libcrypto\.so|libz\.so)"
for bin in "${bins[@]}"; do
  ldd "$bin" | awk '/=>/ {print $1, $3}' | while read -r name path; do
    [[ "$name" =~ $base ]] && continue
    [[ -f "$path" ]] || { echo "device_bundle: $bin needs $name, which ldd cannot find" >&2; exit 1; }
    cp -L "$path" ".device/lib/$name"
  done
done
cp scripts/cuda_test.sh .device/
# The transfer to the device machine is size-limited (64 MiB with the work tree): also pack the
# bundle. minfer and minfer_tests carry the same CUDA fatbins, so xz gets a dictionary larger
# than the first binary and one thread (one block): the second copy then costs almost nothing
# (21.8 MB at -6 with an 8 MiB dictionary, 12.7 MB this way; ~2 GB of memory while packing).
# The x86 branch filter before LZMA2 makes the host code compress better (16.3 -> 15.8 MiB for a
# small bundle of 2026-12-07); tar -xJf undoes it.
# scripts/cuda_test.sh and device_bench.sh unpack it when .device/ is absent.
tar -cf - .device | xz -T1 --x86 --lzma2=preset=6,dict=192MiB > .device.tar.xz
echo "device_bundle: $(du -sh .device | cut -f1) in .device/, $(du -sh .device.tar.xz | cut -f1) packed in .device.tar.xz:"
ls -l .device/bin .device/lib
carry=(.device.tar.xz)
[[ -d .carry ]] && carry+=(.carry)
scripts/carry_size.sh "${carry[@]}" || true
