// Device micro-benchmark of the prefill matrix product on quantized weights (MMQ, int8 tensor
// cores): per weight type, model shape [k x m] (ggml order: m rows of k elements) and token
// count n, the time of one matmul() call (CUDA events over many calls, each on the next of
// several weight copies so the L2 cache does not hold the weights across calls), as int8
// tera-operations per second (2 m n k / time) and as a share of
//   - the measured ceiling of the instruction MMQ uses: a probe kernel that issues only
//     independent mma.sync m16n8k32 int8 instructions on every SM (mma_probe.cuh), and
//   - the H200 datasheet's dense int8 peak, 1,979 TOPS (reached with wgmma, not mma.sync).
// Options:
//   --n N[,N...]     token counts (default 512,2048)
//   --type NAME      one weight type (default: q4_0 q8_0 q4_K q6_K; "all": every MMQ type)
//   --gemm           also time the previous f32 GEMM path (what MINFER_NO_MMQ=1 runs)
//   --crossover      for n = 1..16: MMVQ (n <= 8) vs MMQ per call on the 7B ffn shapes, to
//                    place kMmqMinTokens
//   --iters I        calls per measurement (default 20)
//   --rotate-mb MB   bytes of weight copies to rotate through (default 256)
// Exits 0 with a note when there is no CUDA device.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#ifdef MINFER_HAS_CUDA
#include <cuda_runtime.h>

#include "cuda/kernels/gemm.cuh"
#include "cuda/kernels/matmul.cuh"
#include "cuda/kernels/mma_probe.cuh"
#include "cuda/kernels/mmq.cuh"
#include "cuda/kernels/quantize_acts.cuh"
#include "quant/quant.h"
#endif

namespace {

#ifdef MINFER_HAS_CUDA
using minfer::TensorType;

constexpr double kDatasheetInt8Tops = 1979.0;  // H200 SXM, dense int8 (NVIDIA datasheet)

struct Shape {
  int64_t k, m;
  const char* what;
};

// The matmuls of one layer of each benchmark model (attention q/k/v/o, ffn gate/up/down).
const Shape kShapes[] = {
    {896, 896, "0.5B q/o"},       {896, 128, "0.5B k/v"},       {896, 4864, "0.5B gate/up"},
    {4864, 896, "0.5B down"},     {1536, 1536, "1.5B q/o"},     {1536, 8960, "1.5B gate/up"},
    {8960, 1536, "1.5B down"},    {3584, 3584, "7B q/o"},       {3584, 512, "7B k/v"},
    {3584, 18944, "7B gate/up"},  {18944, 3584, "7B down"},     {4096, 4096, "8B q/o"},
    {4096, 1024, "8B k/v"},       {4096, 12288, "8B gate/up"},  {12288, 4096, "8B down"},
};

bool ok(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return true;
  std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
  return false;
}

/// Random bytes (xorshift64*) with every half field of a block set to a small finite scale, so
/// no NaN or inf enters the arithmetic.
void fill_weights(std::vector<uint8_t>& v, TensorType type, uint64_t seed) {
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  size_t i = 0;
  for (; i + 8 <= v.size(); i += 8) {
    s ^= s >> 12;
    s ^= s << 25;
    s ^= s >> 27;
    const uint64_t r = s * 0x2545F4914F6CDD1Dull;
    std::memcpy(v.data() + i, &r, 8);
  }
  const minfer::TypeTraits& t = minfer::type_traits(type);
  std::vector<size_t> halves = {0};
  if (type == TensorType::Q4_1 || type == TensorType::Q5_1 || type == TensorType::Q4_K || type == TensorType::Q5_K)
    halves = {0, 2};
  if (type == TensorType::Q6_K) halves = {208};
  const uint16_t h = 0x1400;  // 2^-10
  for (size_t b = 0; b + t.block_bytes <= v.size(); b += t.block_bytes)
    for (size_t off : halves) std::memcpy(v.data() + b + off, &h, 2);
}

class Timer {
 public:
  explicit Timer(cudaStream_t s) : s_(s) {
    cudaEventCreate(&e0_);
    cudaEventCreate(&e1_);
  }
  ~Timer() {
    cudaEventDestroy(e0_);
    cudaEventDestroy(e1_);
  }
  /// Mean milliseconds of f() over `iters` calls after 2 warm-up calls; < 0 when a call failed.
  template <typename F>
  double ms(int iters, F&& f) {
    for (int i = 0; i < 2; ++i)
      if (!f(i)) return -1.0;
    cudaEventRecord(e0_, s_);
    for (int i = 0; i < iters; ++i)
      if (!f(i)) return -1.0;
    cudaEventRecord(e1_, s_);
    if (!ok(cudaEventSynchronize(e1_), "timing")) return -1.0;
    float t = 0.0f;
    cudaEventElapsedTime(&t, e0_, e1_);
    return static_cast<double>(t) / iters;
  }

