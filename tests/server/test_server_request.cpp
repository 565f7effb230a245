// Request parsing and validation of `minfer serve` (one test per error class), logprobs and the
// /metrics text; with the HTTP layer built, the statuses the HTTP layer itself answers (401, 404,
// 413, 503 while loading) over loopback.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "server/request.h"

#ifdef MINFER_HAS_SERVER
#include <httplib.h>

#include "server/http/http_server.h"
#endif

namespace minfer::server {
namespace {

using json = nlohmann::json;

/// The status and param of the ApiError `body` provokes, or (0, "") when it parses.
std::pair<int, std::string> error_of(const std::string& body, bool chat) {
  try {
    parse_generation_request(body, chat);
  } catch (const ApiError& e) {
    // The body is an OpenAI-style error object.
    const json j = json::parse(e.body());
    EXPECT_EQ(j["error"]["code"], e.status());
    EXPECT_EQ(j["error"]["message"], e.what());
    EXPECT_TRUE(j["error"]["type"].is_string());
    return {e.status(), e.param()};
  }
  return {0, ""};
}

TEST(ServerRequest, ValidChatRequestParsesEveryField) {
  const GenerationRequest r = parse_generation_request(
      R"({"model":"m","messages":[{"role":"system","content":"s"},{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}],
          "max_completion_tokens":7,"temperature":0,"top_p":0.5,"top_k":3,"min_p":0.1,"seed":42,"stop":["x","y"],
          "presence_penalty":0.5,"frequency_penalty":-0.5,"repeat_penalty":1.1,"logprobs":true,"top_logprobs":2,
          "stream":true,"stream_options":{"include_usage":true},"n":1,"user":"ignored"})",
      true);
  EXPECT_EQ(r.model, "m");
  ASSERT_EQ(r.messages.size(), 2u);
  EXPECT_EQ(r.messages[1]["content"], "ab");
  EXPECT_EQ(r.max_tokens, 7);
  EXPECT_EQ(r.sampling.temp, 0.0f);
  EXPECT_EQ(r.sampling.top_p, 0.5f);
  EXPECT_EQ(r.sampling.top_k, 3);
  EXPECT_EQ(r.sampling.min_p, 0.1f);
  EXPECT_EQ(r.sampling.seed, 42u);
  EXPECT_TRUE(r.seed_given);
  EXPECT_EQ(r.stop, (std::vector<std::string>{"x", "y"}));
  EXPECT_EQ(r.sampling.presence_penalty, 0.5f);
  EXPECT_EQ(r.sampling.frequency_penalty, -0.5f);
  EXPECT_EQ(r.sampling.repeat_penalty, 1.1f);
  EXPECT_TRUE(r.logprobs);
  EXPECT_EQ(r.top_logprobs, 2);
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
}

TEST(ServerRequest, CompletionPromptIsTextOrTokenIds) {
  GenerationRequest r = parse_generation_request(R"({"prompt":"hello","max_tokens":3,"logprobs":2,"stop":"\n"})", false);
  EXPECT_EQ(r.prompt_text, "hello");
  EXPECT_FALSE(r.prompt_is_ids);
  EXPECT_TRUE(r.logprobs);
  EXPECT_EQ(r.top_logprobs, 2);
  EXPECT_EQ(r.stop, (std::vector<std::string>{"\n"}));
  r = parse_generation_request(R"({"prompt":[1,2,3]})", false);
  EXPECT_TRUE(r.prompt_is_ids);
  EXPECT_EQ(r.prompt_ids, (std::vector<int32_t>{1, 2, 3}));
  r = parse_generation_request(R"({"prompt":["one"]})", false);
  EXPECT_EQ(r.prompt_text, "one");
}

TEST(ServerRequest, MalformedJsonIs400) {
  EXPECT_EQ(error_of(R"({"messages": [)", true).first, 400);
  EXPECT_EQ(error_of("", true).first, 400);
  EXPECT_EQ(error_of("[1,2]", false).first, 400) << "not an object";
  EXPECT_EQ(error_of("{\"prompt\":\"\xff\"}", false).first, 400) << "invalid UTF-8";
}

