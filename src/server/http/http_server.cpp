#include "server/http/http_server.h"

#include <algorithm>
#include <httplib.h>

#include <charconv>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <string_view>
#include <thread>
#include <utility>

#include <fmt/format.h>

#include "core/error.h"
#include "core/log.h"
#include "server/chat_prompt.h"
#include "server/request.h"
#include "server/text_stream.h"

namespace minfer::server {

using json = nlohmann::ordered_json;

namespace {

/// What the step loop hands one request's HTTP thread: text pieces (with their logprobs) and
/// the end.
struct Piece {
  std::string text;
  json logprobs = json::array();  ///< chat-style entries of the tokens of this piece
};
struct Channel {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Piece> pieces;
  bool done = false;
  FinishInfo fin;
};

const char* finish_reason(FinishReason r) {
  // A request cut short by the server (shutdown timeout) reports "length": it did not stop by itself.
  return r == FinishReason::Stop ? "stop" : "length";
}

json usage_json(const FinishInfo& f) {
  json u = json::object();
  u["prompt_tokens"] = f.prompt_tokens;
  u["completion_tokens"] = f.completion_tokens;
  u["total_tokens"] = f.prompt_tokens + f.completion_tokens;
  u["prompt_tokens_details"] = json{{"cached_tokens", f.cached_tokens}};
  return u;
}

json bytes_of(std::string_view s) {
  json b = json::array();
  for (char c : s) b.push_back(static_cast<uint8_t>(c));
  return b;
}

/// Chat logprobs content entry of one token (OpenAI's ChatCompletionTokenLogprob).
json logprob_entry(const tok::Tokenizer& tk, int32_t id, const TokenLogprob& lp) {
  const std::string_view piece = tk.token_to_piece(id, false);
  json e = json::object();
  e["token"] = std::string(piece);
  e["logprob"] = lp.logprob;
  e["bytes"] = bytes_of(piece);
  json top = json::array();
  for (const auto& [tid, l] : lp.top) {
    const std::string_view p = tk.token_to_piece(tid, false);
    top.push_back(json{{"token", std::string(p)}, {"logprob", l}, {"bytes", bytes_of(p)}});
  }
  e["top_logprobs"] = std::move(top);
  return e;
}

/// Completions-style logprobs {tokens, token_logprobs, top_logprobs, text_offset} from chat-style
/// entries; text_offset counts bytes from `offset0`.
json completion_logprobs(const json& entries, size_t offset0) {
  json o = json::object();
  json tokens = json::array(), lps = json::array(), tops = json::array(), offs = json::array();
  size_t off = offset0;
  for (const json& e : entries) {
    tokens.push_back(e["token"]);
    lps.push_back(e["logprob"]);
    json t = json::object();
    for (const json& alt : e["top_logprobs"]) t[alt["token"].get<std::string>()] = alt["logprob"];
    tops.push_back(std::move(t));
    offs.push_back(off);
    off += e["token"].get<std::string>().size();
  }
  o["tokens"] = std::move(tokens);
  o["token_logprobs"] = std::move(lps);
  o["top_logprobs"] = std::move(tops);
  o["text_offset"] = std::move(offs);
  return o;
}

void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status();
  res.set_content(e.body(), "application/json");
}

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

struct HttpServer::Impl {
  HttpOptions opt;
  httplib::Server svr;
  std::thread listener;
  std::atomic<bool> listen_returned{false};  ///< the listener thread has left listen_after_bind
  std::atomic<bool> ready{false};
  ServingModel model;
  std::atomic<uint64_t> next_id{1};
  std::atomic<int> in_flight{0};  ///< generation requests submitted and not yet answered

  void check_key(const httplib::Request& req) const {
    if (opt.api_key.empty()) return;
    const std::string want = "Bearer " + opt.api_key;
    const std::string got = req.get_header_value("Authorization");
    // Compared in full whatever the first difference (no early exit to time).
    unsigned diff = static_cast<unsigned>(got.size() ^ want.size());
    for (size_t i = 0; i < got.size(); ++i) diff |= static_cast<unsigned>(got[i] ^ want[i % want.size()]);
    if (diff != 0)
      throw ApiError(401, got.empty() ? "missing API key (send the header 'Authorization: Bearer KEY')" : "invalid API key");
  }
  void check_ready() const {
    if (!ready) throw ApiError(503, "the model is loading");
  }

  /// Runs `body` and turns its errors into OpenAI-style error responses.
  template <class F>
  void guarded(httplib::Response& res, F&& body) {
    try {
      body();
    } catch (const ApiError& e) {
      send_error(res, e);
    } catch (const std::exception& e) {
      send_error(res, ApiError(500, e.what()));
    }
  }

