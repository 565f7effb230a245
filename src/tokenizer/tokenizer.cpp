#include "tokenizer/tokenizer.h"

#include <algorithm>

#include "core/error.h"
#include "tokenizer/bpe.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/special_tokens.h"
#include "tokenizer/spm.h"
#include "tokenizer/token_index.h"
#include "tokenizer/utf8.h"

namespace minfer::tok {
namespace {

// Texts llama.cpp 80fb11ac (llama_vocab::impl::load) recognises as end-of-turn, end-of-generation
// and fill-in-the-middle tokens; all of them are made Control. Restricted to the names of the
// model families minfer targets and their close relatives.
constexpr std::string_view kEotTexts[] = {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>",
                                          "<|endoftext|>", "<|end_of_text|>", "<EOT>"};
constexpr std::string_view kEogTexts[] = {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>",
                                          "<|endoftext|>", "<|eom_id|>", "<EOT>", "<|end_of_text|>",
                                          // fim_pad, fim_rep and fim_sep are end-of-generation too
                                          "<|fim_pad|>", "<|fim_repo|>", "<|repo_name|>",
                                          "<|file_sep|>"};
constexpr std::string_view kFimTexts[] = {"<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>",
                                          "<|fim_pad|>", "<|fim_repo|>", "<|repo_name|>",
                                          "<|file_sep|>"};

// The byte of a byte-fallback token text "<0xNN>" (two hex digits, either case), or -1.
int hex_byte_token(std::string_view text) {
  if (text.size() != 6 || !text.starts_with("<0x") || text[5] != '>') return -1;
  int v = 0;
  for (char c : text.substr(3, 2)) {
    const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
    if (d < 0) return -1;
    v = v * 16 + d;
  }
  return v;
}

}  // namespace

struct Tokenizer::Impl {
  VocabData data;  // merges, types and strip flags are dropped once the tables below have them
  PreTokenizer pre;
  TokenIndex token_to_id;  // ids of data.tokens by text
  StringTable pieces;      // bytes of each token with render_special = true
  std::vector<uint8_t> types;  // TokenType by id, one byte each (data.types has 4)
  std::vector<bool> eog;
  std::vector<int32_t> eog_list;
  std::vector<bool> special_only;  // pieces rendered only when render_special (Control, Unknown)
  std::unique_ptr<BpeModel> bpe;  // byte-level BPE ("gpt2") vocabularies
  std::unique_ptr<SpmModel> spm;  // SentencePiece ("llama") vocabularies
  bool ignore_merges = false;     // Llama-3: a word that is a token is emitted whole
  std::unique_ptr<PreTokenizerRegex> regex;
  std::unique_ptr<SpecialTokenMatcher> specials;

  explicit Impl(VocabData d) : data(std::move(d)) {
    validate_vocab(data, token_to_id);  // also fills token_to_id
    pre = is_spm(data) ? PreTokenizer::None : pre_tokenizer_from_name(data.pre, data.source);
    // llama.cpp 80fb11ac sets ignore_merges for LLAMA_VOCAB_PRE_TYPE_LLAMA3 (as the Llama-3
    // tokenizer.json's "ignore_merges": true).
    ignore_merges = pre == PreTokenizer::Llama3;
    const size_t n = data.tokens.size();
    if (is_spm(data)) {
      spm = std::make_unique<SpmModel>(data, token_to_id);
      std::vector<float>().swap(data.scores);
    } else {
      // The merge table replaces the merge texts; free them before the pieces are built.
      bpe = std::make_unique<BpeModel>(data, token_to_id);
      data.merges.clear();
    }

    auto find = [&](std::string_view t) { return token_to_id.find(data.tokens, t); };
    auto make_control = [&](int32_t id) {
      auto& t = data.types[static_cast<size_t>(id)];
      if (t != TokenType::Control) t = TokenType::Control;
    };
    if (data.eot_id < 0)
      for (auto t : kEotTexts)
        if (int32_t id = find(t); id >= 0) {
          data.eot_id = id;
          break;
        }
    eog.assign(n, false);
    for (auto t : kEogTexts)
      if (int32_t id = find(t); id >= 0) eog[static_cast<size_t>(id)] = true;
    for (int32_t id : {data.eos_id, data.eot_id, data.eom_id})
      if (id >= 0) eog[static_cast<size_t>(id)] = true;
    for (auto t : kEotTexts)
      if (int32_t id = find(t); id >= 0) make_control(id);
    for (auto t : kFimTexts)
      if (int32_t id = find(t); id >= 0) make_control(id);
    for (size_t i = 0; i < n; ++i)
      if (eog[i]) {
        eog_list.push_back(static_cast<int32_t>(i));
        if (std::find(std::begin(kEogTexts), std::end(kEogTexts), data.tokens[i]) != std::end(kEogTexts))
          make_control(static_cast<int32_t>(i));
      }

    // Pieces: no token the model can generate decodes to nothing by accident (see
    // token_to_piece). A piece is never longer than its text (a byte-level character is 1 or 2
    // bytes of UTF-8 for 1 byte; "<0xNN>" is 6 for 1), so the text arena's size is enough.
    const std::vector<bool> emittable = bpe ? bpe->emittable(n) : std::vector<bool>(n, false);
    size_t text_bytes = 0;
    for (std::string_view t : data.tokens) text_bytes += t.size();
    pieces.reserve(n, text_bytes);
    special_only.assign(n, false);
    for (size_t i = 0; i < n; ++i) {
      const std::string_view text = data.tokens[i];
      const TokenType t = data.types[i];
      if (const int byte = hex_byte_token(text); byte >= 0 && t != TokenType::UserDefined &&
                                                  (spm || !(emittable[i] || t == TokenType::Normal))) {
        pieces.push_back(std::string(1, static_cast<char>(byte)));  // "<0x0A>": that byte
      } else if (spm && (t == TokenType::Normal || t == TokenType::UserDefined || t == TokenType::Byte)) {
        pieces.push_back(spm_piece(text, t));  // '▁' as a space
      } else if (!spm && (emittable[i] || t == TokenType::Normal || t == TokenType::Byte)) {
        pieces.push_back(token_text_to_bytes(text));  // text of the byte-level alphabet
      } else {
        // Control, Unknown, UserDefined (BPE), Unused, Undefined: their literal text.
        pieces.push_back(text);
        special_only[i] = t == TokenType::Control || t == TokenType::Unknown;
      }
    }
    data.tokens.shrink_to_fit();
    if (!spm) regex = std::make_unique<PreTokenizerRegex>(pre);
    specials = std::make_unique<SpecialTokenMatcher>(data.tokens, data.types, data.strip);
    types.reserve(n);
    for (TokenType t : data.types) types.push_back(static_cast<uint8_t>(t));  // 0..6, validated
    std::vector<TokenType>().swap(data.types);
    std::vector<uint8_t>().swap(data.strip);
  }