TEST(ServerRequest, DeeplyNestedBodyIs400BeforeParsing) {
  // 200,000 nested objects (1.2 MB, under --max-body) crashed the server's worker thread.
  const auto nested = [](int n, const char* open, const char* close) {
    std::string s = R"({"prompt":"x","max_tokens":1,"a":)";
    for (int i = 0; i < n; ++i) s += open;
    s += "1";
    for (int i = 0; i < n; ++i) s += close;
    return s + "}";
  };
  EXPECT_EQ(error_of(nested(200000, R"({"b":)", "}"), false).first, 400);
  EXPECT_EQ(error_of(nested(200000, "[", "]"), false).first, 400);
  EXPECT_THROW(parse_tokenize_request(R"({"content":"x","a":)" + std::string(100000, '[') + std::string(100000, ']') + "}"),
               ApiError);
  // 64 levels (the limit) parse; brackets inside strings do not count.
  EXPECT_EQ(error_of(nested(62, "[", "]"), false).first, 0);
  EXPECT_EQ(error_of(R"({"prompt":")" + std::string(1000, '[') + R"(\"{","max_tokens":1})", false).first, 0);
}

TEST(ServerRequest, FieldOfTheWrongTypeIs400NamingTheField) {
  EXPECT_EQ(error_of(R"({"messages":[{"role":"user","content":"x"}],"temperature":"hot"})", true),
            (std::pair<int, std::string>{400, "temperature"}));
  EXPECT_EQ(error_of(R"({"prompt":"x","max_tokens":1.5})", false), (std::pair<int, std::string>{400, "max_tokens"}));
  EXPECT_EQ(error_of(R"({"prompt":"x","stream":"yes"})", false), (std::pair<int, std::string>{400, "stream"}));
  EXPECT_EQ(error_of(R"({"prompt":"x","stop":[1]})", false), (std::pair<int, std::string>{400, "stop"}));
  EXPECT_EQ(error_of(R"({"prompt":{"a":1}})", false), (std::pair<int, std::string>{400, "prompt"}));
  EXPECT_EQ(error_of(R"({"messages":[{"role":"user","content":5}]})", true).second, "messages[0].content");
  EXPECT_EQ(error_of(R"({"messages":[{"role":"wizard","content":"x"}]})", true).second, "messages[0].role");
  EXPECT_EQ(error_of(R"({"messages":[{"role":"user","content":"x"}],"logprobs":1})", true).second, "logprobs");
}

TEST(ServerRequest, FieldOutOfRangeIs400NamingTheField) {
  const std::string m = R"("messages":[{"role":"user","content":"x"}])";
  EXPECT_EQ(error_of("{" + m + R"(,"temperature":2.5})", true).second, "temperature");
  EXPECT_EQ(error_of("{" + m + R"(,"top_p":-0.1})", true).second, "top_p");
  EXPECT_EQ(error_of("{" + m + R"(,"min_p":1.5})", true).second, "min_p");
  EXPECT_EQ(error_of("{" + m + R"(,"top_k":-1})", true).second, "top_k");
  EXPECT_EQ(error_of("{" + m + R"(,"max_tokens":0})", true).second, "max_tokens");
  EXPECT_EQ(error_of("{" + m + R"(,"presence_penalty":3})", true).second, "presence_penalty");
  EXPECT_EQ(error_of("{" + m + R"(,"repeat_penalty":0})", true).second, "repeat_penalty");
  EXPECT_EQ(error_of("{" + m + R"(,"n":2})", true).second, "n");
  EXPECT_EQ(error_of("{" + m + R"(,"logprobs":true,"top_logprobs":21})", true).second, "top_logprobs");
  EXPECT_EQ(error_of("{" + m + R"(,"top_logprobs":2})", true).second, "top_logprobs") << "without logprobs";
  EXPECT_EQ(error_of(R"({"prompt":[1,-2]})", false).second, "prompt");
  EXPECT_EQ(error_of(R"({"prompt":"x","seed":18446744073709551615})", false).second, "seed");
  EXPECT_EQ(error_of(R"({"prompt":"x","max_tokens":1e400})", false).first, 400);
  EXPECT_EQ(error_of(R"({"prompt":"x","speculative.n_max":257})", false).second, "speculative.n_max");
  EXPECT_EQ(error_of(R"({"prompt":"x","speculative.n_min":-1})", false).second, "speculative.n_min");
  EXPECT_EQ(error_of(R"({"prompt":"x","speculative.p_min":1.5})", false).second, "speculative.p_min");
  EXPECT_EQ(error_of(R"({"prompt":"x","speculative.n_max":"4"})", false).second, "speculative.n_max");
  EXPECT_EQ(error_of(R"({"prompt":"x","speculative.n_max":2,"speculative.n_min":3})", false).second,
            "speculative.n_min");
}