  void generation(const httplib::Request& hreq, httplib::Response& res, bool chat);
  void routes();
};

void HttpServer::Impl::generation(const httplib::Request& hreq, httplib::Response& res, bool chat) {
  check_key(hreq);
  check_ready();
  const GenerationRequest g = parse_generation_request(hreq.body, chat);
  const tok::Tokenizer& tk = *model.tokenizer;
  auto r = std::make_shared<Request>();
  if (chat) {
    if (model.chat_template == nullptr) throw ApiError(400, "the model has no chat template; use /v1/completions");
    try {
      r->prompt = chat_prompt_tokens(*model.chat_template, tk, g.messages);
    } catch (const Error& e) {
      throw ApiError(400, fmt::format("the chat template could not render the messages: {}", e.what()), "messages");
    }
  } else if (g.prompt_is_ids) {
    for (int32_t id : g.prompt_ids)
      if (id >= tk.n_vocab())
        throw ApiError(400, fmt::format("'prompt' holds token id {}, outside the vocabulary [0, {})", id, tk.n_vocab()), "prompt");
    r->prompt = g.prompt_ids;
  } else {
    r->prompt = tk.encode(g.prompt_text, /*add_special=*/true, /*parse_special=*/true);
  }
  if (r->prompt.empty()) throw ApiError(400, "the prompt has no tokens", chat ? "messages" : "prompt");
  Scheduler& sched = *model.scheduler;
  const int32_t slot_ctx = sched.config().slot_ctx;
  if (static_cast<int64_t>(r->prompt.size()) >= slot_ctx)
    throw ApiError(400,
                   fmt::format("the prompt is {} tokens; a slot's context is {} tokens (-c divided by --parallel), so "
                               "at most {} prompt tokens fit",
                               r->prompt.size(), slot_ctx, slot_ctx - 1),
                   chat ? "messages" : "prompt");
  r->sampling = g.sampling;
  r->max_tokens = g.max_tokens;
  r->draft_max = g.spec_n_max;
  r->draft_min = g.spec_n_min;
  r->draft_p_min = g.spec_p_min;
  if (g.ignore_eos) r->banned = tk.eog_ids();
  auto ch = std::make_shared<Channel>();
  auto text = std::make_shared<TextStream>(tk, g.stop);
  const bool want_lp = g.logprobs;
  const int32_t top = g.top_logprobs;
  const tok::Tokenizer* tkp = &tk;
  r->on_token = [ch, text, tkp, want_lp, top](int32_t id, std::span<const float> logits) {
    if (tkp->is_eog(id)) return TokenAction::Stop;
    bool stopped = false;
    Piece p;
    p.text = text->push(id, &stopped);
    if (want_lp) p.logprobs.push_back(logprob_entry(*tkp, id, token_logprob(logits, id, top)));
    {
      std::lock_guard lock(ch->mu);
      ch->pieces.push_back(std::move(p));
    }
    ch->cv.notify_all();
    return stopped ? TokenAction::Stop : TokenAction::Continue;
  };
  r->on_done = [ch, text](const FinishInfo& f) {
    std::string tail = f.reason == FinishReason::Error ? std::string() : text->finish();
    {
      std::lock_guard lock(ch->mu);
      if (!tail.empty()) ch->pieces.push_back(Piece{std::move(tail)});
      ch->fin = f;
      ch->done = true;
    }
    ch->cv.notify_all();
  };
  if (!sched.submit(r))
    throw ApiError(503, sched.draining() ? "the server is shutting down" : "the request queue is full; retry later");
  ++in_flight;

  const std::string id = fmt::format("{}-{}", chat ? "chatcmpl" : "cmpl", next_id++);
  const int64_t created = unix_now();
  const std::string model_name = g.model.empty() ? model.id : g.model;
  const char* object = chat ? "chat.completion" : "text_completion";

  if (!g.stream) {
    // The JSON body is sent through a chunked content provider that waits for the end of the
    // request in steps of 200 ms and checks between them that the client is still there
    // (DataSink::is_writable: in httplib 0.11.4 a select for writing plus a MSG_PEEK read, which
    // sees the peer's close), so a client that leaves is noticed within one wait and its request
    // is cancelled, freeing the slot. The
    // status (200) is sent before the result exists: a forward failure after admission answers
    // 200 with an OpenAI-style error body (as the stream does).
    res.set_chunked_content_provider(
        "application/json",
        [=](size_t, httplib::DataSink& sink) {
          std::string all;
          json lps = json::array();
          FinishInfo fin;
          {
            std::unique_lock lock(ch->mu);
            // Not done yet: go on waiting while the client is there (returning false ends the
            // response, and the releaser below cancels the request).
            if (!ch->cv.wait_for(lock, std::chrono::milliseconds(200), [&] { return ch->done; }))
              return sink.is_writable();
            for (Piece& p : ch->pieces) {
              all += p.text;
              for (json& e : p.logprobs) lps.push_back(std::move(e));
            }
            fin = ch->fin;
          }
          std::string body;
          if (fin.reason == FinishReason::Error) {
            body = error_body(500, fin.error);
          } else {
            json choice = json::object();
            choice["index"] = 0;
            if (chat) {
              choice["message"] = json{{"role", "assistant"}, {"content", all}};
              choice["logprobs"] = want_lp ? json{{"content", lps}} : json(nullptr);
            } else {
              choice["text"] = all;
              choice["logprobs"] = want_lp ? completion_logprobs(lps, 0) : json(nullptr);
            }
            choice["finish_reason"] = finish_reason(fin.reason);
            json out = json::object();
            out["id"] = id;
            out["object"] = object;
            out["created"] = created;
            out["model"] = model_name;
            out["choices"] = json::array({std::move(choice)});
            out["usage"] = usage_json(fin);
            body = dump_json(out);
          }
          if (!sink.write(body.data(), body.size())) return false;
          sink.done();
          return true;
        },
        // The response ended (sent, or the connection failed): a request still running is cancelled.
        [this, r](bool) {
          r->cancelled = true;
          --in_flight;
        });
    return;
  }

  // SSE: one "data: {chunk}" event per piece, then the finish chunk, the usage chunk when asked,
  // and "data: [DONE]". A failed write (the client left) cancels the request.
  struct StreamState {
    bool started = false;
    size_t offset = 0;  ///< text bytes sent (completions text_offset)
  };
  auto ss = std::make_shared<StreamState>();
  const bool include_usage = g.include_usage;
  const auto chunk = [=](json choice) {
    json c = json::object();
    c["id"] = id;
    c["object"] = chat ? "chat.completion.chunk" : "text_completion";
    c["created"] = created;
    c["model"] = model_name;
    c["choices"] = json::array({std::move(choice)});
    return "data: " + dump_json(c) + "\n\n";
  };
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [=](size_t, httplib::DataSink& sink) {
        std::deque<Piece> pieces;
        bool done = false;
        FinishInfo fin;
        {
          std::unique_lock lock(ch->mu);
          ch->cv.wait_for(lock, std::chrono::milliseconds(200), [&] { return ch->done || !ch->pieces.empty(); });
          pieces.swap(ch->pieces);
          done = ch->done;
          fin = ch->fin;
        }
        std::string out;
        if (!ss->started && chat) {
          json c = json::object();
          c["index"] = 0;
          c["delta"] = json{{"role", "assistant"}, {"content", ""}};
          c["logprobs"] = nullptr;
          c["finish_reason"] = nullptr;
          out += chunk(std::move(c));
        }
        ss->started = true;
        for (Piece& p : pieces) {
          if (p.text.empty() && p.logprobs.empty()) continue;
          json c = json::object();
          c["index"] = 0;
          if (chat) {
            c["delta"] = json{{"content", p.text}};
            c["logprobs"] = want_lp ? json{{"content", p.logprobs}} : json(nullptr);
          } else {
            c["text"] = p.text;
            c["logprobs"] = want_lp ? completion_logprobs(p.logprobs, ss->offset) : json(nullptr);
          }
          c["finish_reason"] = nullptr;
          ss->offset += p.text.size();
          out += chunk(std::move(c));
        }
        if (done) {
          if (fin.reason == FinishReason::Error) {
            out += "data: " + error_body(500, fin.error) + "\n\n";
          } else {
            json c = json::object();
            c["index"] = 0;
            if (chat) c["delta"] = json::object();
            else c["text"] = "";
            c["logprobs"] = nullptr;
            c["finish_reason"] = finish_reason(fin.reason);
            out += chunk(std::move(c));
            if (include_usage) {
              json u = json::object();
              u["id"] = id;
              u["object"] = chat ? "chat.completion.chunk" : "text_completion";
              u["created"] = created;
              u["model"] = model_name;
              u["choices"] = json::array();
              u["usage"] = usage_json(fin);
              out += "data: " + dump_json(u) + "\n\n";
            }
          }
          out += "data: [DONE]\n\n";
        }
        if (!out.empty() && !sink.write(out.data(), out.size())) {
          r->cancelled = true;
          return false;
        }
        if (done) sink.done();
        return true;
      },
      // The stream ended (finished, or the connection failed): a request still running is cancelled.
      [this, r](bool) {
        r->cancelled = true;
        --in_flight;
      });
}

