// libFuzzer entry point for model loading: the GGUF reader, then Model::from_file on what it
// parsed (hyper-parameters from the metadata, every tensor the architecture needs checked for
// name, shape and type, the tokenizer built from the tokenizer.* keys). Any input must either
// load or throw minfer::Error; a crash, a sanitizer report, or any other exception escaping is a
// finding. After a successful load, the hyper-parameters are checked for the invariants the
// engine relies on and the first and last byte of every weight are read.
#include <cstddef>
#include <cstdint>
#include <span>

#include "core/error.h"
#include "gguf/gguf.h"
#include "models/model.h"
#include "tokenizer/tokenizer.h"

namespace {

volatile uint64_t g_sink;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::shared_ptr<minfer::Model> m;
  try {
    m = minfer::Model::from_file(
        minfer::gguf::GgufFile::open_memory(std::span<const uint8_t>(data, size), "fuzz.gguf"));
    (void)m->tokenizer();  // the tokenizer's errors come from here (it is built on its own thread)
  } catch (const minfer::Error&) {
    return 0;
  }
  const minfer::HParams& h = m->hparams();
  // What a loaded model promises the graph builder: positive sizes, whole heads, GQA groups.
  if (h.n_embd <= 0 || h.n_layer <= 0 || h.n_head <= 0 || h.n_head_kv <= 0 || h.head_dim <= 0 ||
      h.n_vocab <= 0 || h.n_ff <= 0 || h.n_head % h.n_head_kv != 0)
    __builtin_trap();
  uint64_t acc = m->weight_bytes() + m->n_params();
  for (const auto& w : m->weights()) {
    if (w.nbytes > 0) acc += w.data[0] + w.data[w.nbytes - 1];
  }
  const auto& out = m->output_weight();
  if (out.ne[1] != h.n_vocab) __builtin_trap();
  if (const auto* t = m->tokenizer()) {
    if (t->n_vocab() > h.n_vocab) __builtin_trap();  // every token id has an embedding row
    acc += static_cast<uint64_t>(t->n_vocab());
  }
  g_sink = g_sink + acc;
  return 0;
}
