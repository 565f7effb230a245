#include "convert/model_writer.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <memory>

#include "convert/synth_random.h"
#include "core/error.h"
#include "core/progress.h"
#include "core/thread_pool.h"

namespace minfer::convert {

void check_not_overwriting(const std::string& output, const std::string& input) {
  std::error_code ec;
  const bool same = std::filesystem::exists(output, ec) && std::filesystem::equivalent(input, output, ec);
  MINFER_CHECK(!same, "{}: the output would overwrite the input {}", output, input);
}

void write_model(gguf::GgufWriter& w, std::vector<TensorJob> jobs, const std::string& path,
                 int n_threads, bool progress, const std::string& label) {
  MINFER_CHECK(n_threads >= 0, "thread count {} is negative", n_threads);
  const int threads = n_threads > 0 ? n_threads : default_thread_count();
  auto pool = std::make_shared<ThreadPool>(threads);
  const auto elements = [](const TensorJob& j) {
    uint64_t n = 1;
    for (int64_t d : j.ne) n *= static_cast<uint64_t>(d);
    return n;
  };
  uint64_t total = 0;
  for (const TensorJob& j : jobs) total += elements(j);
  std::unique_ptr<ProgressBar> bar;
  if (progress) bar = std::make_unique<ProgressBar>(label, total);
  ProgressBar* pb = bar.get();
  for (TensorJob& j : jobs) {
    auto job = std::make_shared<TensorJob>(std::move(j));
    const uint64_t n_elements = elements(*job);
    w.add_tensor(job->name, job->type, job->ne, [job, pool, pb, n_elements](uint8_t* dst, size_t nbytes) {
      if (pb) pb->set_detail(job->name);
      if (!job->raw.empty()) {
        MINFER_CHECK(job->raw.size() == nbytes, "{}: {} bytes of data for {} bytes of tensor", job->name,
              job->raw.size(), nbytes);
        std::memcpy(dst, job->raw.data(), nbytes);
        if (pb) pb->advance(n_elements);
        return;
      }
      int64_t n_rows = 1;
      for (size_t d = 1; d < job->ne.size(); ++d) n_rows *= job->ne[d];
      const int64_t encoded = job->distinct_rows > 0 ? std::min(n_rows, job->distinct_rows) : n_rows;
      encode_rows(job->type, job->ne[0], encoded, job->rows, dst, *pool, job->name,
                  pb ? RowProgress([pb](uint64_t n) { pb->advance(n); }) : RowProgress());
      if (encoded < n_rows) {
        const size_t rb = nbytes / static_cast<size_t>(n_rows);
        for (int64_t r = encoded; r < n_rows; ++r) {
          const uint64_t src = counter_hash(job->repeat_key, static_cast<uint64_t>(r)) % static_cast<uint64_t>(encoded);
          std::memcpy(dst + static_cast<size_t>(r) * rb, dst + src * rb, rb);
        }
        if (pb) pb->advance(static_cast<uint64_t>(n_rows - encoded) * static_cast<uint64_t>(job->ne[0]));
      }
      if (!job->zero_rows.empty()) {
        MINFER_CHECK(static_cast<int64_t>(job->zero_rows.size()) == n_rows, "{}: {} zero-row flags for {} rows",
                     job->name, job->zero_rows.size(), n_rows);
        const size_t rb = nbytes / static_cast<size_t>(n_rows);
        for (int64_t r = 0; r < n_rows; ++r)
          if (job->zero_rows[static_cast<size_t>(r)]) std::memset(dst + static_cast<size_t>(r) * rb, 0, rb);
      }
    });
  }
  w.write(path);
  if (bar) bar->finish();
}

}  // namespace minfer::convert
