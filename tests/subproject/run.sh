#!/bin/bash
# SPDX-License-Identifier: MIT
#
# Builds tests/subproject/consumer the way a project that vendors weft does:
# a copy of it in a temporary directory, with subprojects/weft a symlink to
# this weft tree. Twice: weft as a shared library, then as a static one
# (-Dweft:default_library=static, which needs the Boost.Context fcontext
# objects to resolve from the archive). Each time it checks that
#   - the consumer builds with -Dwerror=true and prints OK;
#   - weft's tests, examples and benchmarks are off (no test listed, no
#     weft target but its libraries);
#   - the consumer's compile flags reach include/ and none of weft's
#     internal headers;
#   - the binary links libweft.so (shared) or carries weft itself (static).
#
# Usage: run.sh WEFT_SOURCE_ROOT CONSUMER_DIR (tests/subproject/meson.build).
# Exit status: 0 pass, 1 fail, 77 skip (io_uring not available).
# MESON and NINJA may name other binaries than the ones on PATH. Nothing is
# downloaded (--wrap-mode=nodownload).
set -euo pipefail

if [ $# -ne 2 ]; then
  echo "usage: $0 WEFT_SOURCE_ROOT CONSUMER_DIR" >&2
  exit 1
fi
src=$(cd "$1" && pwd -P)
consumer_src=$(cd "$2" && pwd -P)
MESON=${MESON:-meson}
NINJA=${NINJA:-ninja}

# meson test may point LD_LIBRARY_PATH at the outer build (a sanitizer build,
# say), which would win over the consumer's own RUNPATH.
unset LD_LIBRARY_PATH LD_PRELOAD

tmp=$(mktemp -d "${TMPDIR:-/tmp}/weft-subproject.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

cp -a "$consumer_src" "$tmp/consumer"
mkdir "$tmp/consumer/subprojects"
ln -s "$src" "$tmp/consumer/subprojects/weft"
cd "$tmp/consumer"

# No test or benchmark of weft's may be registered, and weft may build
# nothing but its libraries (the internal archive feeds the real one; the
# hook library is built only on demand).
check_nothing_but_libraries() {
  local b=$1 listed
  listed=$("$MESON" test -C "$b" --list --no-rebuild 2>&1) || fail "meson test --list: $listed"
  echo "meson test --list: $listed"
  if grep -qi weft <<<"$listed"; then
    fail "weft's tests are registered in the consumer"
  fi
  "$MESON" introspect --targets --tests --benchmarks "$b" | python3 -c '
import json, sys
info = json.load(sys.stdin)
# weft-hook is defined too, but built only for a consumer that asks for it.
bad = [t["name"] for t in info["targets"]
       if t["subproject"] == "weft" and (t["name"] not in ("weft", "weft-internal", "weft-hook")
                                         or (t["name"] == "weft-hook" and t["build_by_default"]))]
bad += [t["name"] for t in info["tests"] + info["benchmarks"]
        if any(s.startswith("weft") for s in t["suite"])]
if bad:
    sys.exit("weft built or registered more than its libraries: " + ", ".join(bad))
' || fail "weft is not a quiet subproject"
}

# Compiles probes with the include path and defines the consumer's main.c got:
# <weft.h> must be found, weft's internal headers must not.
check_include_path() {
  local b=$1
  python3 - "$b" <<'EOF' || fail "the consumer's include path is wrong"
import json, os, shlex, subprocess, sys, tempfile

b = sys.argv[1]
cmds = json.load(open(os.path.join(b, "compile_commands.json")))
main = [c for c in cmds if c["file"].endswith("main.c")]
if len(main) != 1:
    sys.exit("main.c not found in compile_commands.json")
args = shlex.split(main[0]["command"])
keep, i = [args[0]], 1
while i < len(args):
    a = args[i]
    if a in ("-I", "-isystem", "-D", "-U", "-include"):
        keep += args[i:i + 2]
        i += 2
        continue
    if a.startswith(("-I", "-isystem", "-D", "-U", "-std=")):
        keep.append(a)
    i += 1

def found(header):
    """True if `header` is on the include path (found, whatever it contains)."""
    with tempfile.TemporaryDirectory() as d:
        probe = os.path.join(d, "probe.c")
        with open(probe, "w") as f:
            f.write('#if !__has_include("%s")\n#error not found\n#endif\n'
                    "int probe;\n" % header)
        r = subprocess.run(keep + ["-fsyntax-only", probe], cwd=main[0]["directory"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return r.returncode == 0

print("consumer compile flags:", " ".join(keep[1:]))
errors = []
for h in ("weft.h", "weft/task.h"):
    if not found(h):
        errors.append("public header %s not found" % h)
for h in ("core.h", "coro.h", "stack.h", "fault.h", "fcontext.h", "weft_build_config.h"):
    if found(h):
        errors.append("internal header %s is visible to consumers" % h)
if errors:
    sys.exit("\n".join(errors))
EOF
}

check_linkage() {
  local b=$1 kind=$2 needed syms
  needed=$(readelf -d "$b/consumer" | grep NEEDED || true)
  case $kind in
  shared)
    grep -q 'libweft\.so' <<<"$needed" || fail "shared: consumer does not link libweft.so: $needed"
    ;;
  static)
    ! grep -q 'libweft' <<<"$needed" || fail "static: consumer still needs $needed"
    # The context switch itself must have come out of libboost_context.a.
    syms=$(nm "$b/consumer")
    grep -q ' T jump_fcontext$' <<<"$syms" || fail "static: jump_fcontext not linked in"
    ;;
  esac
}

for kind in shared static; do
  b=build-$kind
  echo "=== weft as a $kind library"
  "$MESON" setup "$b" --wrap-mode=nodownload --force-fallback-for=weft \
    -Dwerror=true "-Dweft:default_library=$kind"
  "$NINJA" -C "$b"
  check_nothing_but_libraries "$b"
  check_include_path "$b"
  check_linkage "$b" "$kind"
  set +e
  out=$(timeout 60 "./$b/consumer")
  rc=$?
  set -e
  echo "consumer ($kind) exit $rc, printed: $out"
  if [ $rc -eq 77 ]; then
    echo "SKIP: io_uring is not available"
    exit 77
  fi
  [ $rc -eq 0 ] || fail "consumer ($kind) exited $rc"
  [ "$out" = OK ] || fail "consumer ($kind) printed '$out', expected OK"
done
echo "PASS: weft works as a subproject, shared and static"
