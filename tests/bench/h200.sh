#!/usr/bin/env bash
# H200 measurements for the issue notes; run on the lent device from the repo root.
set -u
B=${B:-devbin/fbc}; O=${OUT:-/tmp/out}; T=/tmp/w; mkdir -p $T $O
ldd $B | grep -q "not found" && export LD_LIBRARY_PATH=$PWD/devbin
nvidia-smi --query-gpu=name,driver_version --format=csv > $O/gpu.txt 2>&1
$B devices > $O/devices.txt 2>&1
D=NVIDIA
# Correctness on the device: every example and a 1-layer Llama training step, -O3, against the interpreter.
for f in examples/*.fbir; do
  echo "== $f" >> $O/check.txt
  timeout 120 $B run $f --target opencl --device $D --profile nvidia --random-inputs 1 --check >> $O/check.txt 2>&1; echo "rc=$?" >> $O/check.txt
done
$B gen llama3.2-1b --layers 1 --seq 64 --vocab 512 --lora-rank 8 --training -o $T/l1.fbir
timeout 200 $B run $T/l1.fbir --entry loss_grad --target opencl --device $D --profile nvidia --random-inputs 1 --check >> $O/check.txt 2>&1; echo "llama rc=$?" >> $O/check.txt
# Benchmarks: fblayout vs reuse vs convert side by side, paper sizes.
$B gen matmul-fb -o $T/mfb.fbir
timeout 150 $B bench $T/mfb.fbir --device $D --profile nvidia --compare fblayout,reuse,convert --repeat 10 > $O/bench_mfb.txt 2>&1
for c in c1 c2 c3; do
  $B gen mha --config $c -o $T/mha_$c.fbir
  timeout 100 $B bench $T/mha_$c.fbir --device $D --profile nvidia --compare fblayout,reuse,convert --repeat 10 > $O/bench_mha_$c.txt 2>&1
done
timeout 120 python3 tests/bench/torch_ref.py > $O/torch.json 2>&1
echo done > $O/done
