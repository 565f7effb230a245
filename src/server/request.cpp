#include "server/request.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include <fmt/format.h>

#include "core/printable.h"

namespace minfer::server {

using json = nlohmann::ordered_json;

ApiError::ApiError(int status, std::string message, std::string param)
    : std::runtime_error(std::move(message)), status_(status), param_(std::move(param)) {}

namespace {

std::string type_for(int status) {
  switch (status) {
    case 401: return "authentication_error";
    case 404: return "not_found_error";
    case 500: return "server_error";
    case 503: return "unavailable_error";
    default: return "invalid_request_error";
  }
}

[[noreturn]] void bad(const std::string& param, const std::string& message) { throw ApiError(400, message, param); }

/// A short, printable rendering of a JSON value for error messages.
std::string shown(const json& v) {
  std::string s = dump_json(v);
  if (s.size() > 60) s = s.substr(0, 57) + "...";
  return s;
}

const char* kind(const json& v) {
  switch (v.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::string: return "a string";
    case json::value_t::array: return "an array";
    case json::value_t::object: return "an object";
    case json::value_t::number_float: return "a number";
    default: return "an integer";
  }
}

/// Most nesting levels of arrays and objects a request body may have. OpenAI request bodies
/// nest a few levels (messages -> content parts -> image_url); a deeply nested body is refused
/// before parsing, so no later step (parse, walk, destruction) works over a 100,000-level tree.
constexpr int kMaxJsonDepth = 64;

/// Refuses a body whose brackets nest deeper than kMaxJsonDepth (brackets inside strings do not
/// count). Malformed bodies pass through to the parser, which names them.
void check_depth(std::string_view body) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < body.size(); ++i) {
    const char c = body[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxJsonDepth)
        bad("", fmt::format("the request body nests arrays and objects more than {} levels deep", kMaxJsonDepth));
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
}

json parse_object(std::string_view body) {
  check_depth(body);
  json j = json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) bad("", "the request body is not valid JSON");
  if (!j.is_object()) bad("", fmt::format("the request body must be a JSON object, not {}", kind(j)));
  return j;
}

