#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""weft against Go's goroutines or tokio's tasks, on the same machine, in the same run.

Builds the other side's program from Debian's packages only, nothing
downloaded: go/vs_go.go with the standard library (golang-go), or the cargo
package in tokio/ against Debian's packaged crates (cargo, librust-tokio-dev),
offline. Then runs it and weft's fanout, spawn and chan_pingpong benches
three times each, alternating, keeping each figure's best run: the machine
has slow and fast phases, and alternating gives both sides the same ones.
Prints one JSON line per pair: weft's figure as "value", the other's as
"ref_value", "ratio" = weft / other, and "better" says which way is better
for weft ("higher" for a speedup, "lower" for a time). Exits 77 (skipped)
when Debian's tokio crate is not installed.

usage: vs_others.py go GO DIR BENCH_FANOUT BENCH_SPAWN BENCH_CHAN_PINGPONG [--quick]
       vs_others.py tokio CARGO DIR BENCH_FANOUT BENCH_SPAWN BENCH_CHAN_PINGPONG [--quick]
(DIR: tests/bench/go or tests/bench/tokio)
"""
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile

DEBIAN_CRATES = "/usr/share/cargo/registry"

# weft's bench line, the other side's (after its "go_" or "tokio_"), the
# metric, which way is better
PAIRS = [
    ("fanout_balanced", "fanout_balanced", "speedup", "higher"),
    ("fanout_skewed", "fanout_skewed", "speedup", "higher"),
    ("spawn", "spawn", "ns_per_coro", "lower"),
    ("spawn_2shards", "spawn_2threads", "ns_per_coro", "lower"),
    ("chan_pingpong_local", "chan_pingpong_local", "rtt_ns", "lower"),
    ("chan_pingpong", "chan_pingpong", "rtt_ns", "lower"),
]
SIDES = ("go", "tokio")


def build_go(go, src, tmp):
    env = dict(os.environ, GOCACHE=os.path.join(tmp, "cache"), GOPATH=os.path.join(tmp, "path"),
               GO111MODULE="off", GOFLAGS="", CGO_ENABLED="0")
    binary = os.path.join(tmp, "vs_go")
    subprocess.run([go, "build", "-o", binary, os.path.join(src, "vs_go.go")], check=True, env=env)
    version = subprocess.run([go, "version"], check=True, stdout=subprocess.PIPE, text=True)
    return binary, version.stdout.split()[2], "-quick"


def build_tokio(cargo, src, tmp):
    tokio = sorted(glob.glob(os.path.join(DEBIAN_CRATES, "tokio-1.*")))
    if not tokio:
        print("vs_others: Debian's tokio crate (librust-tokio-dev) is not installed: skipped",
              file=sys.stderr)
        sys.exit(77)
    pkg = os.path.join(tmp, "pkg")
    shutil.copytree(src, pkg)
    os.makedirs(os.path.join(pkg, ".cargo"))
    with open(os.path.join(pkg, ".cargo", "config.toml"), "w") as f:
        f.write('[source.crates-io]\nreplace-with = "debian"\n'
                '[source.debian]\ndirectory = "%s"\n[net]\noffline = true\n' % DEBIAN_CRATES)
    env = dict(os.environ, CARGO_HOME=os.path.join(tmp, "cargo-home"),
               CARGO_TARGET_DIR=os.path.join(tmp, "target"))
    subprocess.run([cargo, "build", "--release", "--offline", "--quiet"], check=True, env=env,
                   cwd=pkg)
    return (os.path.join(tmp, "target", "release", "vs_tokio"), os.path.basename(tokio[-1]),
            "--quick")


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
    if len(argv) < 7 or argv[1] not in SIDES:
        print(__doc__, file=sys.stderr)
        return 2
    side, tool, src, fanout, spawn, chan = argv[1:7]
    quick = "--quick" in argv[7:]
    pairs = [(w, side + "_" + o, m, way) for w, o, m, way in PAIRS]
    better = {}
    for weft_name, other_name, _, way in pairs:
        better[weft_name] = better[other_name] = way
    with tempfile.TemporaryDirectory(prefix="weft-vs-%s-" % side) as tmp:
        build = build_go if side == "go" else build_tokio
        binary, version, quick_flag = build(tool, src, tmp)
        best = {}
        for _ in range(3):
            keep_best(best, run([binary] + ([quick_flag] if quick else [])), better)
            for bench in (fanout, spawn, chan):
                keep_best(best, run([bench] + (["--quick"] if quick else [])), better)
    status = 0
    for weft_name, other_name, metric, way in pairs:
        w, o = best[weft_name], best[other_name]
        print(json.dumps({"bench": "vs_%s_%s" % (side, weft_name), "metric": metric,
                          "value": w["value"], "ref": other_name, "ref_value": o["value"],
                          "ratio": round(w["value"] / o["value"], 3), "better": way,
                          side: version}))
        if "checksum" in w and w["checksum"] != o["checksum"]:
            print("vs_others: %s: checksum %s, %s's %s" % (weft_name, w["checksum"], side,
                                                          o["checksum"]), file=sys.stderr)
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv))