 private:
  cudaStream_t s_;
  cudaEvent_t e0_{}, e1_{};
};

/// TOPS the mma.sync probe sustains on every SM (best of 3).
double probe_peak(cudaStream_t stream, int sms) {
  const int blocks = sms * 4, iters = 4096;
  int* sink = nullptr;
  if (!ok(cudaMalloc(&sink, static_cast<size_t>(blocks) * 4), "cudaMalloc sink")) return 0.0;
  Timer timer(stream);
  double best = 0.0;
  for (int r = 0; r < 3; ++r) {
    const double ms = timer.ms(3, [&](int) { return minfer::cuda::launch_mma_probe(blocks, iters, sink, stream); });
    if (ms <= 0) break;
    const double ops = 2.0 * 16 * 8 * 32 * blocks * static_cast<double>(minfer::cuda::kMmaProbeWarps) * iters *
                       minfer::cuda::kMmaProbeChains;
    best = std::max(best, ops / (ms * 1e-3) / 1e12);
  }
  cudaFree(sink);
  return best;
}

struct Options {
  std::vector<int> ns = {512, 2048};
  std::string type;
  bool gemm = false, crossover = false;
  int iters = 20;
  double rotate_mb = 256.0;
};

std::vector<TensorType> types_for(const std::string& name) {
  const std::vector<TensorType> all = {TensorType::Q4_0, TensorType::Q4_1, TensorType::Q5_0, TensorType::Q5_1,
                                       TensorType::Q8_0, TensorType::Q4_K, TensorType::Q5_K, TensorType::Q6_K};
  if (name == "all") return all;
  if (name.empty()) return {TensorType::Q4_0, TensorType::Q8_0, TensorType::Q4_K, TensorType::Q6_K};
  for (TensorType t : all)
    if (minfer::type_name(t) == name) return {t};
  return {};
}

/// Device buffers of one (type, shape, n) problem.
struct Problem {
  std::vector<void*> w;
  void *x = nullptr, *qx = nullptr, *y = nullptr;
  ~Problem() {
    for (void* p : w) cudaFree(p);
    cudaFree(x);
    cudaFree(qx);
    cudaFree(y);
  }
};

bool setup(Problem& p, TensorType type, const Shape& s, int n, double rotate_mb) {
  const size_t bytes = minfer::row_bytes(type, s.k) * static_cast<size_t>(s.m);
  const int copies = static_cast<int>(std::max<double>(2.0, rotate_mb * 1e6 / static_cast<double>(bytes) + 1.0));
  std::vector<uint8_t> host(bytes);
  fill_weights(host, type, static_cast<uint64_t>(type) * 7 + static_cast<uint64_t>(s.m));
  p.w.assign(static_cast<size_t>(copies), nullptr);
  for (auto& q : p.w)
    if (!ok(cudaMalloc(&q, bytes), "cudaMalloc weights") ||
        !ok(cudaMemcpy(q, host.data(), bytes, cudaMemcpyHostToDevice), "upload weights"))
      return false;
  std::vector<float> xh(static_cast<size_t>(s.k) * static_cast<size_t>(n));
  for (size_t i = 0; i < xh.size(); ++i) xh[i] = static_cast<float>((i * 2654435761u) % 2001) / 1000.0f - 1.0f;
  const size_t qbytes = std::max<size_t>(16, minfer::cuda::quantized_activation_bytes(type, s.k, n));
  return ok(cudaMalloc(&p.x, xh.size() * 4), "cudaMalloc x") && ok(cudaMalloc(&p.qx, qbytes), "cudaMalloc qx") &&
         ok(cudaMalloc(&p.y, static_cast<size_t>(s.m) * static_cast<size_t>(n) * 4), "cudaMalloc y") &&
         ok(cudaMemcpy(p.x, xh.data(), xh.size() * 4, cudaMemcpyHostToDevice), "upload x");
}

minfer::cuda::mm::ActLayout layout(TensorType type, int64_t k, int64_t n) {
  const bool kq = type == TensorType::Q4_K || type == TensorType::Q5_K || type == TensorType::Q6_K;
  return minfer::cuda::mm::act_layout(kq ? minfer::cuda::mm::ActKind::Q8K : minfer::cuda::mm::ActKind::Q8, k, n);
}

void bench_shapes(const Options& o, cudaStream_t stream, double peak) {
  std::printf("%-5s %-14s %-13s %5s %10s %8s %7s %7s %9s%s\n", "type", "shape [k x m]", "", "n", "us/call", "TOPS",
              "%probe", "%1979", "quant us", o.gemm ? "  gemm us  gemm TOPS" : "");
  Timer timer(stream);
  for (const TensorType type : types_for(o.type)) {
    const std::string tname(minfer::type_name(type));
    for (const Shape& s : kShapes) {
      const char* why = nullptr;
      char shape[32];
      std::snprintf(shape, sizeof shape, "%lld x %lld", static_cast<long long>(s.k), static_cast<long long>(s.m));
      if (!minfer::cuda::matmul_supported(type, s.k, &why)) {
        std::printf("%-5s %-14s %-13s  n/a: %s\n", tname.c_str(), shape, s.what, why);
        continue;
      }
      for (const int n : o.ns) {
        Problem p;
        if (!setup(p, type, s, n, o.rotate_mb)) return;
        const auto* xf = static_cast<const float*>(p.x);
        auto* yf = static_cast<float*>(p.y);
        const size_t copies = p.w.size();
        if (!minfer::cuda::quantize_activations(type, xf, s.k, n, p.qx, stream)) return;
        const double ms = timer.ms(o.iters, [&](int i) {
          return minfer::cuda::matmul(type, p.w[static_cast<size_t>(i) % copies], s.k, s.m, xf, p.qx, n, yf, s.m, stream);
        });
        const double qms = timer.ms(o.iters, [&](int) { return minfer::cuda::quantize_activations(type, xf, s.k, n, p.qx, stream); });
        const double ops = 2.0 * static_cast<double>(s.k) * static_cast<double>(s.m) * n;
        const double tops = ms > 0 ? ops / (ms * 1e-3) / 1e12 : 0.0;
        std::printf("%-5s %-14s %-13s %5d %10.1f %8.1f %6.1f%% %6.1f%% %9.1f", tname.c_str(), shape, s.what, n,
                    1e3 * ms, tops, peak > 0 ? 100.0 * tops / peak : 0.0, 100.0 * tops / kDatasheetInt8Tops, 1e3 * qms);
        if (o.gemm) {
          const auto L = layout(type, s.k, n);
          const auto rb = static_cast<int64_t>(minfer::row_bytes(type, s.k));
          const double gms = timer.ms(std::max(1, o.iters / 4), [&](int i) {
            return minfer::cuda::mm::launch_gemm(type, p.w[static_cast<size_t>(i) % copies], s.m, rb, L, p.qx, yf, s.m, stream);
          });
          std::printf("  %8.1f %9.1f", 1e3 * gms, gms > 0 ? ops / (gms * 1e-3) / 1e12 : 0.0);
        }
        std::printf("%s\n", ms > 0 ? "" : "  FAILED");
      }
    }
  }
}

void bench_crossover(const Options& o, cudaStream_t stream) {
  std::printf("crossover: us per call, MMVQ (matmul, n <= 8) vs MMQ (launch_mmq) on the same weights\n");
  std::printf("%-5s %-13s %3s %10s %10s\n", "type", "shape", "n", "MMVQ us", "MMQ us");
  Timer timer(stream);
  const Shape shapes[] = {{3584, 18944, "7B gate/up"}, {18944, 3584, "7B down"}};
  for (const TensorType type : types_for(o.type))
    for (const Shape& s : shapes)
      for (int n = 1; n <= 16; ++n) {
        Problem p;
        if (!setup(p, type, s, n, o.rotate_mb)) return;
        const auto* xf = static_cast<const float*>(p.x);
        auto* yf = static_cast<float*>(p.y);
        const size_t copies = p.w.size();
        if (!minfer::cuda::quantize_activations(type, xf, s.k, n, p.qx, stream)) return;
        double mmvq = -1.0;
        if (n <= 8)
          mmvq = timer.ms(o.iters, [&](int i) {
            return minfer::cuda::matmul(type, p.w[static_cast<size_t>(i) % copies], s.k, s.m, xf, p.qx, n, yf, s.m, stream);
          });
        const auto L = layout(type, s.k, n);
        const auto rb = static_cast<int64_t>(minfer::row_bytes(type, s.k));
        const double mmq = timer.ms(o.iters, [&](int i) {
          return minfer::cuda::mm::launch_mmq(type, p.w[static_cast<size_t>(i) % copies], s.m, rb, L, p.qx, yf, s.m, stream);
        });
        std::printf("%-5s %-13s %3d %10.1f %10.1f\n", std::string(minfer::type_name(type)).c_str(), s.what, n,
                    mmvq > 0 ? 1e3 * mmvq : 0.0, 1e3 * mmq);
      }
}

int run(const Options& o) {
  int dev_count = 0;
  if (cudaGetDeviceCount(&dev_count) != cudaSuccess || dev_count == 0) {
    std::printf("bench_cuda_mmq: no CUDA device, nothing measured\n");
    return 0;
  }
  if (types_for(o.type).empty()) {
    std::fprintf(stderr, "bench_cuda_mmq: unknown type %s\n", o.type.c_str());
    return 2;
  }
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  cudaStream_t stream;
  if (!ok(cudaStreamCreate(&stream), "cudaStreamCreate")) return 1;
  const double peak = probe_peak(stream, prop.multiProcessorCount);
  std::printf("device: %s, %d SMs, L2 %d MB; mma.sync m16n8k32 int8 probe: %.0f TOPS (%.1f%% of the "
              "datasheet's %.0f)\n",
              prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20, peak, 100.0 * peak / kDatasheetInt8Tops,
              kDatasheetInt8Tops);
  if (o.crossover)
    bench_crossover(o, stream);
  else
    bench_shapes(o, stream, peak);
  cudaStreamDestroy(stream);
  return 0;
}
#endif

}  // namespace

