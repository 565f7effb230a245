// End-to-end test of `minfer serve` with the official OpenAI Node client (npm `openai`, pinned by
// package-lock.json). Starts the server on a free loopback port with the demo model, drives it,
// stops it with SIGTERM and checks it exits 0. Every wait is bounded. Prints "N passed, M failed"
// and exits non-zero on any failure.
//
//   node tests/server/e2e.mjs [--bin build/tools/minfer/minfer] [--model models/minfer-demo-py-q6_K.gguf]
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import net from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import OpenAI from 'openai';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const argv = process.argv.slice(2);
const arg = (name, dflt) => {
  const i = argv.indexOf(name);
  return i >= 0 && i + 1 < argv.length ? argv[i + 1] : dflt;
};
const BIN = arg('--bin', process.env.MINFER_BIN || path.join(root, 'build/tools/minfer/minfer'));
const MODEL = arg('--model', path.join(root, 'models/minfer-demo-py-q6_K.gguf'));
const KEY = 'test-key-123';
const PARALLEL = 4;
const CTX = 2048;  // 512 tokens per slot
const SLOT_CTX = CTX / PARALLEL;
const MAX_BODY = 65536;

let passed = 0, failed = 0;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function assert(cond, msg) {
  if (!cond) throw new Error(msg);
}
function assertEq(a, b, msg) {
  const sa = JSON.stringify(a), sb = JSON.stringify(b);
  if (sa !== sb) throw new Error(`${msg}: ${sa.slice(0, 300)} !== ${sb.slice(0, 300)}`);
}
/// Rejects when `p` takes longer than `ms`.
function within(ms, p, what) {
  let t;
  return Promise.race([p, new Promise((_, rej) => { t = setTimeout(() => rej(new Error(`${what}: no answer within ${ms} ms`)), ms); })])
    .finally(() => clearTimeout(t));
}

async function test(name, fn, ms = 300000) {
  const t0 = Date.now();
  try {
    await within(ms, fn(), name);
    passed++;
    console.log(`ok   ${name} (${Date.now() - t0} ms)`);
  } catch (e) {
    failed++;
    console.log(`FAIL ${name}: ${e && e.stack ? e.stack : e}`);
  }
}

/// Starts `minfer serve` on a free port (--port 0; the port is read from its log) and waits for
/// /health 200. Returns {proc, url, log()}.
async function startServer(extra = []) {
  const args = ['serve', '-m', MODEL, '--host', '127.0.0.1', '--port', '0', '-t', '2', ...extra];
  const proc = spawn(BIN, args, { stdio: ['ignore', 'ignore', 'pipe'] });
  let log = '';
  proc.stderr.on('data', (d) => { log += d.toString(); });
  const deadline = Date.now() + 120000;
  let url = null;
  while (!url) {
    if (proc.exitCode !== null) throw new Error(`server exited ${proc.exitCode}: ${log}`);
    if (Date.now() > deadline) throw new Error(`server did not print its port within 120 s: ${log}`);
    const m = log.match(/listening on (http:\/\/127\.0\.0\.1:\d+)/);
    if (m) url = m[1];
    else await sleep(50);
  }
  for (;;) {
    if (Date.now() > deadline) throw new Error(`/health was not 200 within 120 s: ${log}`);
    if (proc.exitCode !== null) throw new Error(`server exited ${proc.exitCode}: ${log}`);
    try {
      const r = await fetch(`${url}/health`, { signal: AbortSignal.timeout(2000) });
      if (r.status === 200) break;
      assert(r.status === 503, `/health while loading answered ${r.status}`);
    } catch (e) {
      if (e.message && e.message.includes('/health')) throw e;
    }
    await sleep(100);
  }
  return { proc, url, log: () => log };
}

/// SIGTERM, then the exit code (bounded).
async function stopServer(s, ms = 60000) {
  if (s.proc.exitCode !== null) return s.proc.exitCode;
  s.proc.kill('SIGTERM');
  const [code] = await within(ms, once(s.proc, 'exit'), 'server exit after SIGTERM');
  return code;
}

async function metric(url, name) {
  const text = await (await fetch(`${url}/metrics`, { signal: AbortSignal.timeout(5000) })).text();
  const m = text.match(new RegExp(`^${name} ([0-9.e+-]+)$`, 'm'));
  assert(m, `/metrics has no ${name}`);
  return Number(m[1]);
}

