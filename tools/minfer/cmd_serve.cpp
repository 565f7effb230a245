// `minfer serve`: an OpenAI-compatible HTTP server (src/server/, docs/server.md). The HTTP
// threads parse, validate and stream; one step-loop thread runs the Scheduler, the only caller
// of the engine. -c is the total KV cells, divided evenly among the --parallel slots.
#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <optional>
#include <thread>

#include "commands.h"
#include "core/ascii.h"
#include "core/error.h"
#include "core/log.h"
#include "core/printable.h"
#include "engine/engine.h"
#include "gguf/gguf.h"
#include "options.h"

#ifdef MINFER_HAS_SERVER
#include "server/http/http_server.h"
#include "kv/kv_cache.h"
#include "server/scheduler.h"
#endif

namespace minfer::cli {
namespace {

struct ServeArgs {
  ModelArgs model;
  std::string host = "127.0.0.1";
  int port = 8080;
  int32_t parallel = 4;
  std::string api_key;
  int32_t max_queue = 256;
  int64_t max_body = int64_t{8} << 20;
  int timeout = 600;
  int32_t chunk = 256;
  SpeculativeArgs spec;  ///< prompt lookup or a draft model, for every request
};

#ifdef MINFER_HAS_SERVER
void serve(const ServeArgs& a) {
  if (a.parallel < 1 || a.parallel > KvCache::kMaxSeq)
    fail("--parallel {} must be in [1, {}] (the KV cache's sequence ids)", a.parallel, KvCache::kMaxSeq);
  if (a.port < 0 || a.port > 65535) fail("--port {} must be in [0, 65535] (0: any free port)", a.port);
  if (a.max_queue < 0) fail("--max-queue {} must not be negative", a.max_queue);
  if (a.max_body < 1) fail("--max-body {} must be at least 1 byte", a.max_body);
  if (a.timeout < 1) fail("--timeout {} must be at least 1 second", a.timeout);
  if (a.chunk < 1) fail("--prefill-chunk {} must be at least 1 token", a.chunk);
  bool on = false;
  const SpeculativeParams spec = a.spec.params(&on);  // checks the options and opens -md's file
  if (a.model.ctx > 0 && a.model.ctx / a.parallel < server::kSlotCellAlign)
    fail("-c {} over --parallel {} leaves {} cells per slot; a slot needs at least {}", a.model.ctx, a.parallel,
         a.model.ctx / a.parallel, server::kSlotCellAlign);

  // SIGTERM / SIGINT are taken by sigwait below, in this thread only: block them before any
  // thread starts (threads inherit the mask).
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGTERM);
  sigaddset(&sigs, SIGINT);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);

  server::HttpOptions ho;
  ho.host = a.host;
  ho.port = a.port;
  ho.api_key = a.api_key;
  ho.max_body = static_cast<uint64_t>(a.max_body);
  ho.timeout_s = a.timeout;
  // One worker per connection a client may hold open: the running slots, the queue, and a few for
  // /health, /metrics and requests that are refused.
  ho.threads = a.parallel + a.max_queue + 8;
  // A GPU that cannot be used is reported before the port is bound (the model's load would say
  // it too, but only after the listener started): a --device that names CUDA (any spelling
  // parse_device takes; an unknown name is an error here too), or an -ngl that puts layers on it.
  // A missing or unreadable model file, too, is reported before the port is bound.
  (void)gguf::GgufFile::open(a.model.model);
  if (!a.spec.draft_model.empty()) (void)gguf::GgufFile::open(a.spec.draft_model);
  if (parse_device(a.model.device) == graph::BackendKind::Cuda ||
      (!a.spec.draft_model.empty() && !a.spec.device.empty() && parse_device(a.spec.device) == graph::BackendKind::Cuda) ||
      (!a.model.gpu_layers.empty() && parse_gpu_layers(a.model.gpu_layers) > 0))
    (void)create_backend(graph::BackendKind::Cuda, 1);
  server::HttpServer http(ho);
  http.start();
  log_info("serve: listening on http://{}:{} (loading the model)", a.host, http.port());

