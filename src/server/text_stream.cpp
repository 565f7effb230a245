#include "server/text_stream.h"

#include "engine/generate.h"

namespace minfer::server {

TextStream::TextStream(const tok::Tokenizer& tokenizer, std::vector<std::string> stop)
    : detok_(tokenizer, false), stop_(std::move(stop)) {}

std::string TextStream::push(int32_t id, bool* stopped) {
  *stopped = false;
  if (stopped_) return {};
  text_ += detok_.push(id);
  size_t cut = std::string::npos;
  for (const std::string& s : stop_) {
    const size_t at = text_.find(s, emitted_ > s.size() ? emitted_ - s.size() : 0);
    if (at != std::string::npos && at < cut) cut = at;
  }
  if (cut != std::string::npos) {
    text_.resize(std::max(cut, emitted_));
    stopped_ = *stopped = true;
    std::string out = text_.substr(emitted_);
    emitted_ = text_.size();
    return out;
  }
  const size_t upto = text_.size() - held_suffix(text_, stop_);
  if (upto <= emitted_) return {};
  std::string out = text_.substr(emitted_, upto - emitted_);
  emitted_ = upto;
  return out;
}

std::string TextStream::finish() {
  if (stopped_) return {};
  text_ += detok_.flush();
  std::string out = text_.substr(emitted_);
  emitted_ = text_.size();
  return out;
}

}  // namespace minfer::server
