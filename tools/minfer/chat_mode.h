// The interactive chat loop, shared by `minfer chat` and `minfer run -cnv` (llama-cli's
// conversation mode).
#pragma once

#include <string>
#include <vector>

#include "options.h"

namespace minfer::cli {

struct ChatArgs {
  ModelArgs model;
  SamplingArgs sampling;
  std::string system;
  std::string chat_template;
  int32_t n_predict = 1024;
  bool think = false;
  bool no_think = false;
  ContextArgs context;
  std::string session_file;
  std::vector<std::string> stop;  ///< -r/--reverse-prompt, --stop: a reply ends before one of these
  bool ignore_eos = false;        ///< --ignore-eos: replies end only at -n (or a stop string)
  bool color = false;             ///< --color: the "> " prompt in colour
  std::string first_message;      ///< run -cnv -p TEXT: sent as the first user message
  SpeculativeArgs spec;           ///< -md / --lookup: speculative decoding of the replies
};

/// Runs the chat loop on stdin/stdout until end of input or /exit. Throws minfer::Error for
/// option and model errors (before the first prompt).
void run_chat(const ChatArgs& a);

}  // namespace minfer::cli
