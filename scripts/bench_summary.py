#!/usr/bin/env python3
"""Prints one line per test from `minfer bench -o jsonl` or `llama-bench -o jsonl` output files:
model file, test, mean t/s +- sample stddev, and the per-repetition samples."""
import json
import sys


def test_name(j):
    if "test" in j:
        return j["test"]
    p, n = j.get("n_prompt", 0), j.get("n_gen", 0)
    name = f"pp{p}" if n == 0 else (f"tg{n}" if p == 0 else f"pp{p}+tg{n}")
    if j.get("n_depth", 0):
        name += f" @ d{j['n_depth']}"
    return name


for path in sys.argv[1:]:
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line.startswith("{"):
                continue
            j = json.loads(line)
            model = j.get("model_filename", "?").split("/")[-1]
            samples = [round(x, 1) for x in j.get("samples_ts", [])]
            print(f"{path.split('/')[-1]:<14} {model:<34} {test_name(j):>14} "
                  f"{j['avg_ts']:11.1f} +- {j['stddev_ts']:7.1f}  {samples}")
