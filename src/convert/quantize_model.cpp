#include "convert/quantize_model.h"

#include <algorithm>
#include <filesystem>
#include <numeric>
#include <set>

#include "convert/model_writer.h"
#include "core/error.h"
#include "core/log.h"
#include "gguf/gguf.h"
#include "gguf/gguf_writer.h"
#include "quant/quant.h"

namespace minfer::convert {
namespace {

/// The GGUF quantization format version llama.cpp writes (ggml.h GGML_QNT_VERSION).
constexpr uint32_t kQuantizationVersion = 2;

/// `<arch>.block_count`, or the number of distinct "blk.N." prefixes when the key is absent.
int layer_count(const gguf::GgufFile& f) {
  if (auto arch = f.get_string("general.architecture")) {
    if (auto n = f.get_u32(std::string(*arch) + ".block_count")) return static_cast<int>(*n);
  }
  std::set<std::string> layers;
  for (const gguf::TensorInfo& t : f.tensors()) {
    if (t.name.rfind("blk.", 0) != 0) continue;
    const size_t dot = t.name.find('.', 4);
    if (dot != std::string::npos) layers.insert(t.name.substr(4, dot - 4));
  }
  return static_cast<int>(layers.size());
}

/// Bytes of a tensor of `type` with dimensions `ne` (ne[0] a multiple of the block size).
uint64_t tensor_bytes(TensorType type, const std::vector<int64_t>& ne) {
  int64_t bs = 0;
  size_t bb = 0;
  MINFER_ASSERT(type_block_layout(type, &bs, &bb));
  int64_t n = 1;
  for (int64_t d : ne) n *= d;
  return static_cast<uint64_t>(n / bs) * bb;
}

}  // namespace

QuantizeReport quantize_model(const QuantizeOptions& opt) {
  check_not_overwriting(opt.output, opt.input);
  const auto in = gguf::GgufFile::open(opt.input);
  if (auto n = in->get_u32("split.count"); n && *n > 1)
    fail("{}: split GGUF files ({} parts) are not supported; merge them first", opt.input, *n);

  // Plan every tensor's type.
  const auto& infos = in->tensors();
  std::vector<MixTensor> mt;
  mt.reserve(infos.size());
  for (const gguf::TensorInfo& t : infos)
    mt.push_back(MixTensor{t.name, t.type, std::vector<int64_t>(t.ne, t.ne + t.n_dims)});
  const std::vector<MixChoice> plan = plan_tensor_types(opt.ftype, mt, layer_count(*in), opt.pure);

  QuantizeReport rep;
  rep.n_tensors = infos.size();
  std::vector<size_t> order(infos.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return llama_tensor_order_less(infos[a].name, infos[b].name);
  });

  std::vector<TensorJob> jobs;
  jobs.reserve(infos.size());
  for (size_t k : order) {
    const gguf::TensorInfo& t = infos[k];
    TensorType type = plan[k].type;
    if (t.n_dims == 1 && !plan[k].quantizable) type = TensorType::F32;  // norms and biases
    if (plan[k].fell_back) {
      rep.fallback_notes.push_back(describe_fallback(mt[k], plan[k]));
      ++rep.n_fallback;
    }
    TensorJob job;
    job.name = t.name;
    job.ne.assign(t.ne, t.ne + t.n_dims);
    job.type = type;
    rep.bytes_in += t.nbytes;
    if (type == t.type) {
      job.raw = std::span<const uint8_t>(t.data, static_cast<size_t>(t.nbytes));
      ++rep.n_copied;
    } else {
      const TypeTraits* src = find_type_traits(t.type);
      if (src == nullptr || src->dequantize_row == nullptr)
        fail("{}: tensor {} has type {}, which minfer cannot dequantize (to write it as {})",
             opt.input, t.name, type_name(t.type), type_name(type));
      const TypeTraits* out_traits = find_type_traits(type);
      std::vector<TensorType>& seen =
          out_traits != nullptr && out_traits->quantized ? rep.requantized_from : rep.dequantized_from;
      if (src->quantized && std::find(seen.begin(), seen.end(), t.type) == seen.end()) seen.push_back(t.type);
      const size_t src_row = row_bytes(t.type, t.ne[0]);
      const uint8_t* base = t.data;
      const int64_t n = t.ne[0];
      const DequantizeRowFn deq = src->dequantize_row;
      job.rows = [base, src_row, n, deq](int64_t row, float* dst) {
        deq(base + static_cast<size_t>(row) * src_row, dst, n);
      };
      ++rep.n_converted;
    }
    jobs.push_back(std::move(job));
  }
  for (const TensorJob& j : jobs) rep.bytes_out += tensor_bytes(j.type, j.ne);

  for (const std::string& note : rep.fallback_notes) log_warn("{}", note);
  if (rep.n_fallback > 0)
    log_warn("{} of {} tensors needed a fallback type (row length not a multiple of the block size)",
             rep.n_fallback, rep.n_tensors);
  const auto type_list = [](const std::vector<TensorType>& ts) {
    std::string out;
    for (TensorType t : ts) out += (out.empty() ? "" : ", ") + std::string(type_name(t));
    return out;
  };
  if (!rep.requantized_from.empty())
    log_warn("{}: requantizing tensors that are already quantized ({}): the result carries both "
             "rounding errors; quantize from an f32/f16/bf16 file when you have one",
             opt.input, type_list(rep.requantized_from));
  if (!rep.dequantized_from.empty())
    log_warn("{}: tensors that are quantized ({}) are written as floats: they keep that quantization's "
             "error (this does not restore the original model's precision)",
             opt.input, type_list(rep.dequantized_from));

  // Metadata: every key as it is, then the two keys llama-quantize sets (removed first so they
  // land at the end, where gguf_set_val_u32 puts them).
  gguf::GgufWriter w;
  for (const gguf::KeyValue& kv : in->metadata()) w.set_value(kv.key, kv.value);
  w.remove("general.quantization_version");
  w.remove("general.file_type");
  w.set_u32("general.quantization_version", kQuantizationVersion);
  w.set_u32("general.file_type", static_cast<uint32_t>(opt.ftype));

  write_model(w, std::move(jobs), opt.output, opt.n_threads, opt.progress, "quantize");
  return rep;
}

}  // namespace minfer::convert
