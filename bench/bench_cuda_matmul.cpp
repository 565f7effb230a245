// Device micro-benchmark of the matrix-vector kernels (n = 1 by default): per weight type and
// shape [k x m] (ggml order: m rows of k elements), the time of one matmul() measured with CUDA
// events over many calls, each call on the next of several weight copies so the L2 cache
// (50-60 MB) never holds the weights, and the weight bytes streamed per second as GB/s and as a
// share of the H200's measured 4.2 TB/s.
//
//   bench_cuda_matmul [--n N] [--iters I] [--type NAME] [--rotate-mb MB]
//
// Prints one line per (type, shape); exits 0 with a note when there is no CUDA device.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#ifdef MINFER_HAS_CUDA
#include <cuda_runtime.h>

#include "cuda/kernels/matmul.cuh"
#include "quant/quant.h"
#endif

namespace {

#ifdef MINFER_HAS_CUDA
constexpr double kPeakBytesPerSecond = 4.2e12;  // H200, device-to-device copy measured

struct Shape {
  int64_t k, m;
  const char* what;
};

const Shape kShapes[] = {
    {3584, 18944, "7B ffn_gate/up"},
    {18944, 3584, "7B ffn_down"},
    {896, 4864, "0.5B ffn_gate/up"},
    {3584, 152064, "7B output"},
};

const minfer::TensorType kTypes[] = {
    minfer::TensorType::Q4_0, minfer::TensorType::Q4_1, minfer::TensorType::Q5_0,
    minfer::TensorType::Q5_1, minfer::TensorType::Q8_0, minfer::TensorType::Q4_K,
    minfer::TensorType::Q5_K, minfer::TensorType::Q6_K, minfer::TensorType::F16,
    minfer::TensorType::BF16, minfer::TensorType::F32};

bool ok(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return true;
  std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
  return false;
}

/// Random bytes (xorshift64*): weights whose half fields may be NaN/inf, which does not change
/// the kernels' speed (no data-dependent branches).
void fill_random(std::vector<uint8_t>& v, uint64_t seed) {
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  size_t i = 0;
  for (; i + 8 <= v.size(); i += 8) {
    s ^= s >> 12;
    s ^= s << 25;
    s ^= s >> 27;
    const uint64_t r = s * 0x2545F4914F6CDD1Dull;
    std::memcpy(v.data() + i, &r, 8);
  }
  for (; i < v.size(); ++i) v[i] = static_cast<uint8_t>(i * 131);
}

int run(int n, int iters, const std::string& only, double rotate_mb) {
  int dev_count = 0;
  if (cudaGetDeviceCount(&dev_count) != cudaSuccess || dev_count == 0) {
    std::printf("bench_cuda_matmul: no CUDA device, nothing measured\n");
    return 0;
  }
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  std::printf("device: %s, %d SMs, L2 %d MB; n = %d, %d calls per measurement\n", prop.name,
              prop.multiProcessorCount, prop.l2CacheSize >> 20, n, iters);
  std::printf("%-5s %-18s %-14s %10s %10s %9s %7s %10s\n", "type", "shape [k x m]", "", "MB",
              "us/call", "GB/s", "% 4.2T", "quant us");
  cudaStream_t stream;
  if (!ok(cudaStreamCreate(&stream), "cudaStreamCreate")) return 1;
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);