async function waitMetric(url, name, value, ms = 20000) {
  const deadline = Date.now() + ms;
  let v;
  while (Date.now() < deadline) {
    v = await metric(url, name);
    if (v === value) return;
    await sleep(50);
  }
  throw new Error(`${name} is ${v}, not ${value}, after ${ms} ms`);
}

async function rawPost(url, p, body, headers = {}) {
  const r = await fetch(`${url}${p}`, {
    method: 'POST', body, signal: AbortSignal.timeout(30000),
    headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${KEY}`, ...headers },
  });
  const text = await r.text();
  let json = null;
  try { json = JSON.parse(text); } catch { /* not JSON */ }
  return { status: r.status, json, text };
}

function assertOpenAiError(r, status, what) {
  assertEq(r.status, status, `${what}: status`);
  assert(r.json && r.json.error && typeof r.json.error.message === 'string' && r.json.error.message.length > 0,
         `${what}: body is not {"error": {"message", ...}}: ${r.text}`);
  assert(typeof r.json.error.type === 'string', `${what}: error.type missing`);
  assert('code' in r.json.error, `${what}: error.code missing`);
}

const chatMsgs = (q) => [{ role: 'system', content: 'You write Python.' }, { role: 'user', content: q }];
const QUESTIONS = ['Write a function that adds two numbers.', 'Print hello world.', 'Sort a list.', 'Read a file.',
                   'Define a class Point.', 'Reverse a string.', 'Compute a factorial.', 'Parse JSON text.'];

/// Sends a POST /v1/completions whose headers end with `tail` over a raw socket (node:net) and
/// expects `status` with an OpenAI-style body and the end of the connection within 2 s, before
/// any body is read; the server goes on answering.
async function refusedFromTheHeaders(url, tail, status) {
  const { hostname, port } = new URL(url);
  const sock = net.connect(Number(port), hostname);
  await once(sock, 'connect');
  let data = '';
  sock.on('data', (d) => { data += d.toString(); });
  const ended = once(sock, 'end');
  sock.write(`POST /v1/completions HTTP/1.1\r\nHost: ${hostname}\r\nAuthorization: Bearer ${KEY}\r\n` +
             `Content-Type: application/json\r\n${tail}`);
  try {
    await within(2000, ended, `${status} and the end of the connection`);
  } finally {
    sock.destroy();
  }
  assert(new RegExp(`^HTTP/1\\.1 ${status} `).test(data), `status line: ${data.slice(0, 40)}`);
  const body = data.slice(data.indexOf('\r\n\r\n') + 4);
  assertOpenAiError({ status, json: JSON.parse(body), text: body }, status, `refused from the headers (${status})`);
  assertEq((await fetch(`${url}/health`, { signal: AbortSignal.timeout(5000) })).status, 200, '/health after');
}

async function collectChatStream(client, params, opts = {}) {
  const stream = await client.chat.completions.create({ ...params, stream: true }, opts);
  let text = '', finish = null, usage = null, role = null, chunks = 0;
  const logprobs = [];
  for await (const c of stream) {
    chunks++;
    if (c.usage) usage = c.usage;
    for (const ch of c.choices) {
      if (ch.delta && ch.delta.role) role = ch.delta.role;
      if (ch.delta && ch.delta.content) text += ch.delta.content;
      if (ch.logprobs && ch.logprobs.content) logprobs.push(...ch.logprobs.content);
      if (ch.finish_reason) finish = ch.finish_reason;
    }
  }
  return { text, finish, usage, role, chunks, logprobs };
}

async function collectCompletionStream(client, params) {
  const stream = await client.completions.create({ ...params, stream: true });
  let text = '', finish = null;
  for await (const c of stream) {
    for (const ch of c.choices) {
      text += ch.text || '';
      if (ch.finish_reason) finish = ch.finish_reason;
    }
  }
  return { text, finish };
}

async function main() {
  const s = await startServer(['-np', String(PARALLEL), '-c', String(CTX), '--api-key', KEY, '--max-body', String(MAX_BODY)]);
  const { url } = s;
  const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: KEY, maxRetries: 0, timeout: 60000 });
  const greedy = (q, max = 12) => ({ model: 'demo', messages: chatMsgs(q), temperature: 0, max_tokens: max });

  await test('models_lists_the_loaded_file', async () => {
    const list = await client.models.list();
    assertEq(list.data.map((m) => m.id), ['minfer-demo-py-q6_K.gguf'], 'model ids');
  });

  let reference = null;
  await test('chat_completion_follows_the_openai_schema', async () => {
    const r = await client.chat.completions.create(greedy(QUESTIONS[0]));
    assertEq(r.object, 'chat.completion', 'object');
    assertEq(r.model, 'demo', 'model echoed');
    assert(typeof r.id === 'string' && r.id.length > 0 && Number.isInteger(r.created), 'id / created');
    assertEq(r.choices.length, 1, 'one choice');
    assertEq(r.choices[0].message.role, 'assistant', 'role');
    const text = r.choices[0].message.content;
    assert(typeof text === 'string' && text.length > 0, `content ${JSON.stringify(text)}`);
    assert(['stop', 'length'].includes(r.choices[0].finish_reason), `finish_reason ${r.choices[0].finish_reason}`);
    assert(r.usage.prompt_tokens > 10 && r.usage.completion_tokens > 0 && r.usage.completion_tokens <= 12, 'usage');
    assertEq(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens, 'total_tokens');
    reference = r;
  });

  await test('streamed_chat_text_equals_the_non_streamed_text_at_temperature_0', async () => {
    const st = await collectChatStream(client, { ...greedy(QUESTIONS[0]), stream_options: { include_usage: true } });
    assertEq(st.text, reference.choices[0].message.content, 'streamed text');
    assertEq(st.finish, reference.choices[0].finish_reason, 'finish_reason');
    assertEq(st.role, 'assistant', 'first delta role');
    assert(st.usage, 'include_usage gives a usage chunk');
    assertEq(st.usage.completion_tokens, reference.usage.completion_tokens, 'usage.completion_tokens');
    assertEq(st.usage.prompt_tokens, reference.usage.prompt_tokens, 'usage.prompt_tokens');
  });

  await test('streamed_completion_text_equals_the_non_streamed_text_at_temperature_0', async () => {
    const p = { model: 'demo', prompt: 'def fibonacci(n):\n', temperature: 0, max_tokens: 16 };
    const r = await client.completions.create(p);
    assertEq(r.object, 'text_completion', 'object');
    assert(r.choices[0].text.length > 0, 'text');
    assertEq(r.choices[0].finish_reason, 'length', 'finish_reason (16 tokens of code)');
    assertEq(r.usage.completion_tokens, 16, 'completion_tokens');
    const st = await collectCompletionStream(client, p);
    assertEq(st.text, r.choices[0].text, 'streamed text');
    assertEq(st.finish, 'length', 'streamed finish_reason');
    // A prompt of token ids gives the same as its text.
    const ids = (await rawPost(url, '/tokenize', JSON.stringify({ content: p.prompt }))).json.tokens;
    const byIds = await client.completions.create({ ...p, prompt: ids });
    assertEq(byIds.choices[0].text, r.choices[0].text, 'token-id prompt');
    const detok = await rawPost(url, '/detokenize', JSON.stringify({ tokens: ids }));
    assertEq(detok.json.content, p.prompt, '/detokenize of /tokenize');
  });

  await test('stop_string_cuts_the_text_before_it', async () => {
    const p = { model: 'demo', prompt: 'def fibonacci(n):\n', temperature: 0, max_tokens: 16 };
    const full = (await client.completions.create(p)).choices[0].text;
    const stop = full.slice(8, 11);
    assert(stop.length === 3, `the reference text is too short: ${JSON.stringify(full)}`);
    const want = full.slice(0, full.indexOf(stop));
    const r = await client.completions.create({ ...p, stop: [stop, 'never-appears-xyz'] });
    assertEq(r.choices[0].text, want, 'text before the stop string');
    assertEq(r.choices[0].finish_reason, 'stop', 'finish_reason');
    const st = await collectCompletionStream(client, { ...p, stop });
    assertEq(st.text, want, 'streamed text before the stop string');
    assertEq(st.finish, 'stop', 'streamed finish_reason');
  });

  await test('same_seed_gives_the_same_sampled_text', async () => {
    const p = { model: 'demo', messages: chatMsgs(QUESTIONS[1]), temperature: 1.0, top_p: 1, seed: 1234, max_tokens: 12 };
    const a = await client.chat.completions.create(p);
    const b = await client.chat.completions.create(p);
    assertEq(a.choices[0].message.content, b.choices[0].message.content, 'seeded samples');
  });

  await test('logprobs_are_reported_for_chat_and_completions', async () => {
    const r = await client.chat.completions.create({ ...greedy(QUESTIONS[2], 8), logprobs: true, top_logprobs: 3 });
    const lp = r.choices[0].logprobs.content;
    assertEq(lp.length, r.usage.completion_tokens - (r.choices[0].finish_reason === 'stop' ? 1 : 0), 'one entry per token');
    for (const e of lp) {
      assert(e.logprob <= 0 && Number.isFinite(e.logprob), `logprob ${e.logprob}`);
      assertEq(e.top_logprobs.length, 3, 'top_logprobs length');
      assert(e.top_logprobs[0].logprob >= e.top_logprobs[1].logprob && e.top_logprobs[1].logprob >= e.top_logprobs[2].logprob,
             'top_logprobs sorted');
      assertEq(e.top_logprobs[0].logprob, e.logprob, 'greedy token is the top one');
      assert(Array.isArray(e.bytes), 'bytes');
    }
    const st = await collectChatStream(client, { ...greedy(QUESTIONS[2], 8), logprobs: true, top_logprobs: 3 });
    assertEq(st.logprobs.map((e) => e.logprob), lp.map((e) => e.logprob), 'streamed logprobs');
    const c = await client.completions.create({ model: 'demo', prompt: 'import os\n', temperature: 0, max_tokens: 6, logprobs: 2 });
    const l = c.choices[0].logprobs;
    assertEq(l.tokens.length, 6, 'completion logprobs tokens');
    assertEq(l.token_logprobs.length, 6, 'token_logprobs');
    assertEq(Object.keys(l.top_logprobs[0]).length <= 2, true, 'top_logprobs per token');
    assertEq(l.text_offset[0], 0, 'text_offset');
  });

  await test('eight_concurrent_greedy_requests_equal_the_same_requests_run_one_at_a_time', async () => {
    const one = [];
    for (const q of QUESTIONS) one.push((await client.chat.completions.create(greedy(q, 12))).choices[0].message.content);
    const together = await Promise.all(QUESTIONS.map((q) => client.chat.completions.create(greedy(q, 12))));
    assertEq(together.map((r) => r.choices[0].message.content), one, 'concurrent texts');
    // Streams too, mixed with non-streamed requests.
    const mixed = await Promise.all(QUESTIONS.map((q, i) => (i % 2
      ? collectChatStream(client, greedy(q, 12)).then((x) => x.text)
      : client.chat.completions.create(greedy(q, 12)).then((r) => r.choices[0].message.content))));
    assertEq(mixed, one, 'mixed streamed and non-streamed texts');
  });

  await test('client_that_disconnects_mid_stream_frees_its_slot', async () => {
    const controllers = [];
    const runs = [];
    for (let i = 0; i < 3; i++) {
      const ac = new AbortController();
      controllers.push(ac);
      runs.push((async () => {
        const stream = await client.chat.completions.create({ ...greedy(QUESTIONS[i], 400), stream: true }, { signal: ac.signal });
        let n = 0;
        try {
          for await (const c of stream) { // eslint-disable-line no-unused-vars
            if (++n === 3) ac.abort();
          }
        } catch (e) {
          if (!ac.signal.aborted) throw e;
        }
        return n;
      })());
    }
    const counts = await Promise.all(runs);
    for (const n of counts) assert(n >= 3 && n < 100, `chunks before the abort: ${n}`);
    await waitMetric(url, 'minfer_requests_running', 0, 20000);
    // And the server still answers the same as before.
    const r = await client.chat.completions.create(greedy(QUESTIONS[0]));
    assertEq(r.choices[0].message.content, reference.choices[0].message.content, 'after the disconnects');
  });

  await test('non_streaming_client_that_disconnects_frees_its_slot', async () => {
    const maxTokens = SLOT_CTX - 32;
    const gen0 = await metric(url, 'minfer_generation_tokens_total');
    const ac = new AbortController();
    const run = client.completions.create({ model: 'demo', prompt: 'def main():\n', temperature: 0, max_tokens: maxTokens },
                                          { signal: ac.signal })
      .then(() => 'finished', (e) => (ac.signal.aborted ? 'aborted' : Promise.reject(e)));
    // Abort once it generates.
    const deadline = Date.now() + 30000;
    while ((await metric(url, 'minfer_generation_tokens_total')) < gen0 + 3) {
      assert(Date.now() < deadline, 'the request did not start generating within 30 s');
      await sleep(10);
    }
    ac.abort();
    assertEq(await run, 'aborted', 'the client side');
    await waitMetric(url, 'minfer_requests_running', 0, 2000);
    const generated = (await metric(url, 'minfer_generation_tokens_total')) - gen0;
    assert(generated < maxTokens, `the abandoned request ran to the end (${generated} tokens)`);
  });

  await test('content_length_over_max_body_is_refused_from_the_headers', async () => {
    // Headers only: the body never comes.
    await refusedFromTheHeaders(url, 'Content-Length: 10000000000\r\n\r\n', 413);
  });

  await test('chunked_request_body_is_refused_411_without_being_read', async () => {
    // A chunked body has no length to check against --max-body up front: it is refused from
    // the headers (httplib would read it whole).
    await refusedFromTheHeaders(url, `Transfer-Encoding: chunked\r\n\r\n${(MAX_BODY * 4).toString(16)}\r\n`, 411);
  });

  await test('sixty_four_concurrent_streaming_clients_all_finish', async () => {
    const runs = [];
    for (let i = 0; i < 64; i++)
      runs.push(collectChatStream(client, greedy(QUESTIONS[i % 8] + ` (${i})`, 4)));
    const res = await Promise.all(runs);
    for (const r of res) {
      assert(['stop', 'length'].includes(r.finish), `finish ${r.finish}`);
      assert(r.chunks >= 2, 'chunks');
    }
  }, 600000);

  await test('every_error_class_answers_openai_style_json', async () => {
    const chatBody = (extra) => JSON.stringify({ messages: chatMsgs('x'), max_tokens: 2, ...extra });
    assertOpenAiError(await rawPost(url, '/v1/chat/completions', '{"messages": ['), 400, 'malformed JSON');
    assertOpenAiError(await rawPost(url, '/v1/chat/completions', chatBody({ temperature: 'hot' })), 400, 'wrong type');
    assertOpenAiError(await rawPost(url, '/v1/chat/completions', chatBody({ top_p: 7 })), 400, 'out of range');
    assertOpenAiError(await rawPost(url, '/v1/chat/completions', chatBody({ n: 2 })), 400, 'n = 2');
    assertOpenAiError(await rawPost(url, '/v1/chat/completions', JSON.stringify({ messages: [] })), 400, 'empty messages');
    assertOpenAiError(await rawPost(url, '/v1/completions', JSON.stringify({})), 400, 'missing prompt');
    const long = await rawPost(url, '/v1/completions', JSON.stringify({ prompt: new Array(SLOT_CTX).fill(100) }));
    assertOpenAiError(long, 400, 'prompt longer than a slot');
    assert(long.json.error.message.includes(String(SLOT_CTX)), `message names the limit: ${long.json.error.message}`);
    assertOpenAiError(await rawPost(url, '/v1/completions', JSON.stringify({ prompt: [1, 999999999] })), 400, 'token id out of vocabulary');
    assertOpenAiError(await rawPost(url, '/v1/completions', JSON.stringify({ prompt: 'x' }), { Authorization: '' }), 401, 'missing key');
    assertOpenAiError(await rawPost(url, '/v1/completions', JSON.stringify({ prompt: 'x' }), { Authorization: 'Bearer nope' }), 401, 'wrong key');
    const health = await fetch(`${url}/health`);
    assertEq(health.status, 200, '/health needs no key');
    assertOpenAiError(await rawPost(url, '/v1/nothing', '{}'), 404, 'unknown path');
    const wrongVerb = await fetch(`${url}/v1/chat/completions`, { signal: AbortSignal.timeout(5000) });
    assertEq(wrongVerb.status, 405, 'GET on a POST route');
    assertEq(wrongVerb.headers.get('allow'), 'POST', 'GET on a POST route: Allow header');
    assertOpenAiError({ status: 405, json: await wrongVerb.json(), text: '' }, 405, 'GET on a POST route');
    const postOnGet = await rawPost(url, '/health', '{}');
    assertOpenAiError(postOnGet, 405, 'POST on a GET route');
    assertOpenAiError(await rawPost(url, '/v1/completions', JSON.stringify({ prompt: 'x'.repeat(MAX_BODY) })), 413, 'body over --max-body');
    // Through the client: its typed errors carry the status.
    let status = 0;
    try {
      await client.chat.completions.create({ model: 'demo', messages: [], max_tokens: 2 });
    } catch (e) {
      status = e.status;
    }
    assertEq(status, 400, 'client error status');
    const bad = new OpenAI({ baseURL: `${url}/v1`, apiKey: 'wrong', maxRetries: 0, timeout: 10000 });
    status = 0;
    try { await bad.models.list(); } catch (e) { status = e.status; }
    assertEq(status, 401, 'client 401');
  });

  await test('metrics_report_the_load_and_running_returns_to_zero', async () => {
    await waitMetric(url, 'minfer_requests_running', 0, 20000);
    assertEq(await metric(url, 'minfer_requests_waiting'), 0, 'waiting');
    assert(await metric(url, 'minfer_generation_tokens_total') > 100, 'generated tokens counted');
    assert(await metric(url, 'minfer_prompt_tokens_total') > 100, 'prompt tokens counted');
    const ratio = await metric(url, 'minfer_kv_cache_usage_ratio');
    assert(ratio > 0 && ratio <= 1, `kv ratio ${ratio}`);
    const text = await (await fetch(`${url}/metrics`)).text();
    assert(/minfer_request_duration_seconds_count [1-9]\d*/.test(text), 'duration histogram count');
  });

  await test('sigterm_lets_a_running_stream_finish_and_exits_0', async () => {
    // SIGTERM once the stream's first chunk has arrived: the request is running then, however fast
    // the model is (polling /metrics for it could miss a short request altogether).
    const stream = await client.chat.completions.create({ ...greedy(QUESTIONS[3], 64), stream: true });
    const it = stream[Symbol.asyncIterator]();
    let r = await within(60000, it.next(), 'first chunk');
    s.proc.kill('SIGTERM');
    let finish = null;
    for (; !r.done; r = await it.next())
      for (const ch of r.value.choices) if (ch.finish_reason) finish = ch.finish_reason;
    assert(['stop', 'length'].includes(finish), `the stream finished (${finish})`);
    const [code] = await within(60000, once(s.proc, 'exit'), 'exit after SIGTERM');
    assertEq(code, 0, 'exit code');
  });
  if (s.proc.exitCode === null) await stopServer(s);

  // A second server with one slot and a queue of one: the third concurrent request gets 503.
  await test('full_queue_answers_503', async () => {
    const q = await startServer(['-np', '1', '-c', '512', '--max-queue', '1']);
    try {
      const c = new OpenAI({ baseURL: `${q.url}/v1`, apiKey: 'none', maxRetries: 0, timeout: 60000 });
      // Two streams hold the slot and the queue place; they are abandoned after the check.
      const acs = [new AbortController(), new AbortController()];
      const hold = (ac) => (async () => {
        try {
          const st = await c.completions.create({ model: 'demo', prompt: 'def main():\n', temperature: 0, max_tokens: 400, stream: true },
                                                { signal: ac.signal });
          for await (const x of st) { } // eslint-disable-line no-unused-vars, no-empty
        } catch (e) {
          if (!ac.signal.aborted) throw e;
        }
      })();
      const first = hold(acs[0]);
      await waitMetric(q.url, 'minfer_requests_running', 1, 60000);
      const second = hold(acs[1]);
      await waitMetric(q.url, 'minfer_requests_waiting', 1, 60000);
      const third = await rawPost(q.url, '/v1/completions', JSON.stringify({ prompt: 'x', max_tokens: 2 }));
      assertOpenAiError(third, 503, 'third request');
      acs.forEach((ac) => ac.abort());
      await Promise.all([first, second]);
      await waitMetric(q.url, 'minfer_requests_running', 0, 60000);
    } finally {
      assertEq(await stopServer(q), 0, 'second server exit code');
    }
  });

  // Prompt lookup (--lookup 3) and a draft model (-md, here the model itself, drafting at every
  // position): the same requests on a server without them and on one with each give the same
  // texts, greedy, seeded and with a stop string, and the speculating servers drafted tokens.
  await test('prompt_lookup_and_draft_model_servers_give_the_texts_of_plain_decoding', async () => {
    const plain = await startServer(['-np', '2', '-c', '1024']);
    const spec = await startServer(['-np', '2', '-c', '1024', '--lookup', '3']);
    const drafting = await startServer(['-np', '2', '-c', '1024', '-md', MODEL, '--spec-draft-p-min', '0',
      '--spec-draft-n-max', '6']);
    try {
      const repeat = 'def area(w, h):\n    return w * h\n\n\ndef area(w, h):\n';
      const reqs = [
        { model: 'demo', prompt: repeat, temperature: 0, max_tokens: 48 },
        { model: 'demo', prompt: repeat, temperature: 0.8, top_p: 1, seed: 7, max_tokens: 32 },
        { model: 'demo', prompt: 'import os\nimport sys\nimport os\n', temperature: 0, max_tokens: 24 },
      ];
      const texts = async (srv) => {
        const c = new OpenAI({ baseURL: `${srv.url}/v1`, apiKey: 'none', maxRetries: 0, timeout: 60000 });
        const out = [];
        for (const r of reqs) out.push((await c.completions.create(r)).choices[0].text);
        out.push((await c.chat.completions.create(greedy(QUESTIONS[3], 24))).choices[0].message.content);
        const all = await Promise.all(reqs.map((r) => collectCompletionStream(c, r).then((x) => x.text)));
        out.push(...all);
        return { c, out };
      };
      const a = await texts(plain), b = await texts(spec), d = await texts(drafting);
      assertEq(b.out, a.out, 'texts with prompt lookup');
      assertEq(d.out, a.out, 'texts with a draft model');
      // llama-server's per-request fields: fewer drafts, or none, for one request; same text.
      for (const n of [0, 2]) {
        const r = await d.c.completions.create({ ...reqs[0], 'speculative.n_max': n, 'speculative.p_min': 0.1 });
        assertEq(r.choices[0].text, a.out[0], `text with speculative.n_max ${n}`);
      }
      const badSpec = await fetch(`${drafting.url}/v1/completions`, {
        method: 'POST', headers: { 'Content-Type': 'application/json' },
        body: JSON.stringify({ ...reqs[0], 'speculative.p_min': 2 }),
      });
      assertEq(badSpec.status, 400, 'speculative.p_min out of range');
      assertEq((await badSpec.json()).error.param, 'speculative.p_min', 'the field named');
      assert(await metric(drafting.url, 'minfer_draft_tokens_total') > 0, 'the draft-model server drafted tokens');
      assert(await metric(drafting.url, 'minfer_draft_accepted_tokens_total') > 0, 'and kept some');
      const full = a.out[0];
      const stop = full.slice(10, 14);
      assert(stop.length === 4, `the reference text is too short: ${JSON.stringify(full)}`);
      const r = await b.c.completions.create({ ...reqs[0], stop });
      assertEq(r.choices[0].text, full.slice(0, full.indexOf(stop)), 'text before the stop string');
      assertEq(r.choices[0].finish_reason, 'stop', 'finish_reason');
      assert(await metric(spec.url, 'minfer_draft_tokens_total') > 0, 'the lookup server drafted tokens');
      assert(await metric(spec.url, 'minfer_draft_accepted_tokens_total') > 0, 'and kept some');
      assertEq(await metric(plain.url, 'minfer_draft_tokens_total'), 0, 'the plain server drafted none');
    } finally {
      assertEq(await stopServer(plain), 0, 'plain server exit code');
      assertEq(await stopServer(spec), 0, 'lookup server exit code');
      assertEq(await stopServer(drafting), 0, 'draft-model server exit code');
    }
  });
}

try {
  await main();
} catch (e) {
  failed++;
  console.log(`FAIL setup: ${e && e.stack ? e.stack : e}`);
}
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed === 0 ? 0 : 1);