// llama-server's ignore_eos: a boolean, off when absent.
TEST(ServerRequest, IgnoreEosIsABoolean) {
  EXPECT_FALSE(parse_generation_request(R"({"prompt":"x"})", false).ignore_eos);
  EXPECT_TRUE(parse_generation_request(R"({"prompt":"x","ignore_eos":true})", false).ignore_eos);
  EXPECT_EQ(error_of(R"({"prompt":"x","ignore_eos":1})", false).second, "ignore_eos");
}

// llama-server's per-request speculation fields (flat keys with a dot); absent: -1 (the server's).
TEST(ServerRequest, SpeculativeFieldsAreReadWhereGiven) {
  GenerationRequest r = parse_generation_request(R"({"prompt":"x","speculative.n_max":0,"speculative.p_min":0.5})", false);
  EXPECT_EQ(r.spec_n_max, 0);
  EXPECT_EQ(r.spec_n_min, -1);
  EXPECT_FLOAT_EQ(r.spec_p_min, 0.5f);
  r = parse_generation_request(R"({"prompt":"x","speculative.n_min":3})", false);
  EXPECT_EQ(r.spec_n_max, -1);
  EXPECT_EQ(r.spec_n_min, 3);
  EXPECT_FLOAT_EQ(r.spec_p_min, -1.0f);
}

TEST(ServerRequest, MissingOrEmptyMessagesOrPromptIs400) {
  EXPECT_EQ(error_of(R"({})", true).second, "messages");
  EXPECT_EQ(error_of(R"({"messages":[]})", true).second, "messages");
  EXPECT_EQ(error_of(R"({"messages":null})", true).second, "messages");
  EXPECT_EQ(error_of(R"({"messages":[{"role":"user"}]})", true).second, "messages[0].content");
  EXPECT_EQ(error_of(R"({})", false).second, "prompt");
  EXPECT_EQ(error_of(R"({"prompt":""})", false).second, "prompt");
  EXPECT_EQ(error_of(R"({"prompt":[]})", false).second, "prompt");
  EXPECT_EQ(error_of(R"({"prompt":["a","b"]})", false).second, "prompt") << "several prompts (n > 1)";
}

TEST(ServerRequest, TokenizeAndDetokenizeBodiesAreChecked) {
  EXPECT_EQ(parse_tokenize_request(R"({"content":"hi","with_pieces":true})").content, "hi");
  EXPECT_THROW(parse_tokenize_request(R"({"content":3})"), ApiError);
  EXPECT_EQ(parse_detokenize_request(R"({"tokens":[1,2]})"), (std::vector<int64_t>{1, 2}));
  EXPECT_THROW(parse_detokenize_request(R"({"tokens":[-1]})"), ApiError);
  EXPECT_THROW(parse_detokenize_request(R"({"tokens":"1"})"), ApiError);
}

TEST(ServerRequest, LogprobsAreTheLogSoftmaxOfTheLogits) {
  const std::vector<float> logits = {1.0f, 3.0f, 2.0f, 3.0f};
  const TokenLogprob lp = token_logprob(logits, 2, 3);
  const double z = std::exp(1.0) + 2 * std::exp(3.0) + std::exp(2.0);
  EXPECT_NEAR(lp.logprob, 2.0 - std::log(z), 1e-12);
  ASSERT_EQ(lp.top.size(), 3u);
  EXPECT_EQ(lp.top[0].first, 1) << "ties to the lower id";
  EXPECT_EQ(lp.top[1].first, 3);
  EXPECT_EQ(lp.top[2].first, 2);
  EXPECT_NEAR(lp.top[0].second, 3.0 - std::log(z), 1e-12);
}

