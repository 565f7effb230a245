#!/usr/bin/env python3
"""Loopback load generator for OpenAI-compatible servers (`minfer serve`, llama-server).

Python 3 standard library only. Runs CONCURRENCY clients, each sending streaming
/v1/completions requests (a prompt of about PROMPT_TOKENS tokens, MAX_TOKENS generated, greedy,
no stop) until REQUESTS requests are done; reports total generated tokens/s over the wall time
the median / p90 time to first token, and the median over requests of each stream's decode rate
(tokens after the first over the time from the first text chunk to the last). A request that ends before MAX_TOKENS or without [DONE] is counted as "short"
(its level is not comparable). Tokens are counted from the usage chunk
(stream_options.include_usage) when the server sends it, else one per content chunk.

    python3 bench/serve_load.py --url http://127.0.0.1:8080 -c 1,4,8 --prompt-tokens 256 --max-tokens 128
"""
import argparse
import http.client
import json
import statistics
import sys
import threading
import time
import urllib.parse


def one_request(url, prompt, max_tokens, api_key, timeout):
    u = urllib.parse.urlparse(url)
    conn = http.client.HTTPConnection(u.hostname, u.port or 80, timeout=timeout)
    body = json.dumps({"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": True,
                       "stream_options": {"include_usage": True}, "ignore_eos": True})
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = "Bearer " + api_key
    t0 = time.monotonic()
    conn.request("POST", "/v1/completions", body, headers)
    resp = conn.getresponse()
    if resp.status != 200:
        raise RuntimeError(f"HTTP {resp.status}: {resp.read()[:200]!r}")
    ttft = None
    t_last = None
    chunks = 0
    usage = None
    done = False
    finish = None
    last = ""
    for raw in resp:
        line = raw.decode("utf-8", "replace").strip()
        if line:
            last = line
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            done = True
            break
        ev = json.loads(data)
        if ev.get("usage"):
            usage = ev["usage"]
        for ch in ev.get("choices", []):
            if ch.get("finish_reason"):
                finish = ch["finish_reason"]
            if ch.get("text"):
                chunks += 1
                t_last = time.monotonic() - t0
                if ttft is None:
                    ttft = t_last
    conn.close()
    tokens = usage["completion_tokens"] if usage else chunks
    # A stream that ended without [DONE], or stopped before max_tokens (an end-of-generation
    # token the server did not ignore), makes the level's numbers incomparable: counted apart.
    short = not done or finish != "length" or tokens < max_tokens
    why = (f"done={done} finish={finish} tokens={tokens} chunks={chunks} "
           f"last line: {last[:300]!r}") if short else None
    # The stream's decode rate: tokens after the first over the time from the first text chunk to
    # the last (what `minfer bench` tg measures, without the prefill and the request's overheads).
    decode = (tokens - 1) / (t_last - ttft) if ttft is not None and t_last > ttft and tokens > 1 else None
    return ttft if ttft is not None else time.monotonic() - t0, tokens, why, decode


def run(url, concurrency, requests, prompt, max_tokens, api_key, timeout):
    """prompt(i): the prompt of request i."""
    lock = threading.Lock()
    ttfts, tokens, errors, short, shorts, decodes = [], [0], [], [0], [], []
    left = [requests]

    def worker():
        while True:
            with lock:
                if left[0] == 0:
                    return
                left[0] -= 1
                i = left[0]
            try:
                t, n, why, decode = one_request(url, prompt(i), max_tokens, api_key, timeout)
                with lock:
                    ttfts.append(t)
                    if decode is not None:
                        decodes.append(decode)
                    tokens[0] += n
                    if why is not None:
                        short[0] += 1
                        shorts.append(why)
            except Exception as e:  # reported, not fatal: the summary says how many failed
                with lock:
                    errors.append(f"{type(e).__name__}: {e}")

    t0 = time.monotonic()
    threads = [threading.Thread(target=worker) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.monotonic() - t0
    ttfts.sort()
    return {
        "concurrency": concurrency, "requests": len(ttfts), "errors": len(errors), "short": short[0],
        "generated_tokens": tokens[0], "wall_s": round(wall, 3),
        "gen_tps": round(tokens[0] / wall, 2) if wall > 0 else 0.0,
        "ttft_median_s": round(statistics.median(ttfts), 4) if ttfts else None,
        "ttft_p90_s": round(ttfts[min(len(ttfts) - 1, int(0.9 * len(ttfts)))], 4) if ttfts else None,
        "decode_tps_median": round(statistics.median(decodes), 2) if decodes else None,
        "first_error": errors[0] if errors else None,
        "first_short": shorts[0] if shorts else None,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", default="http://127.0.0.1:8080")
    ap.add_argument("-c", "--concurrency", default="1,4,8", help="comma list")
    ap.add_argument("-n", "--requests", type=int, default=0, help="requests per level (default: 2 x concurrency)")
    ap.add_argument("--prompt-tokens", type=int, default=256, help="approximate prompt length")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--api-key", default="")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per request")
    ap.add_argument("--json", action="store_true", help="one JSON object per line")
    a = ap.parse_args()
    # " x" is one token in BPE vocabularies of the Qwen/Llama kind; a distinct number first per
    # level and request keeps prefix caches from turning the test into a decode-only one.
    for c in [int(x) for x in a.concurrency.split(",")]:
        def prompt(i, c=c):
            return f"{c}-{i}:" + " x" * max(1, a.prompt_tokens - 4)
        r = run(a.url, c, a.requests or 2 * c, prompt, a.max_tokens, a.api_key, a.timeout)
        if a.json:
            print(json.dumps(r))
        else:
            print(f"concurrency {c:3d}: {r['requests']} ok ({r['short']} short), {r['errors']} failed, "
                  f"{r['generated_tokens']} tokens in "
                  f"{r['wall_s']} s = {r['gen_tps']} t/s, TTFT median {r['ttft_median_s']} s, p90 {r['ttft_p90_s']} s, "
                  f"stream decode median {r['decode_tps_median']} t/s")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
