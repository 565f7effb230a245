// `minfer tokenize -m FILE [--ids|--pieces] [--no-special] [TEXT]`: text to token ids with the
// tokenizer of a GGUF model (or a Hugging Face tokenizer.json). TEXT defaults to standard
// input. --chat renders TEXT as a user message through the model's chat template first.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>
#include <string>

#include <fmt/format.h>

#include "chat/chat.h"
#include "commands.h"
#include "core/error.h"
#include "core/read_file.h"
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace minfer::cli {
namespace {

struct TokenizeOptions {
  std::string model;
  std::string text;
  bool text_given = false;
  bool ids_only = false;
  bool pieces_only = false;
  bool no_special = false;
  bool no_add_special = false;
  bool chat = false;
  std::string system;
  std::string chat_template;
  bool no_think = false;
  bool print_prompt = false;
};

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

tok::Tokenizer load_tokenizer(const std::string& path) {
  if (ends_with(path, ".json")) return tok::Tokenizer(tok::vocab_from_tokenizer_json(path));
  tok::VocabData vocab;
  {
    const auto file = gguf::GgufFile::open(path);
    vocab = tok::vocab_from_gguf(*file);
  }  // the file (its metadata index and mapped pages) is closed before the tables are built
  return tok::Tokenizer(std::move(vocab));
}

// A piece for display: valid UTF-8 kept, control characters, quotes and invalid bytes escaped.
std::string display(std::string_view piece) {
  std::string out = "'";
  size_t pos = 0;
  while (pos < piece.size()) {
    const auto c = static_cast<unsigned char>(piece[pos]);
    if (c >= 0x80) {
      const size_t n = tok::utf8_char_len(piece, pos);
      if (n == 0) {
        out += fmt::format("\\x{:02x}", c);
        ++pos;
      } else {
        out.append(piece.substr(pos, n));
        pos += n;
      }
      continue;
    }
    if (c == '\n') out += "\\n";
    else if (c == '\t') out += "\\t";
    else if (c == '\r') out += "\\r";
    else if (c == '\'') out += "\\'";
    else if (c == '\\') out += "\\\\";
    else if (c < 0x20 || c == 0x7f) out += fmt::format("\\x{:02x}", c);
    else out += static_cast<char>(c);
    ++pos;
  }
  return out + "'";
}

void run(const TokenizeOptions& o) {
  const tok::Tokenizer tokenizer = load_tokenizer(o.model);
  std::string text = o.text;
  if (!o.text_given || text == "-") text = read_fd_bytes(STDIN_FILENO, "stdin", kTextLimitBytes);
  const bool parse_special = !o.no_special;
  std::vector<int32_t> ids;
  if (o.chat) {
    const std::string source =
        chat::select_chat_template(tokenizer.chat_template(), o.chat_template, o.model);
    std::vector<chat::ChatMessage> messages;
    if (!o.system.empty()) messages.push_back({"system", o.system});
    messages.push_back({"user", text});
    chat::ChatOptions opt;
    opt.add_generation_prompt = true;
    opt.enable_thinking = !o.no_think;
    if (tokenizer.bos() >= 0) opt.bos_token = std::string(tokenizer.token_text(tokenizer.bos()));
    if (tokenizer.eos() >= 0) opt.eos_token = std::string(tokenizer.token_text(tokenizer.eos()));
    // The template's <|im_start|> etc. are tokens; the text and system prompt are plain text.
    const chat::RenderedChat rendered =
        chat::ChatTemplate(source, chat::chat_template_origin(o.chat_template, o.model)).render_marked(messages, opt);
    if (o.print_prompt) {
      std::fwrite(rendered.text.data(), 1, rendered.text.size(), stdout);
      return;
    }
    ids = chat::tokenize_chat(tokenizer, rendered, !o.no_add_special);
  } else {
    ids = tokenizer.encode(text, !o.no_add_special, parse_special);
  }
  std::string out;
  if (o.ids_only) {
    for (size_t i = 0; i < ids.size(); ++i) {
      if (i) out += ' ';
      out += std::to_string(ids[i]);
    }
    out += '\n';
  } else if (o.pieces_only) {
    for (int32_t id : ids) out += display(tokenizer.token_to_piece(id, true)) + "\n";
  } else {
    for (int32_t id : ids) out += fmt::format("{:>6} {}\n", id, display(tokenizer.token_to_piece(id, true)));
  }
  std::fwrite(out.data(), 1, out.size(), stdout);
}

}  // namespace

void add_tokenize_command(CLI::App& app) {
  auto opts = std::make_shared<TokenizeOptions>();
  auto* cmd = app.add_subcommand("tokenize", "Text to token ids with a model's tokenizer");
  cmd->add_option("-m,--model", opts->model, "GGUF model (or a tokenizer.json)")->required();
  cmd->add_option("text", opts->text, "text to tokenize (default or '-': standard input)");
  auto* ids = cmd->add_flag("--ids", opts->ids_only, "print only the ids, space-separated on one line");
  auto* pieces = cmd->add_flag("--pieces", opts->pieces_only, "print only the pieces, one per line");
  ids->excludes(pieces);
  cmd->add_flag("--no-special", opts->no_special,
                "treat special-token text such as <|im_start|> as plain text");
  cmd->add_flag("--no-add-special", opts->no_add_special,
                "do not add bos/eos even when the vocabulary asks for them");
  cmd->add_flag("--chat", opts->chat, "render TEXT as a user message with the chat template first");
  cmd->add_option("--system", opts->system, "with --chat: a system message");
  cmd->add_option("--chat-template", opts->chat_template,
                  "with --chat: 'chatml' (built-in) or a Jinja template file, instead of the model's");
  cmd->add_flag("--no-think", opts->no_think, "with --chat: enable_thinking=false (Qwen3)");
  cmd->add_flag("--print-prompt", opts->print_prompt, "with --chat: print the rendered prompt, not tokens");
  cmd->callback([opts, cmd] {
    opts->text_given = cmd->count("text") > 0;
    run(*opts);
  });
}

}  // namespace minfer::cli