  for (const minfer::TensorType type : kTypes) {
    const std::string tname(minfer::type_name(type));
    if (!only.empty() && only != tname) continue;
    for (const Shape& s : kShapes) {
      char shape[32];
      std::snprintf(shape, sizeof shape, "%lld x %lld", static_cast<long long>(s.k),
                    static_cast<long long>(s.m));
      const char* why = nullptr;
      if (!minfer::cuda::matmul_supported(type, s.k, &why)) {
        std::printf("%-5s %-18s %-14s  n/a: %s\n", tname.c_str(), shape, s.what, why);
        continue;
      }
      const size_t bytes = minfer::row_bytes(type, s.k) * static_cast<size_t>(s.m);
      const int copies = static_cast<int>(std::max<double>(2.0, rotate_mb * 1e6 / static_cast<double>(bytes) + 1.0));
      std::vector<void*> w(static_cast<size_t>(copies), nullptr);
      std::vector<uint8_t> host(bytes);
      fill_random(host, static_cast<uint64_t>(type) * 7 + static_cast<uint64_t>(s.m));
      bool good = true;
      for (auto& p : w) {
        good = good && ok(cudaMalloc(&p, bytes), "cudaMalloc weights") &&
               ok(cudaMemcpy(p, host.data(), bytes, cudaMemcpyHostToDevice), "upload weights");
      }
      std::vector<float> xh(static_cast<size_t>(s.k * n));
      for (size_t i = 0; i < xh.size(); ++i) xh[i] = static_cast<float>((i * 2654435761u) % 2001) / 1000.0f - 1.0f;
      void *x = nullptr, *qx = nullptr, *y = nullptr;
      const size_t qbytes = std::max<size_t>(16, minfer::cuda::quantized_activation_bytes(type, s.k, n));
      good = good && ok(cudaMalloc(&x, xh.size() * 4), "cudaMalloc x") &&
             ok(cudaMalloc(&qx, qbytes), "cudaMalloc qx") &&
             ok(cudaMalloc(&y, static_cast<size_t>(s.m * n) * 4), "cudaMalloc y") &&
             ok(cudaMemcpy(x, xh.data(), xh.size() * 4, cudaMemcpyHostToDevice), "upload x");
      if (good) {
        const auto* xf = static_cast<const float*>(x);
        auto* yf = static_cast<float*>(y);
        auto call = [&](int i) {
          return minfer::cuda::matmul(type, w[static_cast<size_t>(i % copies)], s.k, s.m, xf, qx, n, yf,
                                      s.m, stream);
        };
        good = minfer::cuda::quantize_activations(type, xf, s.k, n, qx, stream);
        for (int i = 0; i < 3 && good; ++i) good = call(i);
        cudaEventRecord(e0, stream);
        for (int i = 0; i < iters && good; ++i) good = call(i);
        cudaEventRecord(e1, stream);
        good = good && ok(cudaEventSynchronize(e1), "matmul");
        float ms = 0.0f;
        cudaEventElapsedTime(&ms, e0, e1);
        const double us = 1e3 * ms / iters;
        cudaEventRecord(e0, stream);
        for (int i = 0; i < iters && good; ++i)
          good = minfer::cuda::quantize_activations(type, xf, s.k, n, qx, stream);
        cudaEventRecord(e1, stream);
        good = good && ok(cudaEventSynchronize(e1), "quantize");
        float qms = 0.0f;
        cudaEventElapsedTime(&qms, e0, e1);
        const double gbs = static_cast<double>(bytes) / (us * 1e-6) / 1e9;
        if (good)
          std::printf("%-5s %-18s %-14s %10.1f %10.2f %9.1f %6.1f%% %10.2f\n", tname.c_str(), shape,
                      s.what, static_cast<double>(bytes) / 1e6, us, gbs,
                      100.0 * gbs * 1e9 / kPeakBytesPerSecond, 1e3 * qms / iters);
        else
          std::printf("%-5s %-18s %-14s  FAILED\n", tname.c_str(), shape, s.what);
      }
      for (void* p : w) cudaFree(p);
      cudaFree(x);
      cudaFree(qx);
      cudaFree(y);
    }
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaStreamDestroy(stream);
  return 0;
}
#endif

}  // namespace

int main(int argc, char** argv) {
  int n = 1, iters = 200;
  double rotate_mb = 512.0;
  std::string only;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "--n" && has_value) {
      n = std::atoi(argv[++i]);
    } else if (a == "--iters" && has_value) {
      iters = std::atoi(argv[++i]);
    } else if (a == "--type" && has_value) {
      only = argv[++i];
    } else if (a == "--rotate-mb" && has_value) {
      rotate_mb = std::atof(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: %s [--n N] [--iters I] [--type NAME] [--rotate-mb MB]\n", argv[0]);
      return 2;
    }
  }
  if (n < 1 || n > 4096 || iters < 1 || rotate_mb < 0) {
    std::fprintf(stderr, "bench_cuda_matmul: --n must be 1..4096, --iters >= 1\n");
    return 2;
  }
#ifdef MINFER_HAS_CUDA
  return run(n, iters, only, rotate_mb);
#else
  (void)only;
  std::printf("bench_cuda_matmul: built without CUDA, nothing measured\n");
  return 0;
#endif
}
