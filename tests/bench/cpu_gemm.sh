#!/usr/bin/env bash
# The CPU back ends' contractions against NumPy (OpenBLAS) on this machine, side by side in one
# run: each configuration N times in turn (alternating, so that the machine's noise falls on
# all alike), the minimum and median of `fbc run -v`'s "in native code" time (NumPy: `a @ b`).
#   B=path/to/fbc (built with --features llvm)  N=5  THREADS="1 2"  FILES="..."  -O LEVEL: O=-O3
set -euo pipefail
B=${B:-target/release/fbc}
N=${N:-5}
O=${O:--O3}
THREADS=${THREADS:-1 2}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
mm() { # NAME M K N
    cat > "$dir/$1.fbir" <<FBIR
module @$1 {
  func.func @$1(%a: tensor<$2x$3xf32>, %b: tensor<$3x$4xf32>) -> tensor<$2x$4xf32> {
    %o = tensor.matmul %a, %b : (tensor<$2x$3xf32>, tensor<$3x$4xf32>) -> tensor<$2x$4xf32>
    func.return %o : (tensor<$2x$4xf32>) -> ()
  }
}
FBIR
}
mm mm1024 1024 1024 1024
mm fb_o 512 2048 8192
FILES=${FILES:-"$dir/mm1024.fbir $dir/fb_o.fbir"}
stats() { sort -g | awk '{v[NR]=$1} END {printf "min %.4f s  median %.4f s\n", v[1], v[int((NR+1)/2)]}'; }
for f in $FILES; do
    for t in $THREADS; do
        declare -A times=()
        for _ in $(seq "$N"); do
            for cfg in "cpu-jit 0" "cpu-jit 1" "cpu-llvm 0" "cpu-llvm 1"; do
                set -- $cfg
                s=$(FBC_JIT_THREADS=$t FBC_JIT_PACKED=$2 "$B" run "$f" "$O" --target "$1" --random-inputs 1 -v 2>&1 >/dev/null \
                    | sed -n 's/.* \([0-9.]*\) s in native code.*/\1/p')
                times[$cfg]+="$s "
            done
            shape=$(grep -o 'tensor<[0-9x]*xf32>' "$f" | head -2 | tr -d 'tensor<>f' | sed 's/x32$//' | paste -sd' ')
            read -r m k <<<"$(echo "$shape" | awk '{split($1,a,"x"); print a[1], a[2]}')"
            n=$(echo "$shape" | awk '{split($2,b,"x"); print b[2]}')
            s=$(OPENBLAS_NUM_THREADS=$t python3 -c "
import numpy as np, time
a = np.random.rand($m, $k).astype(np.float32); b = np.random.rand($k, $n).astype(np.float32)
a @ b
t = time.perf_counter(); a @ b; print(time.perf_counter() - t)")
            times[numpy]+="$s "
        done
        for cfg in "cpu-jit 0" "cpu-jit 1" "cpu-llvm 0" "cpu-llvm 1" numpy; do
            label=$cfg
            case $cfg in *" 0") label="${cfg% 0} plain";; *" 1") label="${cfg% 1} packed";; esac
            printf '%-28s %-2s threads %-16s ' "$(basename "$f" .fbir)" "$t" "$label"
            echo "${times[$cfg]}" | tr ' ' '\n' | grep . | stats
        done
        unset times
    done
done
