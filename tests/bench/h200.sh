#!/usr/bin/env bash
# H200 measurements for the issue notes; run on the lent device from the repo root.
# B: the fbc to measure (default devbin/fbc); OLD: optionally another fbc (say, the previous
# commit's) benchmarked side by side in the same run. Results: $OUT/{check,bench}.txt, torch.json.
set -u
B=${B:-devbin/fbc}; OLD=${OLD:-}; O=${OUT:-/tmp/out}; T=/tmp/w; mkdir -p $T $O
ldd $B | grep -q "not found" && export LD_LIBRARY_PATH=$PWD/devbin
D=NVIDIA; C=$O/check.txt; R=$O/bench.txt
{ nvidia-smi --query-gpu=name,driver_version --format=csv; $B devices; } > $C 2>&1
# Correctness on the device: every example and a 1-layer Llama training step, -O3, against the
# interpreter; with --half-images against the f16 storage model.
for f in examples/attention.fbir examples/matmul_fb.fbir examples/transformer_mlp.fbir; do
  for h in "" --half-images; do
    echo "== $f $h" >> $C
    timeout 120 $B run $f --target opencl --device $D --profile nvidia --random-inputs 1 --check $h >> $C 2>&1; echo "rc=$?" >> $C
  done
done
$B gen llama3.2-1b --layers 1 --seq 64 --vocab 512 --lora-rank 8 --training -o $T/l1.fbir
echo "== llama step" >> $C
timeout 200 $B run $T/l1.fbir --entry loss_grad --target opencl --device $D --profile nvidia --random-inputs 1 --check >> $C 2>&1; echo "rc=$?" >> $C
# Benchmarks: fblayout vs reuse vs convert side by side, paper sizes; f16 images; the old binary.
$B gen matmul-fb -o $T/mfb.fbir
for c in c1 c2 c3; do $B gen mha --config $c -o $T/mha_$c.fbir; done
for g in mha_c1 mha_c2 mha_c3 mfb; do
  for b in $B $OLD; do
    echo "=== $g $b" >> $R
    timeout 150 $b bench $T/$g.fbir --device $D --profile nvidia --compare fblayout,reuse,convert --repeat 10 >> $R 2>&1
  done
  echo "=== $g $B --half-images" >> $R
  timeout 100 $B bench $T/$g.fbir --device $D --profile nvidia --half-images --repeat 10 >> $R 2>&1
done
# Split-K (issue 10): the skinny LoRA products alone and a one-layer Llama training step at
# sequence 512, split-k auto and off side by side.
$B gen llama3.2-1b --layers 1 --seq 512 --vocab 512 --lora-rank 8 --training -o $T/l512.fbir
echo "=== lora_products split-k" >> $R
timeout 150 $B bench tests/bench/lora_products.fbir --device $D --profile nvidia --split-k auto,off --repeat 10 >> $R 2>&1
echo "=== llama step seq 512 split-k" >> $R
timeout 300 $B bench $T/l512.fbir --entry loss_grad --device $D --profile nvidia --split-k auto,off --repeat 10 >> $R 2>&1
echo "== lora_products split-k auto" >> $C
timeout 120 $B run tests/bench/lora_products.fbir --target opencl --device $D --profile nvidia --random-inputs 1 --check >> $C 2>&1; echo "rc=$?" >> $C
timeout 120 python3 tests/bench/torch_ref.py > $O/torch.json 2>&1
echo done >> $C