namespace {
/// The methods a route of routes() answers ("GET", "POST"), or "" for an unknown path.
std::string_view route_methods(std::string_view path) {
  static constexpr std::pair<std::string_view, std::string_view> kRoutes[] = {
      {"/health", "GET"},         {"/metrics", "GET"},        {"/v1/models", "GET"},
      {"/v1/chat/completions", "POST"}, {"/v1/completions", "POST"}, {"/tokenize", "POST"},
      {"/detokenize", "POST"}};
  for (const auto& [p, m] : kRoutes)
    if (p == path) return m;
  return {};
}
}  // namespace

void HttpServer::Impl::routes() {
  svr.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    if (!ready) {
      send_error(res, ApiError(503, "the model is loading"));
      return;
    }
    // While draining (SIGTERM), a load balancer must stop sending traffic: 503 as llama-server
    // answers while it cannot take requests.
    if (model.scheduler->draining()) {
      send_error(res, ApiError(503, "the server is shutting down"));
      return;
    }
    res.set_content(R"({"status":"ok"})", "application/json");
  });
  svr.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    SchedulerStats st;
    if (ready) st = model.scheduler->stats();
    res.set_content(prometheus_text(st), "text/plain; version=0.0.4");
  });
  svr.Get("/v1/models", [this](const httplib::Request& req, httplib::Response& res) {
    guarded(res, [&] {
      check_key(req);
      check_ready();
      json m = json::object();
      m["id"] = model.id;
      m["object"] = "model";
      m["created"] = model.created;
      m["owned_by"] = "minfer";
      json out = json::object();
      out["object"] = "list";
      out["data"] = json::array({m});
      res.set_content(dump_json(out), "application/json");
    });
  });
  svr.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
    guarded(res, [&] { generation(req, res, true); });
  });
  svr.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
    guarded(res, [&] { generation(req, res, false); });
  });
  svr.Post("/tokenize", [this](const httplib::Request& req, httplib::Response& res) {
    guarded(res, [&] {
      check_key(req);
      check_ready();
      const TokenizeRequest t = parse_tokenize_request(req.body);
      const tok::Tokenizer& tk = *model.tokenizer;
      const std::vector<int32_t> ids = tk.encode(t.content, t.add_special, /*parse_special=*/true);
      json tokens = json::array();
      for (int32_t id : ids) {
        if (t.with_pieces) tokens.push_back(json{{"id", id}, {"piece", std::string(tk.token_to_piece(id, true))}});
        else tokens.push_back(id);
      }
      res.set_content(dump_json(json{{"tokens", tokens}}), "application/json");
    });
  });
  svr.Post("/detokenize", [this](const httplib::Request& req, httplib::Response& res) {
    guarded(res, [&] {
      check_key(req);
      check_ready();
      const std::vector<int64_t> ids = parse_detokenize_request(req.body);
      const tok::Tokenizer& tk = *model.tokenizer;
      std::vector<int32_t> v;
      for (int64_t id : ids) {
        if (id >= tk.n_vocab())
          throw ApiError(400, fmt::format("'tokens' holds token id {}, outside the vocabulary [0, {})", id, tk.n_vocab()), "tokens");
        v.push_back(static_cast<int32_t>(id));
      }
      res.set_content(dump_json(json{{"content", tk.decode(v, true)}}), "application/json");
    });
  });
  // A Content-Length over --max-body is answered 413 from the headers, before any of the body is
  // read (httplib 0.11.4 would read and skip the whole body first: a huge or never-sent body held
  // a worker thread until the read timeout). The body is sent by a content provider that returns
  // false once it has written it: httplib then ends the connection instead of reading the unread
  // body as the next request.
  svr.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    int status = 0;
    std::string msg;
    if (req.has_header("Transfer-Encoding")) {
      // httplib 0.11.4 reads a chunked body whole, whatever its payload limit: --max-body would
      // not bound it. A body must come with a Content-Length (411 Length Required, RFC 9110
      // section 15.5.12), as the OpenAI clients and curl send it.
      status = 411;
      msg = fmt::format("a request body must be sent with a Content-Length (Transfer-Encoding: {} is not accepted)",
                        req.get_header_value("Transfer-Encoding"));
    } else if (req.has_header("Content-Length")) {
      const std::string cl = req.get_header_value("Content-Length");
      uint64_t n = 0;
      const auto [end, ec] = std::from_chars(cl.data(), cl.data() + cl.size(), n);
      if (ec == std::errc::result_out_of_range ||
          (ec == std::errc() && end == cl.data() + cl.size() && n > opt.max_body)) {
        status = 413;
        msg = fmt::format("the request body is {} bytes (Content-Length), larger than --max-body {}", cl, opt.max_body);
      }
    }
    if (status == 0) return httplib::Server::HandlerResponse::Unhandled;
    auto body = std::make_shared<std::string>(error_body(status, msg));
    res.status = status;
    res.set_header("Connection", "close");
    res.set_content_provider(body->size(), "application/json",
                             [body](size_t offset, size_t length, httplib::DataSink& sink) {
                               sink.write(body->data() + offset, length);
                               return false;  // ends the connection (see above)
                             });
    return httplib::Server::HandlerResponse::Handled;
  });
  // Statuses httplib sets itself (404 no route, 413 body too large, 400 unparsable HTTP) get an
  // OpenAI-style body; responses that already have one (in the body or, for the early 413, from a
  // content provider) keep it.
  svr.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty() || res.content_length_ > 0) return;
    std::string msg;
    // A known path asked with another method is 405 with an Allow header (RFC 9110 section
    // 15.5.6), not 404: the client has the right address and the wrong verb.
    const std::string_view allowed = res.status == 404 ? route_methods(req.path) : std::string_view();
    if (!allowed.empty()) {
      res.status = 405;
      res.set_header("Allow", std::string(allowed));
      msg = fmt::format("{} takes {}, not {}", req.path, allowed, req.method);
    } else if (res.status == 404) msg = fmt::format("no route for {} {}", req.method, req.path);
    else if (res.status == 413 && req.get_header_value("Content-Type") == "application/x-www-form-urlencoded")
      // cpp-httplib caps form-encoded bodies at 8,192 bytes whatever --max-body says; curl -d
      // sends that content type unless told otherwise.
      msg = "a request body sent as application/x-www-form-urlencoded is limited to 8192 bytes by the HTTP "
            "library; send it with Content-Type: application/json";
    else if (res.status == 413) msg = "the request body is larger than --max-body";
    else msg = fmt::format("HTTP error {}", res.status);
    res.set_content(error_body(res.status, msg), "application/json");
  });
  svr.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string msg = "internal error";
    try {
      if (ep) std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      msg = e.what();
    } catch (...) {
    }
    res.status = 500;
    res.set_content(error_body(500, msg), "application/json");
  });
}

