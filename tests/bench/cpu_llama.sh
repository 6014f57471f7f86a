#!/usr/bin/env bash
# One Llama 3.2 1B layer's LoRA training step (`fbc gen llama3.2-1b --layers 1 --seq SEQ --vocab 512
# --lora-rank 8 --training`, entry @loss_grad: forward and backward to the LoRA matrices) on this
# CPU: `fbc run --target cpu-llvm --random-inputs 1 -v` (its "s in native code", one execution
# on fresh storage, and the whole command's wall time, which adds LLVM's compile time, lowering
# and making the inputs) and `fbc bench --target cpu-llvm --repeat 3` ("warm": the sum of the
# launches' medians after a warm-up, as NumPy's steps are timed after one) against
# tests/bench/numpy_llama.py (the same step in NumPy/OpenBLAS, f32, REPEAT steps
# after a warm-up each round), each thread count in turn for N rounds (alternating, so that the
# machine's noise falls on all alike); `--target cpu-jit` (Cranelift) runs once per thread count.
# Prints the minimum and median of each and the ratios of the medians cpu-llvm native / NumPy and
# cpu-llvm warm / NumPy.
# NumPy runs with OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset (set on some machines here for old
# OpenBLAS builds, they slow a current one) and OPENBLAS_NUM_THREADS = fbc's FBC_JIT_THREADS.
#   B=path/to/fbc (built with --features llvm)  N=3  SEQ=128  THREADS="1 2"  REPEAT=3  JIT=1 (0: no
#   cpu-jit)  CHECK=1 (first compare NumPy's results with fbc's at seq CHECK_SEQ=SEQ; 0: skip)
set -euo pipefail
B=${B:-target/release/fbc}
N=${N:-3}
SEQ=${SEQ:-128}
THREADS=${THREADS:-1 2}
REPEAT=${REPEAT:-3}
JIT=${JIT:-1}
CHECK=${CHECK:-1}
here=$(cd "$(dirname "$0")" && pwd)
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
numpy() { env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python3 "$here/numpy_llama.py" --seq "$SEQ" "$@"; }
if [ "$CHECK" = 1 ]; then
    numpy --check "$B" --seq "${CHECK_SEQ:-$SEQ}" --repeat 0
fi
"$B" gen llama3.2-1b --layers 1 --seq "$SEQ" --vocab 512 --lora-rank 8 --training -o "$dir/l1.fbir"
stats() { sort -g | awk '{v[NR]=$1} END {printf "min %8.4f s  median %8.4f s  (%d)\n", v[1], v[int((NR+1)/2)], NR}'; }
median() { sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
fbc() { # TARGET THREADS: prints "native-seconds wall-seconds"
    local t0 t1 log
    t0=$(date +%s.%N)
    log=$(FBC_JIT_THREADS=$2 "$B" run "$dir/l1.fbir" --entry loss_grad --target "$1" --random-inputs 1 -v 2>&1 >/dev/null)
    t1=$(date +%s.%N)
    echo "$(sed -n 's/.* \([0-9.]*\) s in native code.*/\1/p' <<<"$log") $(awk -v a="$t0" -v b="$t1" 'BEGIN {print b - a}')"
}
warm() { # THREADS: the sum of `fbc bench`'s per-launch medians (3 repeats after a warm-up), in s
    FBC_JIT_THREADS=$1 "$B" bench "$dir/l1.fbir" --entry loss_grad --target cpu-llvm --repeat 3 2>&1 \
        | sed -n 's/^strategy [^,]*, [^,]*, \([0-9.]*\) ms,.*/\1/p' | awk '{print $1 / 1000}'
}
declare -A times=()
for r in $(seq "$N"); do
    for t in $THREADS; do
        read -r native wall < <(fbc cpu-llvm "$t")
        times[llvm-native-$t]+="$native "
        times[llvm-wall-$t]+="$wall "
        times[llvm-warm-$t]+="$(warm "$t") "
        times[numpy-$t]+="$(numpy --threads "$t" --repeat "$REPEAT" | sed -n 's/^steps: //p') "
        if [ "$JIT" = 1 ] && [ "$r" = 1 ]; then
            read -r native wall < <(fbc cpu-jit "$t")
            times[jit-native-$t]+="$native "
            times[jit-wall-$t]+="$wall "
        fi
    done
done
for t in $THREADS; do
    for k in llvm-native llvm-warm llvm-wall jit-native jit-wall numpy; do
        [ -n "${times[$k-$t]:-}" ] || continue
        printf 'llama 1 layer seq %-4s %s threads  %-12s ' "$SEQ" "$t" "$k"
        echo "${times[$k-$t]}" | tr ' ' '\n' | grep . | stats
    done
    l=$(echo "${times[llvm-native-$t]}" | tr ' ' '\n' | grep . | median)
    n=$(echo "${times[numpy-$t]}" | tr ' ' '\n' | grep . | median)
    w=$(echo "${times[llvm-warm-$t]}" | tr ' ' '\n' | grep . | median)
    line="cpu-llvm native / numpy (medians), $t threads: $(awk -v a="$l" -v b="$n" 'BEGIN {printf "%.2f", a / b}')"
    line+="; cpu-llvm warm / numpy: $(awk -v a="$w" -v b="$n" 'BEGIN {printf "%.2f", a / b}')"
    if [ -n "${times[jit-native-$t]:-}" ]; then
        j=${times[jit-native-$t]% }
        line+="; cpu-jit native / cpu-llvm native: $(awk -v a="$j" -v b="$l" 'BEGIN {printf "%.2f", a / b}')"
    fi
    echo "$line"
done
