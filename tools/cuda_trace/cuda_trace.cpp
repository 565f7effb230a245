// A timeline tracer for the device machine, loaded into any CUDA program by the driver
// (CUDA_INJECTION64_PATH=libminfer_cuda_trace.so): it records through CUPTI's activity API every
// kernel the GPU runs (CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, which also covers the kernel nodes
// of replayed CUDA graphs), every memcpy and memset, and every CUDA runtime API call of the host,
// and writes them at exit as CSV to MINFER_CUDA_TRACE_OUT (default cuda_trace.csv), one line each:
//   kind,start_ns,end_ns,correlation_id,graph_id,grid_x,grid_y,block_x,dyn_smem_bytes,bytes,name
// kind: K kernel, M memcpy (name "memcpy HtoD" ...), S memset, A runtime API call (name
// "cudaGraphLaunch" ...; its start and end are host times). CUPTI puts GPU and host timestamps on
// one clock (ns). The kernels of one cudaGraphLaunch share its correlation id with the API record.
// scripts/trace_summary.py turns the file into per-kernel critical-path times (end_i - end_{i-1})
// and the host's work between two decode graphs.
// A profiling aid only: minfer itself never loads it, and nothing in the test suite needs it.
#include <cupti.h>
#include <cxxabi.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

namespace {

struct Rec {
  char kind;
  uint64_t start, end;
  uint32_t corr, graph;
  int32_t gx, gy, bx, smem;
  uint64_t bytes;
  std::string name;
};

/// "HtoD", "DtoH", ... for a CUpti_ActivityMemcpyKind.
const char* copy_kind(uint8_t k) {
  switch (k) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD: return "HtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH: return "DtoH";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD: return "DtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOH: return "HtoH";
    default: return "other";
  }
}

/// The runtime API function's name for a callback id ("?" when CUPTI does not know it).
std::string api_name(CUpti_CallbackId cbid) {
  const char* name = nullptr;
  if (cuptiGetCallbackName(CUPTI_CB_DOMAIN_RUNTIME_API, cbid, &name) != CUPTI_SUCCESS || name == nullptr) return "?";
  std::string s = name;
  if (const size_t at = s.find("_v"); at != std::string::npos) s.resize(at);  // cudaMemcpyAsync_v3020
  return s;
}

std::mutex g_mu;
std::vector<Rec>* g_recs = nullptr;
constexpr size_t kBufBytes = 8u << 20;

/// The demangled kernel name without its parameter list ("?" when CUPTI gave none).
std::string demangle(const char* mangled) {
  if (mangled == nullptr) return "?";
  int status = 0;
  char* d = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
  std::string s = status == 0 && d != nullptr ? d : mangled;
  std::free(d);
  for (size_t at; (at = s.find("(anonymous namespace)::")) != std::string::npos;) s.erase(at, 23);
  int depth = 0;  // cut at the parameter list: the first '(' outside the template arguments
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '<') ++depth;
    if (s[i] == '>') --depth;
    if (s[i] == '(' && depth == 0 && i > 0) {
      s.resize(i);
      break;
    }
  }
  for (char& c : s)
    if (c == '"' || c == ',') c = c == ',' ? ';' : '\'';
  return s;
}

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufBytes));
  *size = kBufBytes;
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  CUpti_Activity* rec = nullptr;
  std::lock_guard<std::mutex> lock(g_mu);
  while (cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
    if (rec->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL || rec->kind == CUPTI_ACTIVITY_KIND_KERNEL) {
      const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(rec);
      g_recs->push_back({'K', k->start, k->end, k->correlationId, k->graphId, k->gridX, k->gridY, k->blockX,
                         k->dynamicSharedMemory, 0, demangle(k->name)});
    } else if (rec->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
      const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(rec);
      g_recs->push_back({'M', m->start, m->end, m->correlationId, m->graphId, 0, 0, 0, 0, m->bytes,
                         std::string("memcpy ") + copy_kind(m->copyKind)});
    } else if (rec->kind == CUPTI_ACTIVITY_KIND_MEMSET) {
      const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(rec);
      g_recs->push_back({'S', m->start, m->end, m->correlationId, m->graphId, 0, 0, 0, 0, m->bytes, "memset"});
    } else if (rec->kind == CUPTI_ACTIVITY_KIND_RUNTIME) {
      const auto* a = reinterpret_cast<const CUpti_ActivityAPI*>(rec);
      g_recs->push_back({'A', a->start, a->end, a->correlationId, 0, 0, 0, 0, 0, 0, api_name(a->cbid)});
    }
  }
  std::free(buffer);
}

void write_out() {
  cuptiActivityFlushAll(1);
  const char* path = std::getenv("MINFER_CUDA_TRACE_OUT");
  if (path == nullptr || *path == '\0') path = "cuda_trace.csv";
  std::FILE* f = std::fopen(path, "w");
  if (f == nullptr) {
    std::fprintf(stderr, "cuda_trace: cannot write %s\n", path);
    return;
  }
  std::lock_guard<std::mutex> lock(g_mu);
  std::fprintf(f, "kind,start_ns,end_ns,correlation_id,graph_id,grid_x,grid_y,block_x,dyn_smem_bytes,bytes,name\n");
  for (const Rec& r : *g_recs)
    std::fprintf(f, "%c,%llu,%llu,%u,%u,%d,%d,%d,%d,%llu,\"%s\"\n", r.kind, static_cast<unsigned long long>(r.start),
                 static_cast<unsigned long long>(r.end), r.corr, r.graph, r.gx, r.gy, r.bx, r.smem,
                 static_cast<unsigned long long>(r.bytes), r.name.c_str());
  std::fclose(f);
  std::fprintf(stderr, "cuda_trace: %zu records written to %s\n", g_recs->size(), path);
}

}  // namespace

/// Called by the CUDA driver when it loads this library through CUDA_INJECTION64_PATH.
extern "C" __attribute__((visibility("default"))) int InitializeInjection() {
  g_recs = new std::vector<Rec>();
  g_recs->reserve(1 << 20);
  if (cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed) != CUPTI_SUCCESS ||
      cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS ||
      cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY) != CUPTI_SUCCESS ||
      cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMSET) != CUPTI_SUCCESS ||
      cuptiActivityEnable(CUPTI_ACTIVITY_KIND_RUNTIME) != CUPTI_SUCCESS) {
    std::fprintf(stderr, "cuda_trace: CUPTI activity tracing could not be enabled\n");
    return 0;
  }
  std::atexit(write_out);
  return 1;
}