HttpServer::HttpServer(const HttpOptions& options) : impl_(std::make_unique<Impl>()) {
  impl_->opt = options;
  Impl& m = *impl_;
  m.svr.set_payload_max_length(static_cast<size_t>(options.max_body));
  // Reading a request is bounded by a short timeout of its own (not --timeout), so clients that
  // send their headers or body slowly cannot hold every worker thread for long.
  m.svr.set_read_timeout(std::min<int>(options.timeout_s, kRequestReadTimeoutS), 0);
  m.svr.set_write_timeout(options.timeout_s, 0);
  const int threads = options.threads > 0 ? options.threads : 16;
  m.svr.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
  m.routes();
}

HttpServer::~HttpServer() { stop(); }

void HttpServer::start() {
  Impl& m = *impl_;
  if (m.opt.port == 0) {
    port_ = m.svr.bind_to_any_port(m.opt.host);
    if (port_ <= 0) fail("server: cannot bind to {} (any port)", m.opt.host);
  } else {
    if (!m.svr.bind_to_port(m.opt.host, m.opt.port)) fail("server: cannot bind to {}:{} (in use, or not an address of this machine)", m.opt.host, m.opt.port);
    port_ = m.opt.port;
  }
  m.listen_returned = false;
  m.listener = std::thread([&m] {
    m.svr.listen_after_bind();
    m.listen_returned = true;
  });
}

void HttpServer::set_ready(const ServingModel& model) {
  impl_->model = model;
  impl_->ready = true;
}

int HttpServer::in_flight() const { return impl_->in_flight; }

void HttpServer::stop() {
  Impl& m = *impl_;
  if (m.listener.joinable()) {
    // httplib's stop() only closes the socket of a server that is already listening: called
    // before the listener thread has entered its accept loop, it does nothing and the loop then
    // runs forever (seen when `serve` fails to load its model right after start()). So wait until
    // the loop runs (or has given up), then stop it.
    while (!m.svr.is_running() && !m.listen_returned) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    m.svr.stop();
    m.listener.join();
  }
}

}  // namespace minfer::server
