#!/usr/bin/env bash
# Issue-20 figures: compile time per op of long modules, to show it is linear in their length.
# B: the fbc to measure (default devbin/fbc); NS: the sizes (default 1000 10000 100000 1000000);
# LEVELS: the command lines measured (default -O2, and -O3 --target mali writing OpenCL).
# Two module shapes: `chain` (N elementwise ops, alternately `tensor.mul %v, %b` and
# `tensor.add %v, %b`: %b has N uses, the fused chain N levels) and `fold` (the same chain on
# constants, which canonicalize folds entirely). Prints wall seconds and microseconds per op.
set -u
B=${B:-devbin/fbc}; T=${T:-/tmp/scale}; mkdir -p "$T"
NS=${NS:-"1000 10000 100000 1000000"}
gen() { # gen KIND N FILE
  python3 - "$1" "$2" "$3" <<'PY'
import sys
kind, n, path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
t = "tensor<64x64xf32>"
with open(path, "w") as f:
    if kind == "fold":
        f.write(f"func.func @main() -> {t} {{\n")
        f.write(f"  %b = tensor.constant {{value = 0.5}} : () -> {t}\n")
        f.write(f"  %x = tensor.constant {{value = 1.0}} : () -> {t}\n")
    else:
        f.write(f"func.func @main(%x: {t}, %b: {t}) -> {t} {{\n")
    last = "x"
    for i in range(n):
        op = "mul" if i % 2 == 0 else "add"
        f.write(f"  %v{i} = tensor.{op} %{last}, %b : ({t}, {t}) -> {t}\n")
        last = f"v{i}"
    f.write(f"  func.return %{last} : ({t}) -> ()\n}}\n")
PY
}
printf "%-6s %8s %-22s %9s %9s\n" kind ops command wall_s us_per_op
for kind in chain fold; do
  for n in $NS; do
    f=$T/$kind$n.fbir; [ -e "$f" ] || gen $kind $n $f
    for cmd in "-O2" "-O3 --target mali"; do
      o=$T/out_$kind$n${cmd// /_}; rm -rf "$o"
      s=$(date +%s.%N)
      # shellcheck disable=SC2086
      if ! $B "$f" $cmd -o "$o" > /dev/null 2> "$T/err"; then
        echo "$kind $n $cmd FAILED: $(head -c 300 "$T/err")"; continue
      fi
      e=$(date +%s.%N)
      printf "%-6s %8d %-22s %9.2f %9.2f\n" $kind $n "$cmd" "$(echo "$e - $s" | bc)" \
        "$(echo "($e - $s) * 1000000 / $n" | bc -l)"
    done
  done
done