/// The field, or nullptr when absent or null (null means "not given", as in OpenAI's clients).
const json* field(const json& j, const char* name) {
  const auto it = j.find(name);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

double number_in(const json& v, const char* name, double lo, double hi) {
  if (!v.is_number()) bad(name, fmt::format("'{}' must be a number, not {}", name, kind(v)));
  const double d = v.get<double>();
  if (!(d >= lo && d <= hi)) bad(name, fmt::format("'{}' is {}; it must be in [{}, {}]", name, shown(v), lo, hi));
  return d;
}

int64_t integer_in(const json& v, const char* name, int64_t lo, int64_t hi) {
  if (!v.is_number_integer()) bad(name, fmt::format("'{}' must be an integer, not {}", name, kind(v)));
  if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    bad(name, fmt::format("'{}' is {}; it must be in [{}, {}]", name, shown(v), lo, hi));
  const int64_t i = v.get<int64_t>();
  if (i < lo || i > hi) bad(name, fmt::format("'{}' is {}; it must be in [{}, {}]", name, i, lo, hi));
  return i;
}

bool boolean(const json& v, const char* name) {
  if (!v.is_boolean()) bad(name, fmt::format("'{}' must be true or false, not {}", name, kind(v)));
  return v.get<bool>();
}

/// A message's content: a string, or an array of {"type": "text", "text": string} parts joined.
std::string message_content(const json& c, size_t i) {
  const std::string name = fmt::format("messages[{}].content", i);
  if (c.is_string()) return c.get<std::string>();
  if (!c.is_array()) bad(name, fmt::format("'{}' must be a string or an array of text parts, not {}", name, kind(c)));
  std::string text;
  for (size_t k = 0; k < c.size(); ++k) {
    const json& part = c[k];
    const json* type = part.is_object() ? field(part, "type") : nullptr;
    const json* t = part.is_object() ? field(part, "text") : nullptr;
    if (type == nullptr || !type->is_string() || *type != "text" || t == nullptr || !t->is_string())
      bad(name, fmt::format("'{}[{}]' must be {{\"type\": \"text\", \"text\": string}} (only text is supported)", name, k));
    text += t->get<std::string>();
  }
  return text;
}

json parse_messages(const json& j) {
  const json* m = field(j, "messages");
  if (m == nullptr) bad("messages", "'messages' is required");
  if (!m->is_array()) bad("messages", fmt::format("'messages' must be an array, not {}", kind(*m)));
  if (m->empty()) bad("messages", "'messages' must not be empty");
  json out = json::array();
  for (size_t i = 0; i < m->size(); ++i) {
    const json& msg = (*m)[i];
    const std::string name = fmt::format("messages[{}]", i);
    if (!msg.is_object()) bad(name, fmt::format("'{}' must be an object, not {}", name, kind(msg)));
    const json* role = field(msg, "role");
    if (role == nullptr || !role->is_string())
      bad(name + ".role", fmt::format("'{}.role' must be a string", name));
    const std::string r = role->get<std::string>();
    if (r != "system" && r != "user" && r != "assistant" && r != "tool" && r != "developer")
      bad(name + ".role", fmt::format("'{}.role' is '{}'; it must be system, developer, user, assistant or tool", name,
                                      printable(r)));
    const json* content = field(msg, "content");
    if (content == nullptr && r != "assistant") bad(name + ".content", fmt::format("'{}.content' is required", name));
    json o = json::object();
    // "developer" is OpenAI's newer name for "system"; the templates know "system".
    o["role"] = r == "developer" ? "system" : r;
    o["content"] = content == nullptr ? std::string() : message_content(*content, i);
    out.push_back(std::move(o));
  }
  return out;
}

void parse_prompt(const json& j, GenerationRequest& r) {
  const json* p = field(j, "prompt");
  if (p == nullptr) bad("prompt", "'prompt' is required");
  if (p->is_string()) {
    r.prompt_text = p->get<std::string>();
    if (r.prompt_text.empty()) bad("prompt", "'prompt' must not be empty");
    return;
  }
  if (!p->is_array()) bad("prompt", fmt::format("'prompt' must be a string or an array of token ids, not {}", kind(*p)));
  if (p->empty()) bad("prompt", "'prompt' must not be empty");
  if (p->size() == 1 && (*p)[0].is_string()) {  // ["text"]: one prompt
    r.prompt_text = (*p)[0].get<std::string>();
    if (r.prompt_text.empty()) bad("prompt", "'prompt' must not be empty");
    return;
  }
  if ((*p)[0].is_string()) bad("prompt", "several prompts in one request are not supported (n = 1 only)");
  r.prompt_is_ids = true;
  for (size_t i = 0; i < p->size(); ++i) {
    const json& t = (*p)[i];
    if (!t.is_number_integer())
      bad("prompt", fmt::format("'prompt[{}]' must be a token id (an integer), not {}", i, kind(t)));
    r.prompt_ids.push_back(static_cast<int32_t>(integer_in(t, "prompt", 0, std::numeric_limits<int32_t>::max())));
  }
}

}  // namespace

std::string ApiError::type() const { return type_for(status_); }

std::string error_body(int status, const std::string& message, const std::string& param) {
  json e = json::object();
  e["message"] = message;
  e["type"] = type_for(status);
  e["code"] = status;
  e["param"] = param.empty() ? json(nullptr) : json(param);
  json j = json::object();
  j["error"] = std::move(e);
  return dump_json(j);
}

std::string ApiError::body() const { return error_body(status_, what(), param_); }

