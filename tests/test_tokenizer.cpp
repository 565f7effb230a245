// Tokenizer algorithms on small vocabularies built in code: pre-tokenizer splits, BPE merge
// order, special/added token partition, tokenizer.json loading, streaming detokenization,
// round trips. The Qwen2 fixture vocabulary is tested in test_tokenizer_fixture.cpp.
#include <gtest/gtest.h>

#include <random>

#include "core/error.h"
#include "test_util.h"
#include "tokenizer/detokenizer.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"
#include "tokenizer_test_util.h"

namespace minfer::tok {
namespace {

using test::tiny_vocab;
using Ids = std::vector<int32_t>;

std::vector<std::string> split(std::string_view text, PreTokenizer kind = PreTokenizer::Qwen2) {
  static PreTokenizerRegex qwen2(PreTokenizer::Qwen2);
  static PreTokenizerRegex qwen35(PreTokenizer::Qwen35);
  std::vector<std::string_view> words;
  (kind == PreTokenizer::Qwen2 ? qwen2 : qwen35).split(text, words);
  return {words.begin(), words.end()};
}

using Words = std::vector<std::string>;

TEST(PreTokenizer, SplitsWordsWithTheirLeadingSpace) {
  EXPECT_EQ(split("Hello world"), (Words{"Hello", " world"}));
  EXPECT_EQ(split("你好世界 abc"), (Words{"你好世界", " abc"}));
}

TEST(PreTokenizer, ContractionsAreAsciiCaseInsensitive) {
  EXPECT_EQ(split("I'm"), (Words{"I", "'m"}));
  EXPECT_EQ(split("DON'T we'Re"), (Words{"DON", "'T", " we", "'Re"}));
  // U+017F (long s) is not an 's' here: with a Unicode caseless (?i:'s) it would split "'ſ".
  EXPECT_EQ(split("'\u017Fx"), (Words{"'\u017Fx"}));
}

TEST(PreTokenizer, DigitsAreSingleWords) {
  EXPECT_EQ(split("2024"), (Words{"2", "0", "2", "4"}));
  EXPECT_EQ(split("x=12"), (Words{"x", "=", "1", "2"}));
}

TEST(PreTokenizer, WhitespaceRunsLeaveTheLastSpaceToTheNextWord) {
  EXPECT_EQ(split("a  b"), (Words{"a", " ", " b"}));
  EXPECT_EQ(split("\t\tfoo"), (Words{"\t", "\tfoo"}));
  EXPECT_EQ(split("a   "), (Words{"a", "   "}));  // at the end the run stays whole
  // U+00A0 is White_Space: the run " \u00A0" gives its last character to the word.
  EXPECT_EQ(split(" \u00A0x"), (Words{" ", "\u00A0x"}));
}

TEST(PreTokenizer, NewlinesAndPunctuation) {
  EXPECT_EQ(split("x\n\ny"), (Words{"x", "\n\n", "y"}));
  EXPECT_EQ(split("ok!!\n"), (Words{"ok", "!!\n"}));
  EXPECT_EQ(split("a \n b"), (Words{"a", " \n", " b"}));
  EXPECT_EQ(split("\U0001F44D\U0001F3FD!"), (Words{"\U0001F44D\U0001F3FD!"}));
}

TEST(PreTokenizer, MongolianVowelSeparatorIsNotWhitespace) {
  // U+180E is not White_Space (PCRE2's UCP \s would count it): it joins the punctuation run.
  EXPECT_EQ(split("x!\u180E"), (Words{"x", "!\u180E"}));
}

TEST(PreTokenizer, Qwen35LetterRunsTakeCombiningMarks) {
  EXPECT_EQ(split("cafe\u0301s"), (Words{"cafe", "\u0301s"}));
  EXPECT_EQ(split("cafe\u0301s", PreTokenizer::Qwen35), (Words{"cafe\u0301s"}));
}

TEST(PreTokenizer, LongRunsOfOneClassDoNotHitTheJitStackLimit) {
  const std::string spaces(1 << 20, ' ');
  EXPECT_EQ(split(spaces + "x"), (Words{std::string((1 << 20) - 1, ' '), " x"}));
  const std::string letters(1 << 20, 'a');
  EXPECT_EQ(split(letters), (Words{letters}));
}

TEST(PreTokenizer, TenMillionCharacterWhitespaceRunsSplitAsShortRunsDo) {
  // PCRE2's default match limit (10M steps, about one per character of a whitespace run)
  // refused these; the words are those of the same structure at any length.
  constexpr size_t n = 10'000'000;
  const std::string spaces(n, ' ');
  EXPECT_EQ(split(" x"), (Words{" x"}));
  EXPECT_EQ(split("   x"), (Words{"  ", " x"}));
  std::vector<std::string> words = split(spaces + "x");
  ASSERT_EQ(words.size(), 2u);
  EXPECT_EQ(words[0].size(), n - 1);
  EXPECT_EQ(words[0].find_first_not_of(' '), std::string::npos);
  EXPECT_EQ(words[1], " x");
  words = split(spaces);  // at the end the run stays whole
  ASSERT_EQ(words.size(), 1u);
  EXPECT_EQ(words[0].size(), n);
  // Spaces and tabs up to a newline are one word with it (short: "\t \n" then " y").
  EXPECT_EQ(split("\t \n y"), (Words{"\t \n", " y"}));
  std::string mixed;
  for (size_t i = 0; i < n / 2; ++i) mixed += i % 3 ? " " : "\t ";
  words = split("a" + mixed + "\n y");
  ASSERT_EQ(words.size(), 3u);
  EXPECT_EQ(words[0], "a");
  EXPECT_EQ(words[1], mixed + "\n");
  EXPECT_EQ(words[2], " y");
  // A run of the ideographic space U+3000 (3 bytes, White_Space).
  std::string ideo;
  for (size_t i = 0; i < n / 3; ++i) ideo += "\u3000";
  words = split(ideo + "z");
  ASSERT_EQ(words.size(), 2u);
  EXPECT_EQ(words[0].size(), ideo.size() - 3);
  EXPECT_EQ(words[1], "\u3000z");
}

TEST(PreTokenizer, SplittingInBatchesGivesTheSameWords) {
  PreTokenizerRegex re(PreTokenizer::Qwen2);
  const std::string text = "Hello world, it's 2024!\n\n  Tabs\tand \u00A0spaces   end  ";
  std::vector<std::string_view> all;
  re.split(text, all);
  for (size_t batch : {size_t{1}, size_t{2}, size_t{5}}) {
    std::vector<std::string_view> got;
    size_t calls = 0;
    for (size_t pos = 0; pos < text.size(); ++calls) pos = re.split_some(text, pos, got, batch);
    EXPECT_EQ(got, all) << "batch " << batch;
    EXPECT_GE(calls, all.size() / batch) << "batch " << batch;
  }
}

// ids 0..255 are bytes; merges give 256, 257, ...
const std::vector<std::pair<std::string, std::string>> kMerges = {
    {"l", "l"},      // 256 "ll"
    {"h", "e"},      // 257 "he"
    {"he", "ll"},    // 258 "hell"
    {"hell", "o"},   // 259 "hello"
    {"b", "c"},      // 260 "bc"
    {"a", "b"},      // 261 "ab"
    {"a", "a"},      // 262 "aa"
    {" ", "w"},      // 263 " w"
};

TEST(Bpe, MergesApplyInRankOrder) {
  Tokenizer tok(tiny_vocab(kMerges));
  EXPECT_EQ(tok.encode("hello", false, false), (Ids{259}));
  EXPECT_EQ(tok.encode("hellx", false, false), (Ids{258, 'x'}));
  // "b c" has a lower rank than "a b", so "abc" is a + bc, not ab + c.
  EXPECT_EQ(tok.encode("abc", false, false), (Ids{'a', 260}));
  EXPECT_EQ(tok.encode("hello world", false, false), (Ids{259, 263, 'o', 'r', 'l', 'd'}));
}

TEST(Bpe, EqualRanksMergeLeftmostFirst) {
  Tokenizer tok(tiny_vocab(kMerges));
  EXPECT_EQ(tok.encode("aaa", false, false), (Ids{262, 'a'}));
  EXPECT_EQ(tok.encode("aaaaa", false, false), (Ids{262, 262, 'a'}));
}

TEST(Bpe, LongWordsGiveTheSameResultAsShortWordLogic) {
  Tokenizer tok(tiny_vocab(kMerges));
  // 201 'a' (one word, merged by the heap path): 100 "aa" and one 'a'.
  Ids expect(100, 262);
  expect.push_back('a');
  EXPECT_EQ(tok.encode(std::string(201, 'a'), false, false), expect);
}

TEST(Bpe, CacheDoesNotChangeResults) {
  Tokenizer tok(tiny_vocab(kMerges));
  const std::string text = "hello hello abc aaa hellx hello world abcabc";
  const Ids first = tok.encode(text, false, false);
  EXPECT_EQ(tok.encode(text, false, false), first);
  EXPECT_EQ(tok.encode_uncached(text, false, false), first);
}

TEST(Encode, TenMillionSpacesGiveTheIdsOfTheirRunStructure) {
  // Merges "  " (256) then "    " (257), leftmost first: a run of r spaces is r / 4 tokens 257,
  // then a 256 when r % 4 >= 2, then a ' ' when r is odd. The run before a word gives its last
  // space to the word: " a" is ' ', 'a'.
  Tokenizer tok(tiny_vocab({{" ", " "}, {"  ", "  "}}));
  const auto expected = [](size_t r) {
    Ids ids(r / 4, 257);
    if (r % 4 >= 2) ids.push_back(256);
    if (r % 2) ids.push_back(' ');
    return ids;
  };
  const auto expected_with_word = [&](size_t r) {
    Ids ids = expected(r - 1);
    ids.push_back(' ');
    ids.push_back('a');
    return ids;
  };
  for (size_t r : {size_t{1}, size_t{2}, size_t{3}, size_t{4}, size_t{7}, size_t{50}, size_t{51}}) {
    EXPECT_EQ(tok.encode(std::string(r, ' '), false, false), expected(r)) << r;
    EXPECT_EQ(tok.encode(std::string(r, ' ') + "a", false, false), expected_with_word(r)) << r;
  }
  constexpr size_t n = 10'000'000;  // one BPE word of 10M symbols (a few seconds)
  EXPECT_EQ(tok.encode(std::string(n, ' ') + "a", false, false), expected_with_word(n));
}

TEST(SpecialTokens, ControlTokensAreParsedOnlyWhenAsked) {
  Tokenizer tok(tiny_vocab({}, {{"<|im_start|>", true}}));
  const int32_t ims = 256;
  EXPECT_EQ(tok.encode("a<|im_start|>b", false, true), (Ids{'a', ims, 'b'}));
  Ids plain{'a'};
  for (char c : std::string("<|im_start|>")) plain.push_back(static_cast<unsigned char>(c));
  plain.push_back('b');
  EXPECT_EQ(tok.encode("a<|im_start|>b", false, false), plain);
}

TEST(SpecialTokens, UserDefinedTokensAreAlwaysParsed) {
  Tokenizer tok(tiny_vocab({}, {{"<tool>", false}}));
  EXPECT_EQ(tok.encode("x<tool>y", false, false), (Ids{'x', 256, 'y'}));
  EXPECT_EQ(tok.encode("x<tool>y", false, true), (Ids{'x', 256, 'y'}));
}

TEST(SpecialTokens, LongerTokensAreTakenFirstEvenWhenAShorterOneStartsEarlier) {
  // "bcd" (longer) is taken before "ab", so "abcd" is a + <bcd>, not <ab> + c + d.
  Tokenizer tok(tiny_vocab({}, {{"ab", false}, {"bcd", false}}));
  EXPECT_EQ(tok.encode("abcd", false, false), (Ids{'a', 257}));
  EXPECT_EQ(tok.encode("ab bcd ab", false, false), (Ids{256, ' ', 257, ' ', 256}));
}

TEST(SpecialTokens, ALongTokenContainingAShortOneWins) {
  Tokenizer tok(tiny_vocab({}, {{"<a>", false}, {"<a><b>", false}, {"<b>", false}}));
  EXPECT_EQ(tok.encode("x<a><b><b><a>", false, false), (Ids{'x', 257, 258, 256}));
}

TEST(SpecialTokens, TextBetweenTokensIsPreTokenizedOnItsOwn) {
  // Without the token, "  b" would give " " + " b"; the token cuts the run.
  Tokenizer tok(tiny_vocab({}, {{"<s>", true}}));
  EXPECT_EQ(tok.encode("a <s> b", false, true), (Ids{'a', ' ', 256, ' ', 'b'}));
}

TEST(SpecialTokens, LstripAndRstripDropTheWhitespaceAroundTheToken) {
  VocabData d = tiny_vocab({}, {{"<m>", true}});
  d.strip.assign(d.tokens.size(), kStripNone);
  d.strip[256] = kStripLeft | kStripRight;
  Tokenizer tok(std::move(d));
  EXPECT_EQ(tok.encode("a \t<m>\n b", false, true), (Ids{'a', 256, 'b'}));
}

TEST(SpecialTokens, AddSpecialPutsBosFirstOnlyWhenTheVocabSaysSo) {
  VocabData d = tiny_vocab({}, {{"<|endoftext|>", true}});
  d.bos_id = 256;
  Tokenizer no_bos(d);
  EXPECT_EQ(no_bos.encode("a", true, false), (Ids{'a'}));
  d.add_bos = true;
  Tokenizer with_bos(std::move(d));
  EXPECT_EQ(with_bos.encode("a", true, false), (Ids{256, 'a'}));
  EXPECT_EQ(with_bos.encode("a", false, false), (Ids{'a'}));
}

TEST(Encode, InvalidUtf8BytesBecomeReplacementCharacters) {
  Tokenizer tok(tiny_vocab({}));
  // 0xFF and the lone lead byte 0xE2 each become U+FFFD (EF BF BD).
  EXPECT_EQ(tok.encode("a\xFF" "b\xE2", false, false),
            (Ids{'a', 0xEF, 0xBF, 0xBD, 'b', 0xEF, 0xBF, 0xBD}));
}

TEST(Eog, ImEndAndEndoftextAreEndOfGeneration) {
  VocabData d = tiny_vocab({}, {{"<|endoftext|>", true}, {"<|im_start|>", true}, {"<|im_end|>", true}});
  Tokenizer tok(std::move(d));
  EXPECT_TRUE(tok.is_eog(256));
  EXPECT_FALSE(tok.is_eog(257));
  EXPECT_TRUE(tok.is_eog(258));
  EXPECT_FALSE(tok.is_eog('a'));
  EXPECT_FALSE(tok.is_eog(-1));
  EXPECT_EQ(tok.eot(), 258);  // <|im_end|> is found before <|endoftext|>, as in llama.cpp's list
}

TEST(Decode, ControlTokensRenderOnlyWhenAsked) {
  Tokenizer tok(tiny_vocab({}, {{"<|im_end|>", true}, {"<tool>", false}}));
  EXPECT_EQ(tok.token_to_piece(256, true), "<|im_end|>");
  EXPECT_EQ(tok.token_to_piece(256, false), "");
  EXPECT_EQ(tok.token_to_piece(257, false), "<tool>");
  EXPECT_EQ(tok.token_to_piece(' '), " ");
  EXPECT_THROW(tok.token_to_piece(258), Error);
  EXPECT_THROW(tok.token_to_piece(-1), Error);
}

TEST(Decode, TokensBpeCanEmitRenderTheirBytesWhateverTheirType) {
  // Byte tokens and a merge result marked Control or Unused: encode() still produces them from
  // plain text, so decoding must give that text back (before, they decoded to nothing).
  VocabData d = tiny_vocab({{"a", "b"}});
  d.types['x'] = TokenType::Control;
  d.types['\n'] = TokenType::Control;
  d.types['y'] = TokenType::Unused;
  d.types[256] = TokenType::Unused;  // "ab"
  d.types[' '] = TokenType::Undefined;
  Tokenizer tok(std::move(d));
  const std::string text = "xy ab\nyx";
  const Ids ids = tok.encode(text, false, false);
  ASSERT_EQ(ids, (Ids{'x', 'y', ' ', 256, '\n', 'y', 'x'}));
  EXPECT_EQ(tok.decode(ids, false), text);
  EXPECT_EQ(tok.decode(ids, true), text);
  Detokenizer detok(tok);  // what generation prints
  std::string streamed;
  for (int32_t id : ids) streamed += detok.push(id);
  EXPECT_EQ(streamed + detok.flush(), text);
}

TEST(Decode, OnlyControlTokensAreHiddenAndByteFallbackTextsAreBytes) {
  VocabData d = tiny_vocab({}, {{"<|im_end|>", true}, {"<tool>", false}});
  const auto add = [&](std::string text, TokenType t) {
    d.tokens.push_back(text);
    d.types.push_back(t);
    return static_cast<int32_t>(d.tokens.size() - 1);
  };
  const int32_t pad = add("[PAD300]", TokenType::Unused);
  const int32_t undefined = add("<undef>", TokenType::Undefined);
  const int32_t byte_nl = add("<0x0A>", TokenType::Byte);
  const int32_t control_a = add("<0x41>", TokenType::Control);
  const int32_t unused_b = add("<0x42>", TokenType::Unused);
  const int32_t user_c = add("<0x43>", TokenType::UserDefined);  // added text, not a byte
  const int32_t byte_level = add(tok::bytes_to_token_text("\xC3\xA9"), TokenType::Byte);  // "é"
  Tokenizer tok(std::move(d));
  for (bool special : {false, true}) {
    EXPECT_EQ(tok.token_to_piece(256, special), special ? "<|im_end|>" : "");
    EXPECT_EQ(tok.token_to_piece(257, special), "<tool>");
    EXPECT_EQ(tok.token_to_piece(pad, special), "[PAD300]");
    EXPECT_EQ(tok.token_to_piece(undefined, special), "<undef>");
    EXPECT_EQ(tok.token_to_piece(byte_nl, special), "\n");
    EXPECT_EQ(tok.token_to_piece(control_a, special), "A");
    EXPECT_EQ(tok.token_to_piece(unused_b, special), "B");
    EXPECT_EQ(tok.token_to_piece(user_c, special), "<0x43>");
    EXPECT_EQ(tok.token_to_piece(byte_level, special), "\xC3\xA9");
  }
}

TEST(Detokenizer, HoldsASplitCharacterUntilItIsComplete) {
  Tokenizer tok(tiny_vocab({}));
  Detokenizer d(tok);
  EXPECT_EQ(d.push('a'), "a");
  EXPECT_EQ(d.push(0xE2), "");  // € = E2 82 AC
  EXPECT_EQ(d.push(0x82), "");
  EXPECT_EQ(d.pending(), 2u);
  EXPECT_EQ(d.push(0xAC), "\u20AC");
  EXPECT_EQ(d.pending(), 0u);
  EXPECT_EQ(d.flush(), "");
}

TEST(Detokenizer, ReplacesInvalidBytesInsteadOfDroppingThem) {
  Tokenizer tok(tiny_vocab({}));
  Detokenizer d(tok);
  EXPECT_EQ(d.push(0xFF), "\uFFFD");
  EXPECT_EQ(d.push(0xE2), "");
  EXPECT_EQ(d.push('A'), "\uFFFDA");          // E2 cannot be completed by 'A'
  EXPECT_EQ(d.push(0xF0), "");
  EXPECT_EQ(d.push(0x9F), "");
  EXPECT_EQ(d.flush(), "\uFFFD");             // one U+FFFD for the unfinished F0 9F
  EXPECT_EQ(utf8_replace_invalid("\xC0\xAF" "x\xED\xA0\x80"), "\uFFFD\uFFFDx\uFFFD\uFFFD\uFFFD");
}

std::string random_utf8(std::mt19937& rng, size_t n_chars) {
  std::string s;
  std::uniform_int_distribution<int> kind(0, 9);
  for (size_t i = 0; i < n_chars; ++i) {
    uint32_t cp;
    switch (kind(rng)) {
      case 0: cp = std::uniform_int_distribution<uint32_t>(0x80, 0x7FF)(rng); break;
      case 1: cp = std::uniform_int_distribution<uint32_t>(0x800, 0xFFFF)(rng); break;
      case 2: cp = std::uniform_int_distribution<uint32_t>(0x10000, 0x10FFFF)(rng); break;
      case 3: cp = " \t\n\r"[std::uniform_int_distribution<int>(0, 3)(rng)]; break;
      default: cp = std::uniform_int_distribution<uint32_t>(0x20, 0x7E)(rng); break;
    }
    if (cp >= 0xD800 && cp <= 0xDFFF) cp = 0xFFFD;
    utf8_append(s, cp);
  }
  return s;
}

TEST(RoundTrip, DecodeOfEncodeGivesBackRandomValidUtf8) {
  Tokenizer tok(tiny_vocab(kMerges, {{"<|im_end|>", true}, {"<tool>", false}}));
  std::mt19937 rng(12345);
  for (int iter = 0; iter < 300; ++iter) {
    const std::string s = random_utf8(rng, std::uniform_int_distribution<size_t>(0, 60)(rng));
    ASSERT_TRUE(utf8_is_valid(s));
    const Ids ids = tok.encode(s, false, false);
    ASSERT_EQ(tok.decode(ids), s) << "iteration " << iter;
    Detokenizer d(tok);
    std::string streamed;
    for (int32_t id : ids) streamed += d.push(id);
    streamed += d.flush();
    ASSERT_EQ(streamed, s) << "iteration " << iter;
  }
}

TEST(TokenizerJson, BothMergeEncodingsLoadTheSameVocabulary) {
  const auto dir = test::temp_dir();
  VocabData d = tiny_vocab(kMerges, {{"<|im_end|>", true}, {"<tool>", false}});
  test::write_tokenizer_json(d, dir / "strings.json", false);
  test::write_tokenizer_json(d, dir / "pairs.json", true);
  const VocabData a = vocab_from_tokenizer_json((dir / "strings.json").string());
  const VocabData b = vocab_from_tokenizer_json((dir / "pairs.json").string());
  EXPECT_EQ(a.tokens, d.tokens);
  EXPECT_EQ(a.merges, d.merges);
  EXPECT_EQ(b.tokens, d.tokens);
  EXPECT_EQ(b.merges, d.merges);
  EXPECT_EQ(a.types, d.types);
  EXPECT_EQ(a.pre, "qwen2");
  Tokenizer ta(a), tb(b);
  EXPECT_EQ(ta.encode("hello<tool>abc<|im_end|>", false, true), (Ids{259, 265, 'a', 260, 264}));
  EXPECT_EQ(tb.encode("hello<tool>abc<|im_end|>", false, true), (Ids{259, 265, 'a', 260, 264}));
}

TEST(TokenizerJson, ReadsSpecialIdsAndTemplateFromTokenizerConfig) {
  const auto dir = test::temp_dir();
  test::write_tokenizer_json(tiny_vocab({}, {{"<|endoftext|>", true}, {"<|im_end|>", true}}),
                             dir / "tokenizer.json", false);
  std::ofstream(dir / "tokenizer_config.json")
      << R"({"bos_token": null, "eos_token": {"content": "<|im_end|>"}, "pad_token": "<|endoftext|>",
            "add_bos_token": false, "chat_template": "{{ messages[0]['content'] }}"})";
  const VocabData v = vocab_from_tokenizer_json((dir / "tokenizer.json").string());
  EXPECT_EQ(v.bos_id, -1);
  EXPECT_EQ(v.eos_id, 257);
  EXPECT_EQ(v.pad_id, 256);
  EXPECT_EQ(v.chat_template, "{{ messages[0]['content'] }}");
}

