// The HTTP face of `minfer serve` (cpp-httplib): routes, the API key, OpenAI response bodies and
// SSE streams. It parses, validates and streams only; generation runs in the Scheduler's step
// loop. Built only when cpp-httplib is found (MINFER_BUILD_SERVER).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "chat/chat.h"
#include "server/scheduler.h"
#include "tokenizer/tokenizer.h"

namespace minfer::server {

/// Seconds a client has to deliver a request's headers and body once its connection is read
/// (cpp-httplib's read timeout): short, so a few slow clients cannot occupy the worker threads.
inline constexpr int kRequestReadTimeoutS = 10;

struct HttpOptions {
  std::string host = "127.0.0.1";
  int port = 8080;              ///< 0: any free port (the one bound is printed and returned by port())
  std::string api_key;          ///< empty: no key needed
  uint64_t max_body = uint64_t{8} << 20;
  int timeout_s = 600;          ///< socket write timeout (reads: at most kRequestReadTimeoutS)
  int threads = 0;              ///< HTTP worker threads (0: enough for the slots and the queue)
};

/// What the routes serve once the model is loaded.
struct ServingModel {
  std::string id;               ///< the name /v1/models lists (the file name)
  const tok::Tokenizer* tokenizer = nullptr;
  const chat::ChatTemplate* chat_template = nullptr;  ///< null: chat completions answer 400
  Scheduler* scheduler = nullptr;
  int64_t created = 0;          ///< unix time of the load
};

class HttpServer {
 public:
  explicit HttpServer(const HttpOptions& options);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  /// Binds the socket and starts the listening thread. /health answers 503 until set_ready.
  /// Throws minfer::Error naming host and port when the socket cannot be bound.
  void start();
  /// The port bound (after start()).
  int port() const { return port_; }
  /// Serves `m` from now on (its pointers must outlive the server).
  void set_ready(const ServingModel& m);
  /// Generation requests accepted and not yet fully answered (a stream counts until its last
  /// byte is written or its connection fails).
  int in_flight() const;
  /// Stops accepting connections; returns after the requests in flight have been answered.
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int port_ = 0;
};

}  // namespace minfer::server