std::string dump_json(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

GenerationRequest parse_generation_request(std::string_view body, bool chat) {
  const json j = parse_object(body);
  GenerationRequest r;
  r.chat = chat;
  if (const json* v = field(j, "model")) {
    if (!v->is_string()) bad("model", fmt::format("'model' must be a string, not {}", kind(*v)));
    r.model = v->get<std::string>();
  }
  if (chat) r.messages = parse_messages(j);
  else parse_prompt(j, r);
  if (const json* v = field(j, "n")) integer_in(*v, "n", 1, 1);
  // max_completion_tokens is the newer name (chat); it wins when both are given.
  for (const char* name : {"max_tokens", "max_completion_tokens"})
    if (const json* v = field(j, name)) r.max_tokens = static_cast<int32_t>(integer_in(*v, name, 1, std::numeric_limits<int32_t>::max()));
  SamplerParams& s = r.sampling;
  if (const json* v = field(j, "temperature")) s.temp = static_cast<float>(number_in(*v, "temperature", 0.0, 2.0));
  if (const json* v = field(j, "top_p")) s.top_p = static_cast<float>(number_in(*v, "top_p", 0.0, 1.0));
  if (const json* v = field(j, "top_k")) s.top_k = static_cast<int32_t>(integer_in(*v, "top_k", 0, std::numeric_limits<int32_t>::max()));
  if (const json* v = field(j, "min_p")) s.min_p = static_cast<float>(number_in(*v, "min_p", 0.0, 1.0));
  if (const json* v = field(j, "presence_penalty")) s.presence_penalty = static_cast<float>(number_in(*v, "presence_penalty", -2.0, 2.0));
  if (const json* v = field(j, "frequency_penalty")) s.frequency_penalty = static_cast<float>(number_in(*v, "frequency_penalty", -2.0, 2.0));
  if (const json* v = field(j, "repeat_penalty")) {
    s.repeat_penalty = static_cast<float>(number_in(*v, "repeat_penalty", 0.0, 10.0));
    if (s.repeat_penalty <= 0.0f) bad("repeat_penalty", "'repeat_penalty' must be greater than 0");
  }
  if (const json* v = field(j, "seed")) {
    s.seed = static_cast<uint64_t>(integer_in(*v, "seed", std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()));
    r.seed_given = true;
  } else {
    s.seed = std::random_device{}();
  }
  if (const json* v = field(j, "stop")) {
    if (v->is_string()) {
      r.stop.push_back(v->get<std::string>());
    } else if (v->is_array()) {
      if (v->size() > kMaxStopStrings) bad("stop", fmt::format("'stop' has {} strings; at most {} are allowed", v->size(), kMaxStopStrings));
      for (const json& e : *v) {
        if (!e.is_string()) bad("stop", fmt::format("'stop' must hold strings, not {}", kind(e)));
        r.stop.push_back(e.get<std::string>());
      }
    } else {
      bad("stop", fmt::format("'stop' must be a string or an array of strings, not {}", kind(*v)));
    }
    std::erase_if(r.stop, [](const std::string& x) { return x.empty(); });
  }
  if (const json* v = field(j, "speculative.n_max")) r.spec_n_max = static_cast<int32_t>(integer_in(*v, "speculative.n_max", 0, 256));
  if (const json* v = field(j, "speculative.n_min")) r.spec_n_min = static_cast<int32_t>(integer_in(*v, "speculative.n_min", 0, 256));
  if (const json* v = field(j, "speculative.p_min")) r.spec_p_min = static_cast<float>(number_in(*v, "speculative.p_min", 0.0, 1.0));
  if (r.spec_n_max >= 0 && r.spec_n_min > r.spec_n_max)
    bad("speculative.n_min", fmt::format("'speculative.n_min' {} is larger than 'speculative.n_max' {}", r.spec_n_min, r.spec_n_max));
  if (const json* v = field(j, "ignore_eos")) r.ignore_eos = boolean(*v, "ignore_eos");
  if (const json* v = field(j, "stream")) r.stream = boolean(*v, "stream");
  if (const json* v = field(j, "stream_options")) {
    if (!v->is_object()) bad("stream_options", fmt::format("'stream_options' must be an object, not {}", kind(*v)));
    if (const json* u = field(*v, "include_usage")) r.include_usage = boolean(*u, "stream_options.include_usage");
  }
  if (chat) {
    if (const json* v = field(j, "logprobs")) r.logprobs = boolean(*v, "logprobs");
    if (const json* v = field(j, "top_logprobs")) {
      r.top_logprobs = static_cast<int32_t>(integer_in(*v, "top_logprobs", 0, kMaxTopLogprobs));
      if (!r.logprobs) bad("top_logprobs", "'top_logprobs' needs 'logprobs': true");
    }
  } else if (const json* v = field(j, "logprobs")) {
    r.top_logprobs = static_cast<int32_t>(integer_in(*v, "logprobs", 0, kMaxTopLogprobs));
    r.logprobs = true;
  }
  return r;
}

TokenizeRequest parse_tokenize_request(std::string_view body) {
  const json j = parse_object(body);
  TokenizeRequest r;
  const json* c = field(j, "content");
  if (c == nullptr) bad("content", "'content' is required");
  if (!c->is_string()) bad("content", fmt::format("'content' must be a string, not {}", kind(*c)));
  r.content = c->get<std::string>();
  if (const json* v = field(j, "add_special")) r.add_special = boolean(*v, "add_special");
  if (const json* v = field(j, "with_pieces")) r.with_pieces = boolean(*v, "with_pieces");
  return r;
}

std::vector<int64_t> parse_detokenize_request(std::string_view body) {
  const json j = parse_object(body);
  const json* t = field(j, "tokens");
  if (t == nullptr) bad("tokens", "'tokens' is required");
  if (!t->is_array()) bad("tokens", fmt::format("'tokens' must be an array of token ids, not {}", kind(*t)));
  std::vector<int64_t> ids;
  for (const json& e : *t) ids.push_back(integer_in(e, "tokens", 0, std::numeric_limits<int32_t>::max()));
  return ids;
}

TokenLogprob token_logprob(std::span<const float> logits, int32_t token, int32_t top) {
  TokenLogprob out;
  double mx = -INFINITY;
  for (float l : logits) mx = std::max(mx, static_cast<double>(l));
  double sum = 0.0;
  for (float l : logits) sum += std::exp(static_cast<double>(l) - mx);
  const double lse = mx + std::log(sum);
  out.logprob = static_cast<double>(logits[static_cast<size_t>(token)]) - lse;
  if (top > 0) {
    std::vector<int32_t> ids(logits.size());
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i);
    const size_t k = std::min(ids.size(), static_cast<size_t>(top));
    std::partial_sort(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(k), ids.end(), [&](int32_t a, int32_t b) {
      const float la = logits[static_cast<size_t>(a)], lb = logits[static_cast<size_t>(b)];
      return la > lb || (la == lb && a < b);
    });
    for (size_t i = 0; i < k; ++i)
      out.top.emplace_back(ids[i], static_cast<double>(logits[static_cast<size_t>(ids[i])]) - lse);
  }
  return out;
}

