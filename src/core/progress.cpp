#include "core/progress.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "core/printable.h"

namespace minfer {

bool ProgressBar::enabled() { return isatty(STDERR_FILENO) == 1; }

ProgressBar::ProgressBar(std::string label, uint64_t total)
    : label_(std::move(label)), total_(total == 0 ? 1 : total), enabled_(enabled()) {}

ProgressBar::~ProgressBar() { finish(); }

void ProgressBar::advance(uint64_t amount) {
  done_.fetch_add(amount, std::memory_order_relaxed);
  if (enabled_) draw(false);
}

void ProgressBar::set_detail(const std::string& detail) {
  if (!enabled_) return;
  {
    std::lock_guard lock(mu_);
    detail_ = detail;
  }
  draw(false);
}

std::string ProgressBar::fit_detail(const std::string& detail, int room) {
  std::string d = printable(detail);
  if (room <= 0) return {};
  if (d.size() > static_cast<size_t>(room)) {
    size_t cut = static_cast<size_t>(room);
    while (cut > 0 && (static_cast<unsigned char>(d[cut]) & 0xC0u) == 0x80u) --cut;  // not inside a character
    d.resize(cut);
  }
  return d;
}

void ProgressBar::finish() {
  if (!enabled_ || finished_) return;
  done_.store(total_);
  draw(true);
  std::fputc('\n', stderr);
  finished_ = true;
}

void ProgressBar::draw(bool force) {
  std::lock_guard lock(mu_);
  if (finished_) return;
  const auto now = std::chrono::steady_clock::now();
  if (!force && now - last_draw_ < std::chrono::milliseconds(100)) return;
  last_draw_ = now;
  winsize ws{};
  int width = 80;
  if (ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 20) width = ws.ws_col;
  const double frac = std::min(1.0, static_cast<double>(done_.load()) / static_cast<double>(total_));
  const int bar = std::max(10, std::min(40, width - static_cast<int>(label_.size()) - 30));
  const int filled = static_cast<int>(frac * bar);
  std::string line = "\r" + label_ + " [";
  line.append(static_cast<size_t>(filled), '#');
  line.append(static_cast<size_t>(bar - filled), '.');
  char pct[16];
  std::snprintf(pct, sizeof pct, "] %3d%% ", static_cast<int>(frac * 100.0));
  line += pct;
  const int room = width - static_cast<int>(line.size()) - 1;
  if (room > 0) line += fit_detail(detail_, room);
  line += "\x1b[K";  // clear to end of line
  std::fputs(line.c_str(), stderr);
  std::fflush(stderr);
}

}  // namespace minfer