  void check_id(int32_t id) const {
    MINFER_CHECK(id >= 0 && static_cast<size_t>(id) < data.tokens.size(),
          "token id {} is outside the vocabulary of {} (0..{})", id, data.source,
          data.tokens.size() - 1);
  }

  std::vector<int32_t> encode(std::string_view text, bool add_special, bool parse_special,
                              bool cached) const {
    std::vector<Fragment> frags;
    specials->partition(text, parse_special, frags);
    return encode_fragments(frags, text.size(), add_special, cached);
  }

  // Partitions each segment on its own (special tokens parsed outside `plain` only), then joins
  // text fragments that touch (they are views into the same `text`) so that BPE sees the same
  // pieces as for one unsegmented text.
  std::vector<int32_t> encode_with_plain_ranges(std::string_view text, std::span<const Tokenizer::Range> plain,
                                                bool add_special) const {
    std::vector<Fragment> frags, part;
    size_t pos = 0;
    auto add_segment = [&](size_t end, bool parse_special) {
      if (end == pos) return;
      part.clear();
      specials->partition(text.substr(pos, end - pos), parse_special, part);
      for (const Fragment& f : part) {
        if (!f.is_token && !frags.empty() && !frags.back().is_token &&
            frags.back().text.data() + frags.back().text.size() == f.text.data()) {
          frags.back().text = std::string_view(frags.back().text.data(), frags.back().text.size() + f.text.size());
          continue;
        }
        frags.push_back(f);
      }
      pos = end;
    };
    for (const Tokenizer::Range& r : plain) {
      MINFER_CHECK(r.begin >= pos && r.begin <= r.end && r.end <= text.size(),
                   "encode_with_plain_ranges: range [{}, {}) out of order or outside the {}-byte text", r.begin,
                   r.end, text.size());
      add_segment(r.begin, true);
      add_segment(r.end, false);
    }
    add_segment(text.size(), true);
    return encode_fragments(frags, text.size(), add_special, true);
  }

  std::vector<int32_t> encode_fragments(const std::vector<Fragment>& frags, size_t text_size, bool add_special,
                                        bool cached) const {
    std::vector<int32_t> out;
    out.reserve(text_size / 3 + 4);
    if (add_special && data.add_bos) out.push_back(data.bos_id);
    if (spm) {
      encode_spm(frags, out);
    } else {
      encode_bpe(frags, out, cached);
    }
    if (add_special && data.add_eos) out.push_back(data.eos_id);
    return out;
  }

