#!/usr/bin/env python3
"""Where a streamed run's device time went, from `fbc bench --memory-budget B --json`
(h200.sh part stream with STREAM_JSON=1 writes stream_BUDGET.json).

Prints the split `fbc bench` computes (streaming.overlap), the idle gaps longer than 0.1 ms
(what ran before each and what started it), the gaps of the transfer queue, and the launches'
time with no transfer under way, by kernel, largest first.

    python3 tests/bench/stream_timeline.py stream_1235814400.json [RUN]
"""
import json
import sys


def main(path, run=0):
    r = json.load(open(path))["runs"][run]
    st = r["streaming"]
    ks = [(k["start_ns"], k["start_ns"] + k["last_ns"], k["kernel"]) for k in r["kernels"]]
    ts = sorted((a, a + n) for a, n in st["transfers"])
    o = st["overlap"]
    ms = lambda ns: ns / 1e6
    print(f"{r['strategy']}: {ms(o['wall_ns']):.3f} ms = {ms(o['transfer_ns']):.3f} with a transfer"
          f" + {ms(o['alone_ns']):.3f} launches alone + {ms(o['idle_ns']):.3f} idle;"
          f" {len(ks)} launches, {len(ts)} transfers")
    events = sorted([(s, e, "launch " + n) for s, e, n in ks] + [(s, e, "transfer") for s, e in ts])
    end, before = events[0][0], "start"
    for s, e, what in events:
        if s > end + 100_000:
            print(f"idle {ms(s - end):.3f} ms at {ms(end):.3f} ms, after {before}, before {what}")
        if e > end:
            end, before = e, what
    for (_, b0), (a1, _) in zip(ts, ts[1:]):
        if a1 - b0 > 100_000:
            print(f"transfer queue empty {ms(a1 - b0):.3f} ms at {ms(b0):.3f} ms")
    alone = {}
    for s, e, n in ks:
        covered = sum(max(0, min(b, e) - max(a, s)) for a, b in ts)
        if e - s > covered:
            alone[n] = alone.get(n, 0) + (e - s - covered)
    for n, t in sorted(alone.items(), key=lambda x: -x[1])[:25]:
        print(f"alone {ms(t):.3f} ms {n}")
    if ts:
        print(f"transfers from {ms(ts[0][0]):.3f} to {ms(max(b for _, b in ts)):.3f} ms;"
              f" launches end at {ms(max(e for _, e, _ in ks)):.3f} ms")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 0)