  LoadedModel lm = load_model(a.model);
  const tok::Tokenizer& tk = *lm.model->tokenizer();
  const int64_t n_ctx = lm.engine->n_ctx();
  const int64_t per_slot = n_ctx / a.parallel / server::kSlotCellAlign * server::kSlotCellAlign;
  if (per_slot < server::kSlotCellAlign)
    fail("context {} over --parallel {} leaves fewer than {} cells per slot; raise -c", n_ctx, a.parallel,
         server::kSlotCellAlign);
  server::EngineStepModel step_model(*lm.engine, a.parallel, static_cast<int32_t>(per_slot));
  // The draft model (-md): its own engine with the target's cells, slot s on its sequence s.
  LoadedModel draft;
  std::optional<server::EngineStepModel> draft_step;
  if (!a.spec.draft_model.empty()) {
    draft = load_draft(a.spec, a.model, lm);
    draft_step.emplace(*draft.engine, a.parallel, static_cast<int32_t>(per_slot));
  }
  server::SchedulerConfig sc;
  sc.n_slots = a.parallel;
  sc.slot_ctx = static_cast<int32_t>(per_slot);
  sc.chunk = a.chunk;
  sc.max_queue = a.max_queue;
  sc.lookup_n = spec.lookup_n;
  sc.draft_max = spec.n_max;
  sc.draft_min = spec.n_min;
  sc.draft_p_min = spec.p_min;
  if (draft_step) sc.draft_vocab = std::min<int64_t>(tk.n_vocab(), draft.model->tokenizer()->n_vocab());
  server::Scheduler sched(step_model, sc, draft_step ? &*draft_step : nullptr);
  std::optional<chat::ChatTemplate> tmpl;
  if (!tk.chat_template().empty()) {
    try {
      tmpl.emplace(tk.chat_template(), "tokenizer.chat_template of " + a.model.model);
    } catch (const Error& e) {
      log_warn("{}; /v1/chat/completions will answer 400", e.what());
    }
  } else {
    log_warn("{} has no chat template; /v1/chat/completions will answer 400", a.model.model);
  }

  std::atomic<bool> stop_loop{false};
  std::thread loop([&] {
    while (!stop_loop) {
      try {
        if (!sched.step()) sched.wait_for_work(std::chrono::steady_clock::now() + std::chrono::milliseconds(200));
      } catch (const std::exception& e) {
        log_error("server step: {}", e.what());
      }
    }
  });

  server::ServingModel sm;
  sm.id = std::filesystem::path(a.model.model).filename().string();
  sm.tokenizer = &tk;
  sm.chat_template = tmpl ? &*tmpl : nullptr;
  sm.scheduler = &sched;
  sm.created = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  http.set_ready(sm);
  const int64_t most_drafted = std::min<int64_t>(sc.draft_max, lm.engine->exact_step_tokens() - 1);
  std::string spec_note;
  if (sc.lookup_n > 0)
    spec_note = fmt::format(", prompt lookup of {}-grams, up to {} drafted tokens", sc.lookup_n, most_drafted);
  else if (draft_step)
    spec_note = fmt::format(", draft model {}, up to {} drafted tokens (p-min {})",
                            std::filesystem::path(a.spec.draft_model).filename().string(), most_drafted, sc.draft_p_min);
  log_info("serve: ready on http://{}:{} ({} slots of {} tokens{})", a.host, http.port(), a.parallel, per_slot,
           spec_note);

  int sig = 0;
  sigwait(&sigs, &sig);
  // Drain: new requests get 503, running ones finish (bounded by --timeout), then the listener
  // stops and the process exits 0.
  log_info("serve: signal {}: finishing {} request(s) in flight (running or queued)", sig, http.in_flight());
  sched.set_draining();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(a.timeout);
  const auto drained = [&] { return sched.idle() && http.in_flight() == 0; };
  while (!drained() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  if (!drained()) {
    log_warn("serve: --timeout {} s passed; cancelling what still runs", a.timeout);
    sched.cancel_all();
    const auto hard = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (!drained() && std::chrono::steady_clock::now() < hard)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  http.stop();
  stop_loop = true;
  sched.wake();
  loop.join();
  log_info("serve: stopped");
}
#else
void serve(const ServeArgs&) {
  fail("this minfer was built without the server (cpp-httplib was not found; install libcpp-httplib-dev and rebuild)");
}
#endif

}  // namespace

void add_serve_command(CLI::App& app) {
  auto args = std::make_shared<ServeArgs>();
  auto* cmd = app.add_subcommand("serve", "OpenAI-compatible HTTP server with continuous batching (docs/server.md)");
  args->model.add(cmd);
  cmd->add_option("--host", args->host, "address to listen on")->capture_default_str();
  cmd->add_option("--port", args->port, "port to listen on (0: any free port, printed)")->capture_default_str();
  cmd->add_option("--parallel", args->parallel, "slots: requests decoded together (also -np)")->capture_default_str();
  cmd->add_option("--api-key", args->api_key, "require 'Authorization: Bearer KEY' on /v1/*, /tokenize, /detokenize");
  cmd->add_option("--max-queue", args->max_queue, "requests that may wait for a slot before 503")->capture_default_str();
  cmd->add_option("--max-body", args->max_body, "largest request body in bytes (413 above)")->capture_default_str();
  cmd->add_option("--timeout", args->timeout, "socket read/write timeout and the shutdown grace period, seconds")
      ->capture_default_str();
  cmd->add_option("--prefill-chunk", args->chunk, "most prompt tokens prefilled per step")->capture_default_str();
  args->spec.add(cmd);
  cmd->callback([args] { serve(*args); });
}

}  // namespace minfer::cli