  // SentencePiece: text that starts the input or follows a token (special or added) gets the
  // space prefix when the vocabulary asks for it (llama.cpp 80fb11ac's is_prev_special rule).
  void encode_spm(const std::vector<Fragment>& frags, std::vector<int32_t>& out) const {
    bool prev_special = true;
    for (const Fragment& f : frags) {
      if (f.is_token) {
        out.push_back(f.id);
        prev_special = true;
        continue;
      }
      if (f.text.empty()) continue;
      const std::string escaped = spm_escape(f.text, data.add_space_prefix && prev_special);
      spm->encode(escaped, data.tokens, token_to_id, out);
      prev_special = false;
    }
  }

  void encode_bpe(const std::vector<Fragment>& frags, std::vector<int32_t>& out, bool cached) const {
    std::vector<std::string_view> words;
    std::string word_text;
    std::string clean;
    for (const Fragment& f : frags) {
      if (f.is_token) {
        out.push_back(f.id);
        continue;
      }
      std::string_view t = f.text;
      if (!utf8_is_valid(t)) {
        clean = utf8_sanitize(t);
        t = clean;
      }
      // Batches of words keep the working set small on long texts.
      for (size_t pos = 0; pos < t.size();) {
        words.clear();
        pos = regex->split_some(t, pos, words, 4096);
        for (std::string_view w : words) {
          if (ignore_merges) {
            word_text = bytes_to_token_text(w);
            if (const int32_t id = token_to_id.find(data.tokens, word_text); id >= 0) {
              out.push_back(id);
              continue;
            }
          }
          if (cached) bpe->encode_word(w, out);
          else bpe->encode_word_uncached(w, out);
        }
      }
    }
  }
};

Tokenizer::Tokenizer(VocabData data) : impl_(std::make_unique<Impl>(std::move(data))) {}
Tokenizer::~Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special, bool parse_special) const {
  return impl_->encode(text, add_special, parse_special, true);
}

std::vector<int32_t> Tokenizer::encode_with_plain_ranges(std::string_view text, std::span<const Range> plain,
                                                         bool add_special) const {
  return impl_->encode_with_plain_ranges(text, plain, add_special);
}

std::vector<int32_t> Tokenizer::encode_uncached(std::string_view text, bool add_special,
                                                bool parse_special) const {
  return impl_->encode(text, add_special, parse_special, false);
}

std::string_view Tokenizer::token_to_piece(int32_t id, bool render_special) const {
  impl_->check_id(id);
  const auto i = static_cast<size_t>(id);
  if (!render_special && impl_->special_only[i]) return {};
  return impl_->pieces[i];
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool render_special) const {
  std::string out;
  for (int32_t id : ids) out += token_to_piece(id, render_special);
  return out;
}

bool Tokenizer::is_eog(int32_t id) const {
  return id >= 0 && static_cast<size_t>(id) < impl_->eog.size() && impl_->eog[static_cast<size_t>(id)];
}
std::vector<int32_t> Tokenizer::eog_ids() const { return impl_->eog_list; }
int32_t Tokenizer::bos() const { return impl_->data.bos_id; }
int32_t Tokenizer::eos() const { return impl_->data.eos_id; }
int32_t Tokenizer::eot() const { return impl_->data.eot_id; }
int32_t Tokenizer::pad() const { return impl_->data.pad_id; }
bool Tokenizer::add_bos() const { return impl_->data.add_bos; }
bool Tokenizer::add_eos() const { return impl_->data.add_eos; }
int32_t Tokenizer::n_vocab() const { return static_cast<int32_t>(impl_->data.tokens.size()); }
const std::string& Tokenizer::chat_template() const { return impl_->data.chat_template; }
const std::string& Tokenizer::source() const { return impl_->data.source; }
PreTokenizer Tokenizer::pre_tokenizer() const { return impl_->pre; }

std::string_view Tokenizer::token_text(int32_t id) const {
  impl_->check_id(id);
  return impl_->data.tokens[static_cast<size_t>(id)];
}

TokenType Tokenizer::token_type(int32_t id) const {
  impl_->check_id(id);
  return static_cast<TokenType>(impl_->types[static_cast<size_t>(id)]);
}

std::optional<int32_t> Tokenizer::find_token(std::string_view text) const {
  const int32_t id = impl_->token_to_id.find(impl_->data.tokens, text);
  if (id < 0) return std::nullopt;
  return id;
}

size_t Tokenizer::memory_bytes() const {
  const Impl& m = *impl_;
  return m.data.tokens.memory_bytes() + m.data.merges.memory_bytes() +
         m.data.types.capacity() * sizeof(TokenType) + m.data.strip.capacity() + m.types.capacity() +
         m.pieces.memory_bytes() +
         m.token_to_id.memory_bytes() + (m.bpe ? m.bpe->memory_bytes() : 0) + m.specials->memory_bytes() +
         m.eog.capacity() / 8 + m.special_only.capacity() / 8 + m.eog_list.capacity() * sizeof(int32_t);
}

}  // namespace minfer::tok