template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(TokenizerJson, AnUnknownPreTokenizerRegexIsAnErrorThatQuotesIt) {
  const auto dir = test::temp_dir();
  test::write_tokenizer_json(tiny_vocab({}), dir / "t.json", false, R"(\p{L}+|\s+)");
  const std::string msg = error_of([&] { vocab_from_tokenizer_json((dir / "t.json").string()); });
  EXPECT_NE(msg.find("unknown pre-tokenizer regex"), std::string::npos) << msg;
  EXPECT_NE(msg.find(R"(\p{L}+|\s+)"), std::string::npos) << msg;
}

TEST(TokenizerJson, MalformedFilesAreErrorsNamingTheField) {
  const auto dir = test::temp_dir();
  std::ofstream(dir / "bad.json") << "{not json";
  EXPECT_NE(error_of([&] { vocab_from_tokenizer_json((dir / "bad.json").string()); }).find("not valid JSON"),
            std::string::npos);
  nlohmann::json j = {{"model", {{"type", "BPE"}, {"vocab", {{"a", 0}}}, {"merges", {7}}}},
                      {"pre_tokenizer", {{"type", "Split"}, {"pattern", {{"Regex", test::qwen2_hf_regex()}}}}}};
  std::ofstream(dir / "merge.json") << j.dump();
  EXPECT_NE(error_of([&] { vocab_from_tokenizer_json((dir / "merge.json").string()); }).find("model.merges[0]"),
            std::string::npos);
  EXPECT_NE(error_of([&] { vocab_from_tokenizer_json((dir / "missing.json").string()); }).find("cannot open"),
            std::string::npos);
}