TEST(ServerRequest, MetricsTextHasTheGaugesCountersAndACumulativeHistogram) {
  SchedulerStats st;
  st.running = 2;
  st.waiting = 3;
  st.kv_cells_used = 64;
  st.kv_cells_total = 256;
  st.prompt_tokens = 100;
  st.generated_tokens = 50;
  st.duration_counts[0] = 1;  // <= 0.1 s
  st.duration_counts[3] = 2;  // <= 1 s
  st.duration_counts[std::size(kDurationBuckets)] = 1;  // > 300 s
  st.duration_sum = 400.5;
  const std::string t = prometheus_text(st);
  for (const char* line : {"minfer_requests_running 2\n", "minfer_requests_waiting 3\n", "minfer_kv_cache_usage_ratio 0.25\n",
                           "minfer_prompt_tokens_total 100\n", "minfer_generation_tokens_total 50\n",
                           "# TYPE minfer_request_duration_seconds histogram\n",
                           "minfer_request_duration_seconds_bucket{le=\"0.1\"} 1\n",
                           "minfer_request_duration_seconds_bucket{le=\"0.5\"} 1\n",
                           "minfer_request_duration_seconds_bucket{le=\"1\"} 3\n",
                           "minfer_request_duration_seconds_bucket{le=\"+Inf\"} 4\n",
                           "minfer_request_duration_seconds_count 4\n", "minfer_request_duration_seconds_sum 400.5\n"})
    EXPECT_NE(t.find(line), std::string::npos) << line;
}

#ifdef MINFER_HAS_SERVER
// `serve` starts listening, then loads the model; a load that fails at once stops the listener
// before its thread has entered the accept loop. That stop used to be lost (httplib's stop() does
// nothing before the loop runs) and the join then waited forever. Each start/stop pair must return;
// a hang fails the test after 60 s instead of blocking the run.
TEST(ServerHttp, StopRightAfterStartReturns) {
  std::atomic<int> done{0};
  std::thread worker([&] {
    for (int i = 0; i < 200; ++i) {
      HttpOptions o;
      o.port = 0;
      HttpServer server(o);
      server.start();
      server.stop();
      done = i + 1;
    }
  });
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (done < 200 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  if (done < 200) {
    ADD_FAILURE() << "start/stop pair " << done + 1 << " of 200 did not return within 60 s";
    std::fflush(stdout);
    std::_Exit(1);  // the stuck thread cannot be joined
  }
  worker.join();
}

TEST(ServerHttp, ApiKeyUnknownPathBodyLimitAndLoadingAnswerOpenAiErrors) {
  HttpOptions o;
  o.port = 0;
  o.api_key = "sekrit";
  o.max_body = 1000;
  o.timeout_s = 5;
  HttpServer server(o);
  server.start();
  httplib::Client cli("127.0.0.1", server.port());
  cli.set_connection_timeout(5);
  cli.set_read_timeout(5);
  const auto status_and_code = [](const httplib::Result& r) {
    if (!r) return std::pair<int, int>{-1, -1};
    const json j = json::parse(r->body, nullptr, false);
    const int code = j.is_object() && j.contains("error") ? j["error"]["code"].get<int>() : 0;
    return std::pair<int, int>{r->status, code};
  };
  const std::string body = R"({"prompt":"x"})";
  // 401: no key, a wrong key; /health and /metrics stay open.
  EXPECT_EQ(status_and_code(cli.Post("/v1/completions", body, "application/json")), (std::pair<int, int>{401, 401}));
  EXPECT_EQ(status_and_code(cli.Post("/v1/completions", {{"Authorization", "Bearer wrong"}}, body, "application/json")),
            (std::pair<int, int>{401, 401}));
  EXPECT_EQ(status_and_code(cli.Post("/tokenize", R"({"content":"x"})", "application/json")), (std::pair<int, int>{401, 401}));
  // 503 while loading, for /health and for a request with the right key.
  EXPECT_EQ(status_and_code(cli.Get("/health")), (std::pair<int, int>{503, 503}));
  EXPECT_EQ(status_and_code(cli.Post("/v1/completions", {{"Authorization", "Bearer sekrit"}}, body, "application/json")),
            (std::pair<int, int>{503, 503}));
  const auto metrics = cli.Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_EQ(metrics->status, 200);
  EXPECT_NE(metrics->body.find("minfer_requests_running 0"), std::string::npos);
  // 404: unknown path.
  EXPECT_EQ(status_and_code(cli.Get("/v2/nothing")), (std::pair<int, int>{404, 404}));
  // 413: a body over --max-body.
  EXPECT_EQ(status_and_code(cli.Post("/v1/completions", {{"Authorization", "Bearer sekrit"}}, std::string(5000, ' '),
                                     "application/json")),
            (std::pair<int, int>{413, 413}));
  server.stop();
}
#endif

}  // namespace
}  // namespace minfer::server
