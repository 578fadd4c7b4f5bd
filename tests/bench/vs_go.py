#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""weft against Go's goroutines on the same machine, in the same run.

Builds go/vs_go.go (the standard library only: nothing is downloaded) and
runs it and weft's fanout, spawn and chan_pingpong benches three times
each, alternating, keeping each figure's best run: the machine has slow and fast
phases, and alternating gives both sides the same ones. Prints one JSON line
per pair: weft's figure as "value", Go's as "ref_value", "ratio" = weft / Go,
and "better" says which way is better for weft ("higher" for a speedup,
"lower" for a time).

usage: vs_go.py GO VS_GO_SOURCE BENCH_FANOUT BENCH_SPAWN BENCH_CHAN_PINGPONG [--quick]
"""
import json
import os
import subprocess
import sys
import tempfile

# weft's bench line -> (Go's line, metric field, which way is better)
PAIRS = [
    ("fanout_balanced", "go_fanout_balanced", "speedup", "higher"),
    ("fanout_skewed", "go_fanout_skewed", "speedup", "higher"),
    ("spawn", "go_spawn", "ns_per_coro", "lower"),
    ("spawn_2shards", "go_spawn_2procs", "ns_per_coro", "lower"),
    ("chan_pingpong_local", "go_chan_pingpong_local", "rtt_ns", "lower"),
    ("chan_pingpong", "go_chan_pingpong", "rtt_ns", "lower"),
]


def run(cmd):
    """The JSON lines a bench printed, by name."""
    out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True).stdout
    lines = {}
    for text in out.splitlines():
        if text.startswith("{"):
            line = json.loads(text)
            lines[line["bench"]] = line
    return lines


def keep_best(best, lines, better):
    for name, line in lines.items():
        old = best.get(name)
        if old is None or (line["value"] > old["value"]) == (better.get(name) == "higher"):
            best[name] = line


def main(argv):
    if len(argv) < 6:
        print(__doc__, file=sys.stderr)
        return 2
    go, source, fanout, spawn, chan = argv[1:6]
    quick = ["--quick"] if "--quick" in argv[6:] else []
    better = {}
    for weft_name, go_name, _, way in PAIRS:
        better[weft_name] = better[go_name] = way
    with tempfile.TemporaryDirectory(prefix="weft-vs-go-") as tmp:
        env = dict(os.environ, GOCACHE=os.path.join(tmp, "cache"), GOPATH=os.path.join(tmp, "path"),
                   GO111MODULE="off", GOFLAGS="", CGO_ENABLED="0")
        binary = os.path.join(tmp, "vs_go")
        subprocess.run([go, "build", "-o", binary, source], check=True, env=env)
        best = {}
        for _ in range(3):
            keep_best(best, run([binary] + (["-quick"] if quick else [])), better)
            for bench in (fanout, spawn, chan):
                keep_best(best, run([bench] + quick), better)
    status = 0
    for weft_name, go_name, metric, way in PAIRS:
        w, g = best[weft_name], best[go_name]
        print(json.dumps({"bench": "vs_go_" + weft_name, "metric": metric, "value": w["value"],
                          "ref": go_name, "ref_value": g["value"],
                          "ratio": round(w["value"] / g["value"], 3), "better": way,
                          "go": best["go_fanout_balanced"]["go"]}))
        if "checksum" in w and w["checksum"] != g["checksum"]:
            print("vs_go: %s: checksum %s, Go's %s" % (weft_name, w["checksum"], g["checksum"]),
                  file=sys.stderr)
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv))