int main(int argc, char** argv) {
#ifdef MINFER_HAS_CUDA
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "--n" && has_value) {
      o.ns.clear();
      std::stringstream ss(argv[++i]);
      for (std::string part; std::getline(ss, part, ',');) o.ns.push_back(std::atoi(part.c_str()));
    } else if (a == "--type" && has_value) {
      o.type = argv[++i];
    } else if (a == "--iters" && has_value) {
      o.iters = std::atoi(argv[++i]);
    } else if (a == "--rotate-mb" && has_value) {
      o.rotate_mb = std::atof(argv[++i]);
    } else if (a == "--gemm") {
      o.gemm = true;
    } else if (a == "--crossover") {
      o.crossover = true;
    } else {
      std::fprintf(stderr,
                   "usage: %s [--n N[,N...]] [--type NAME|all] [--gemm] [--crossover] [--iters I] [--rotate-mb MB]\n",
                   argv[0]);
      return 2;
    }
  }
  for (const int n : o.ns)
    if (n < 1 || n > 65536) {
      std::fprintf(stderr, "bench_cuda_mmq: --n values must be 1..65536\n");
      return 2;
    }
  if (o.iters < 1 || o.rotate_mb < 0) {
    std::fprintf(stderr, "bench_cuda_mmq: --iters >= 1, --rotate-mb >= 0\n");
    return 2;
  }
  return run(o);
#else
  (void)argc;
  (void)argv;
  std::printf("bench_cuda_mmq: built without CUDA, nothing measured\n");
  return 0;
#endif
}