std::string prometheus_text(const SchedulerStats& st) {
  std::string s;
  const auto metric = [&](const char* name, const char* type, const char* help, const std::string& value) {
    s += fmt::format("# HELP {} {}\n# TYPE {} {}\n{} {}\n", name, help, name, type, name, value);
  };
  metric("minfer_requests_running", "gauge", "Requests in a slot (prefilling or decoding).", std::to_string(st.running));
  metric("minfer_requests_waiting", "gauge", "Requests queued for a slot.", std::to_string(st.waiting));
  const double ratio = st.kv_cells_total > 0 ? static_cast<double>(st.kv_cells_used) / static_cast<double>(st.kv_cells_total) : 0.0;
  metric("minfer_kv_cache_usage_ratio", "gauge", "KV cache cells in use over the slots' cells (0..1).", fmt::format("{}", ratio));
  metric("minfer_prompt_tokens_total", "counter", "Prompt tokens prefilled (tokens reused from the KV cache not counted).",
         std::to_string(st.prompt_tokens));
  metric("minfer_generation_tokens_total", "counter", "Tokens generated.", std::to_string(st.generated_tokens));
  metric("minfer_draft_tokens_total", "counter", "Tokens drafted (prompt lookup or draft model) and verified.",
         std::to_string(st.draft_tokens));
  metric("minfer_draft_accepted_tokens_total", "counter", "Drafted tokens kept (the token sampled at their position).",
         std::to_string(st.draft_accepted));
  s += "# HELP minfer_request_duration_seconds Time from a request's arrival to its end.\n"
       "# TYPE minfer_request_duration_seconds histogram\n";
  uint64_t cum = 0;
  for (size_t b = 0; b < std::size(kDurationBuckets); ++b) {
    cum += st.duration_counts[b];
    s += fmt::format("minfer_request_duration_seconds_bucket{{le=\"{}\"}} {}\n", kDurationBuckets[b], cum);
  }
  cum += st.duration_counts[std::size(kDurationBuckets)];
  s += fmt::format("minfer_request_duration_seconds_bucket{{le=\"+Inf\"}} {}\n", cum);
  s += fmt::format("minfer_request_duration_seconds_sum {}\n", st.duration_sum);
  s += fmt::format("minfer_request_duration_seconds_count {}\n", cum);
  return s;
}

}  // namespace minfer::server