TEST(Vocab, UnknownPreTokenizerNameIsAnErrorNamingIt) {
  const std::string msg = error_of([] { pre_tokenizer_from_name("gpt-4o", "model.gguf"); });
  EXPECT_NE(msg.find("'gpt-4o'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("model.gguf"), std::string::npos) << msg;
  VocabData d = tiny_vocab({});
  d.pre = "gpt-4o";  // ("llama3" is Llama-3's pre-tokenizer now)
  EXPECT_NE(error_of([&] { Tokenizer t(d); }).find("'gpt-4o'"), std::string::npos);
}

TEST(Vocab, InconsistentVocabulariesAreErrors) {
  VocabData d = tiny_vocab(kMerges);
  d.merges.emplace_back("zz", "q");
  EXPECT_NE(error_of([&] { Tokenizer t(d); }).find("merge 8"), std::string::npos);
  d = tiny_vocab({});
  d.tokens.set(5, d.tokens[6]);
  EXPECT_NE(error_of([&] { Tokenizer t(d); }).find("tokens 5 and 6"), std::string::npos);
  d = tiny_vocab({});
  d.eos_id = 999;
  EXPECT_NE(error_of([&] { Tokenizer t(d); }).find("eos token id 999"), std::string::npos);
  d = tiny_vocab({});
  d.tokens.set(65, "not-a-byte");
  EXPECT_NE(error_of([&] { Tokenizer t(d); }).find("byte 0x41"), std::string::npos);
}

}  // namespace
}  // namespace minfer::tok
