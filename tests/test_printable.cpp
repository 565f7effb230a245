// printable(): file-derived strings reach the terminal with control characters and invalid
// UTF-8 escaped, valid text unchanged; every log line goes through it.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "core/log.h"
#include "core/printable.h"

namespace minfer {
namespace {

TEST(Printable, EscapesTerminalControlSequences) {
  // The general.name of the break-it report: OSC title, clear screen, colour, carriage return.
  EXPECT_EQ(printable("\x1b]0;pwned\x07\x1b[2J\x1b[31mEVIL\r"), "\\x1b]0;pwned\\x07\\x1b[2J\\x1b[31mEVIL\\r");
  EXPECT_EQ(printable("a\nb\tc\x7f"), "a\\nb\\tc\\x7f");
  EXPECT_EQ(printable(std::string("nul\0x", 5)), "nul\\x00x");
  // C1 controls as UTF-8 (U+009B is CSI for terminals that honour C1).
  EXPECT_EQ(printable("\xc2\x9b" "31m\xc2\x85"), "\\u009b31m\\u0085");
}

TEST(Printable, EscapesInvalidUtf8ByteByByte) {
  EXPECT_EQ(printable("\xff\xfe"), "\\xff\\xfe");
  EXPECT_EQ(printable("ab\xe4\xb8"), "ab\\xe4\\xb8");         // truncated 3-byte sequence
  EXPECT_EQ(printable("\xc0\xaf"), "\\xc0\\xaf");             // overlong '/'
  EXPECT_EQ(printable("\xed\xa0\x80"), "\\xed\\xa0\\x80");    // UTF-16 surrogate U+D800
  EXPECT_EQ(printable("\xf4\x90\x80\x80"), "\\xf4\\x90\\x80\\x80");  // above U+10FFFF
}

TEST(Printable, KeepsValidTextAndQuotesOnlyWhenAsked) {
  const std::string text = "Qwen2.5 \xe4\xb8\xad\xe6\x96\x87 \xc3\xa9 \xc2\xa0 \xf0\x9f\x98\x80 \"q\" \\";
  EXPECT_EQ(printable(text), text);
  EXPECT_EQ(printable("say \"hi\" \\ there", true), "say \\\"hi\\\" \\\\ there");
}

}  // namespace
}  // namespace minfer

namespace minfer {
namespace {

TEST(Printable, LogLinesEscapeControlBytesFromFileData) {
  // A warning that quotes a file name with an escape sequence, a bell and a newline in it.
  ::testing::internal::CaptureStderr();
  log_warn("{}: requantizing", std::string("in\x1b[31mX\a\n.gguf"));
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(err.find('\x1b'), std::string::npos) << err;
  EXPECT_EQ(err.find('\a'), std::string::npos) << err;
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << "one line: " << err;
  EXPECT_NE(err.find("minfer: warning: in"), std::string::npos) << err;
  EXPECT_NE(err.find(".gguf: requantizing"), std::string::npos) << err;
}

}  // namespace
}  // namespace minfer
