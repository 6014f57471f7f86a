#!/usr/bin/env bash
# Builds the CLBlast reference of tests/bench/h200.sh on the development machine (the device has
# no compiler and nothing can be installed there): Debian's libclblast 1.5.3 packages, downloaded
# and unpacked (not installed), and tests/bench/clblast_bench.c linked against them. Writes
# OUT/clblast_bench and OUT/libclblast.so.1 (OUT default devbin/clblast); carry OUT's parent to
# the device, where h200.sh's `clblast` part runs it with LD_LIBRARY_PATH set to OUT.
# Needs: apt-get (download only), dpkg-deb, gcc, the OpenCL headers (ocl-icd-opencl-dev).
set -eu
OUT=${OUT:-devbin/clblast}
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
mkdir -p "$OUT"
(cd "$W" && apt-get download libclblast1 libclblast-dev > /dev/null)
for d in "$W"/*.deb; do dpkg-deb -x "$d" "$W/root"; done
L=$W/root/usr/lib/x86_64-linux-gnu
gcc -O2 -Wall -o "$OUT/clblast_bench" tests/bench/clblast_bench.c -I"$W/root/usr/include" \
  -L"$L" -l:libclblast.so.1 -lOpenCL -Wl,-rpath,'$ORIGIN'
cp -L "$L/libclblast.so.1" "$OUT/"
echo "wrote $OUT/clblast_bench and $OUT/libclblast.so.1"
