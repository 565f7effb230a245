// printable(): file-derived strings reach the terminal with control characters and invalid
// UTF-8 escaped, valid text unchanged; every log line goes through it.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "core/log.h"
#include "core/printable.h"
#include "core/progress.h"

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

TEST(Printable, EscapesUnicodeBidiControls) {
  // U+202E RIGHT-TO-LEFT OVERRIDE would show the rest of the line reversed ("fdp.gguf" as "fugg.pdf").
  EXPECT_EQ(printable("evil\xe2\x80\xae" "fdp.gguf"), "evil\\u202efdp.gguf");
  // Embeddings and overrides LRE RLE PDF LRO RLO (U+202A..U+202E), isolates LRI RLI FSI PDI
  // (U+2066..U+2069), marks LRM RLM (U+200E, U+200F) and the Arabic letter mark ALM (U+061C).
  EXPECT_EQ(printable("\xe2\x80\xaa\xe2\x80\xab\xe2\x80\xac\xe2\x80\xad\xe2\x80\xae"),
            "\\u202a\\u202b\\u202c\\u202d\\u202e");
  EXPECT_EQ(printable("\xe2\x81\xa6\xe2\x81\xa7\xe2\x81\xa8\xe2\x81\xa9"), "\\u2066\\u2067\\u2068\\u2069");
  EXPECT_EQ(printable("a\xe2\x80\x8e" "b\xe2\x80\x8f" "c\xd8\x9c" "d"), "a\\u200eb\\u200fc\\u061cd");
  // Their neighbours are text and stay as they are: ZWJ U+200D (emoji sequences), U+2029,
  // U+202F (narrow no-break space), U+2065, U+206A, Arabic U+061B and U+061D.
  const std::string neighbours = "\xe2\x80\x8d \xe2\x80\xa9 \xe2\x80\xaf \xe2\x81\xa5 \xe2\x81\xaa \xd8\x9b \xd8\x9d";
  EXPECT_EQ(printable(neighbours), neighbours);
  EXPECT_EQ(printable("\xe2\x80\xae\"", true), "\\u202e\\\"");
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

namespace minfer {
namespace {

// The progress bar's detail (a tensor name read from a model file) is escaped before it reaches the
// terminal, and cut to the room left on the line without splitting a UTF-8 character.
TEST(ProgressDetail, ControlBytesAreEscapedAndCutsKeepCharactersWhole) {
  const std::string evil = "\x1b]0;PWN\x07\x1b[31mRED\x1b[m";
  const std::string shown = ProgressBar::fit_detail(evil, 200);
  EXPECT_EQ(shown.find('\x1b'), std::string::npos) << shown;
  EXPECT_EQ(shown.find('\x07'), std::string::npos) << shown;
  EXPECT_EQ(shown, printable(evil));
  // "blk.\xc3\xa9" is "blk." + U+00E9 (2 bytes): 5 bytes of room must not keep half of it.
  EXPECT_EQ(ProgressBar::fit_detail("blk.\xc3\xa9x", 5), "blk.");
  EXPECT_EQ(ProgressBar::fit_detail("blk.\xc3\xa9x", 6), "blk.\xc3\xa9");
  EXPECT_EQ(ProgressBar::fit_detail("abc", 0), "");
  EXPECT_EQ(ProgressBar::fit_detail("abc", 10), "abc");
}

}  // namespace
}  // namespace minfer
