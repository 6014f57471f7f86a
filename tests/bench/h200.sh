#!/usr/bin/env bash
# H200 measurements for the issue notes; run on the lent device from the repo root.
# B: the fbc to measure (default devbin/fbc); OLD: optionally another fbc (say, the previous
# commit's) benchmarked side by side in the same run. Results: $OUT/{check,bench,sweep,tune}.txt,
# skinny.txt, generate.txt, merge.txt, matvec.txt, variants.txt, gemm.txt, bins.txt, flat.txt, chunks.txt, torch.json, torch_decode.json, clblast.txt, timeline_*.html, nvidia-calibrated.toml. PARTS: the sections to run (default all:
# calibrate infcheck check bench lora mfbsplit splitk timeline memory reduce decode attention generate tune sweep skinny chunks merge matvec variants gemm bins flat torch torchdecode clblast onnx unet nc4hw4 stream quant ab), so that a
# measurement can be split over device calls of at most 10 minutes.
set -u
PARTS=${PARTS:-calibrate infcheck check bench lora mfbsplit splitk timeline memory reduce decode attention generate tune sweep skinny chunks merge matvec variants gemm bins flat torch torchdecode clblast onnx unet nc4hw4 stream quant ab}
want() { case " $PARTS " in *" $1 "*) return 0 ;; esac; return 1; }
B=${B:-devbin/fbc}; OLD=${OLD:-}; O=${OUT:-/tmp/out}; T=/tmp/w; mkdir -p $T $O
ldd $B | grep -q "not found" && export LD_LIBRARY_PATH=$PWD/devbin
# P: the hardware profile (default the builtin nvidia; a .toml path measures an edited one).
D=NVIDIA; P=${P:-nvidia}; C=$O/check.txt; R=$O/bench.txt
{ nvidia-smi --query-gpu=name,driver_version --format=csv; $B devices; } >> $C 2>&1
$B gen matmul-fb -o $T/mfb.fbir
for c in c1 c2 c3; do $B gen mha --config $c -o $T/mha_$c.fbir; done
# Calibration (issue 11): `fbc calibrate` over the builtin nvidia profile; the profile it
# writes is $O/nvidia-calibrated.toml (its log $O/calibrate.txt), what `P=` can then measure.
if want calibrate; then
  timeout 300 $B calibrate --device $D --base nvidia -o $O/nvidia-calibrated.toml > $O/calibrate.txt 2>&1
  echo "rc=$?" >> $O/calibrate.txt
fi
# Inference graphs on the device against the interpreter (part infcheck): a one-layer Llama
# prefill and decode at a small vocabulary, the caches written in place at a random position.
if want infcheck; then
  $B gen llama3.2-1b --inference --layers 1 --seq 16 --max-seq 64 --vocab 512 -o $T/inf1.fbir
  for e in prefill decode; do
    echo "== inference $e" >> $C
    timeout 200 $B run $T/inf1.fbir --entry $e --target opencl --device $D --profile $P --random-inputs 1 --check >> $C 2>&1; echo "rc=$?" >> $C
  done
  # Two layers over a cache of 256 positions: the decode attention splits the keys into chunks
  # whose partials the last work-group combines, and the second layer's launch reuses the counts.
  $B gen llama3.2-1b --inference --layers 2 --seq 16 --max-seq 256 --vocab 512 -o $T/inf2.fbir
  echo "== inference decode, 2 layers, 256 positions" >> $C
  timeout 200 $B run $T/inf2.fbir --entry decode --target opencl --device $D --profile $P --random-inputs 1 --check >> $C 2>&1; echo "rc=$?" >> $C
fi
# Imported ONNX models (part onnx, issue 16): the three of tests/onnx/models through `fbc import`,
# checked on the device against the interpreter at -O3 (the interpreter against onnxruntime is
# the tests' job), and their kernel times ($O/onnx.txt).
if want onnx; then
  for m in bert_layer llama_layer vit_layer; do
    $B import tests/onnx/models/$m/model.onnx -o $T/onnx_$m.fbir >> $C 2>&1
    echo "== onnx $m" >> $C
    timeout 120 $B run $T/onnx_$m.fbir --target opencl --device $D --profile $P -O3 --random-inputs 1 --check >> $C 2>&1; echo "rc=$?" >> $C
    echo "== onnx $m" >> $O/onnx.txt
    timeout 120 $B bench $T/onnx_$m.fbir --device $D --profile $P --repeat 10 >> $O/onnx.txt 2>&1; echo "rc=$?" >> $O/onnx.txt
  done
  # `--inline-weights`: the weights are dense constants of the .fbir, uploaded by the runtime.
  $B import tests/onnx/models/llama_layer/model.onnx --inline-weights -o $T/onnx_inline.fbir >> $C 2>&1
  echo "== onnx llama_layer --inline-weights" >> $C
  timeout 120 $B run $T/onnx_inline.fbir --target opencl --device $D --profile $P -O3 --random-inputs 1 --check >> $C 2>&1; echo "rc=$?" >> $C
fi
if want check; then
# Correctness on the device: every example and a 1-layer Llama training step, -O3, against the
# interpreter; with --half-images against the f16 storage model.
for f in examples/attention.fbir examples/matmul_fb.fbir examples/transformer_mlp.fbir; do
  for h in "" --half-images; do
    echo "== $f $h" >> $C
    timeout 120 $B run $f --target opencl --device $D --profile $P --random-inputs 1 --check $h >> $C 2>&1; echo "rc=$?" >> $C
  done
done
$B gen llama3.2-1b --layers 1 --seq 64 --vocab 512 --lora-rank 8 --training -o $T/l1.fbir
echo "== llama step" >> $C
timeout 200 $B run $T/l1.fbir --entry loss_grad --target opencl --device $D --profile $P --random-inputs 1 --check >> $C 2>&1; echo "rc=$?" >> $C
echo "== lora_products split-k auto" >> $C
timeout 120 $B run tests/bench/lora_products.fbir --target opencl --device $D --profile $P --random-inputs 1 --check >> $C 2>&1; echo "rc=$?" >> $C
fi
# Benchmarks: fblayout vs reuse vs convert side by side, paper sizes; f16 images; the old binary.
if want bench; then
for g in mha_c1 mha_c2 mha_c3 mfb; do
  for b in $B $OLD; do
    echo "=== $g $b" >> $R
    timeout 150 $b bench $T/$g.fbir --device $D --profile $P --compare fblayout,reuse,convert --repeat 10 >> $R 2>&1
  done
  echo "=== $g $B --half-images" >> $R
  timeout 100 $B bench $T/$g.fbir --device $D --profile $P --half-images --repeat 10 >> $R 2>&1
done
fi
# Split-K (issue 10): the skinny LoRA products alone (part lora) and a one-layer Llama training
# step at sequence 512 (part splitk), split-k auto and off side by side.
# SPLITS: the split-k settings of the LoRA products (default auto,off; fixed chunk counts too).
if want lora; then
for b in $B $OLD; do
  echo "=== lora_products split-k $b" >> $R
  timeout 150 $b bench tests/bench/lora_products.fbir --device $D --profile $P --split-k ${SPLITS:-auto,off} --repeat 10 >> $R 2>&1
done
fi
# The same settings on the matmul-fb products (part mfbsplit).
if want mfbsplit; then
echo "=== mfb split-k $B" >> $R
timeout 200 $B bench $T/mfb.fbir --device $D --profile $P --split-k ${SPLITS:-auto,off} --repeat 10 >> $R 2>&1
fi
if want splitk; then
$B gen llama3.2-1b --layers 1 --seq 512 --vocab 512 --lora-rank 8 --training -o $T/l512.fbir
echo "=== llama step seq 512 split-k" >> $R
timeout 300 $B bench $T/l512.fbir --entry loss_grad --device $D --profile $P --split-k auto,off --repeat 10 >> $R 2>&1
# The same step under the three layout strategies (issue 11), and with the old binary.
for b in $B $OLD; do
  echo "=== llama step seq 512 strategies $b" >> $R
  timeout 300 $b bench $T/l512.fbir --entry loss_grad --device $D --profile $P --compare fblayout,reuse,convert --repeat 10 >> $R 2>&1
done
fi
# Timelines (issue 19): where the device time of the Llama step and of MHA C1 goes, launch by
# launch, fblayout against reuse (part timeline): $OUT/timeline_step.html, timeline_mha_c1.html.
if want timeline; then
[ -f $T/l512.fbir ] || $B gen llama3.2-1b --layers 1 --seq 512 --vocab 512 --lora-rank 8 --training -o $T/l512.fbir
echo "=== timeline llama step seq 512 $B" >> $R
timeout 200 $B bench $T/l512.fbir --entry loss_grad --device $D --profile $P --compare fblayout,reuse --repeat 5 -q --timeline $O/timeline_step.html >> $R 2>&1
echo "=== timeline mha_c1 $B" >> $R
timeout 100 $B bench $T/mha_c1.fbir --device $D --profile $P --compare fblayout,reuse --repeat 5 -q --timeline $O/timeline_mha_c1.html >> $R 2>&1
fi
# Device memory (issue 11): storage held with --device-memory pooled and live-peak, alternated
# twice, on the one-layer Llama step and MHA C1 (part memory). Each bench line gives the time,
# the memory planned, what is live at once and what the device held.
if want memory; then
$B gen llama3.2-1b --layers 1 --seq 512 --vocab 512 --lora-rank 8 --training -o $T/l512.fbir
for rep in 1 2; do
  for dm in pooled live-peak planned; do
    echo "=== memory $dm ($rep)" >> $R
    timeout 200 $B bench $T/l512.fbir --entry loss_grad --device $D --profile $P --device-memory $dm --repeat 10 2>&1 | grep strategy >> $R
    timeout 100 $B bench $T/mha_c1.fbir --device $D --profile $P --device-memory $dm --repeat 10 2>&1 | grep strategy >> $R
  done
  # plan-memory's slots held as planned by $OLD, beside $B's above (nested images, session 27).
  if [ -n "$OLD" ]; then
    echo "=== memory planned, $OLD ($rep)" >> $R
    timeout 200 $OLD bench $T/l512.fbir --entry loss_grad --device $D --profile $P --device-memory planned --repeat 10 2>&1 | grep strategy >> $R
  fi
done
fi
# Row reductions (softmax, norms, cross-entropy at a 32000-word vocabulary, a column sum): the
# work-group-per-row form against the old binary, alternating twice (per-kernel noise is ~20%).
if want reduce; then
for rep in 1 2; do
  for b in $B $OLD; do
    echo "=== reductions $b ($rep)" >> $R
    timeout 120 $b bench tests/bench/reductions.fbir --device $D --profile $P --repeat 20 >> $R 2>&1
  done
done
fi
# Tuning (issue 10): `fbc tune` on the bench graphs into one database (BUDGET seconds each,
# default 60), then each graph benchmarked without and with it side by side (an empty cache
# directory, so that no other database is read). Results: $O/tune.txt.
if want tune; then
TD=$T/tuning.json; U=$O/tune.txt; rm -f $TD; mkdir -p $T/empty
$B gen llama3.2-1b --layers 1 --seq 512 --vocab 512 --lora-rank 8 --training -o $T/l512.fbir
GRAPHS=("$T/l512.fbir --entry loss_grad" "$T/mha_c1.fbir" "$T/mfb.fbir" "tests/bench/lora_products.fbir")
for g in "${GRAPHS[@]}"; do
  echo "=== tune $g" >> $U
  FBC_CACHE_DIR=$T/empty timeout 240 $B tune $g --device $D --profile $P --budget ${BUDGET:-60} --repeat 3 --tuning $TD >> $U 2>&1
done
for g in "${GRAPHS[@]}"; do
  echo "=== $g default" >> $U
  FBC_CACHE_DIR=$T/empty timeout 100 $B bench $g --device $D --profile $P --repeat 10 2>&1 | head -3 >> $U
  echo "=== $g tuned" >> $U
  FBC_CACHE_DIR=$T/empty timeout 100 $B bench $g --device $D --profile $P --repeat 10 --tuning $TD 2>&1 | head -3 >> $U
done
cp $TD $O/tuning.json
fi
# Contraction parameters (issue 10): work-group shape, register block and k step set through a
# profile file (the nvidia profile with its [compute] groups and [contraction] replaced), on the
# matmul-fb products (-O3: R-Tile images; -O0: buffers) and MHA C1. Results: $O/sweep.txt.
W=$O/sweep.txt
variant() { # name, work-group [x, y], per_item [cols, rows], tile_k, local_vector (4), stage_along_k (true), prefetch (false)
  sed -e '/^\[contraction\]/,$d' -e "s/^preferred_work_groups = .*/preferred_work_groups = [[$2]]/" \
    dialects/target/profiles/nvidia.toml > $T/$1.toml
  printf '\n[contraction]\nper_item = [%s]\ntile_k = %s\nlocal_vector = %s\nstage_along_k = %s\nprefetch = %s\n' \
    "$3" "$4" "${5:-4}" "${6:-true}" "${7:-false}" >> $T/$1.toml
  for g in "mfb -O3" "mfb -O0" "mha_c1 -O3"; do
    gf=${g% *}; lv=${g#* }
    echo "=== $1 $gf $lv group [$2] per_item [$3] tile_k $4 local_vector ${5:-4} stage_along_k ${6:-true} prefetch ${7:-false}" >> $W
    timeout 100 $B bench $T/$gf.fbir $lv --device $D --profile $T/$1.toml --repeat 5 < /dev/null >> $W 2>&1
  done
}
# SWEEP: the parameter sets, `name|group|per_item|tile_k[|local_vector[|stage_along_k[|prefetch]]]`, one per
# line (default: the list below).
if want sweep; then
DEFAULT_SWEEP=$(printf '%s\n' "g32x8_p4x4_k16_v1|32, 8|4, 4|16|1" "g32x8_p4x4_k16|32, 8|4, 4|16" \
  "g16x16_p4x4_k16_v1|16, 16|4, 4|16|1" "g16x16_p4x4_k16|16, 16|4, 4|16" \
  "g16x16_p8x8_k16|16, 16|8, 8|16" "g16x16_p8x8_k8|16, 16|8, 8|8" "g16x16_p4x8_k16|16, 16|4, 8|16" \
  "g16x16_p8x4_k16|16, 16|8, 4|16" "g32x8_p4x8_k16|32, 8|4, 8|16" "g16x16_p4x4_k32|16, 16|4, 4|32" \
  "g32x8_p4x4_k32|32, 8|4, 4|32" "g16x8_p8x8_k16|16, 8|8, 8|16" "g8x8_p8x8_k16|8, 8|8, 8|16" \
  "g16x16_p8x8_k16_rows|16, 16|8, 8|16|4|false" "g16x16_p8x8_k16_pf|16, 16|8, 8|16|4|true|true" \
  "g16x16_p8x8_k8_pf|16, 16|8, 8|8|4|true|true" "g16x16_p4x8_k16_pf|16, 16|4, 8|16|4|true|true")
while IFS='|' read -r n g p k lv st pf; do
  [ -n "$n" ] && variant "$n" "$g" "$p" "$k" "${lv:-4}" "${st:-true}" "${pf:-false}"
done <<< "${SWEEP:-$DEFAULT_SWEEP}"
fi
# Inference (issue 14): the 16-layer Llama 3.2-1B at its full vocabulary, one decode step with
# a 2048-position KV cache written in place, and a 512-token prefill (random weights), with $B
# and $OLD side by side (ENTRIES: which functions, default both).
# A decode step reads the cache up to its position (fused attention, issue 14): $B at the
# positions POSITIONS (default 2047, the full cache, and 127) given with `--inputs`; $OLD with
# random inputs (the unfused graph reads every position wherever it is).
if want decode; then
  $B gen llama3.2-1b --inference --seq 512 --max-seq 2048 -o $T/llama_inf.fbir
  # The old binary's own module: the IR of inference graphs changes with the compiler.
  [ -n "$OLD" ] && { [ -e $T/llama_inf_old.fbir ] || $OLD gen llama3.2-1b --inference --seq 512 --max-seq 2048 -o $T/llama_inf_old.fbir; }
  for e in ${ENTRIES:-decode prefill}; do
    for p in ${POSITIONS:-2047 127}; do
      [ $e = prefill ] && p=0
      python3 tests/bench/scalar_i32.py pos $p > $T/pos.safetensors
      echo "=== inference $e pos=$p $B" >> $R
      timeout 240 $B bench $T/llama_inf.fbir --entry $e --device $D --profile $P --inputs $T/pos.safetensors --repeat 10 >> $R 2>&1
      if [ -n "$OLD" ]; then
        # The old binary reads the cache up to the same last position, so each pair compares
        # (without it its position is random: its attention reads other keys). OLD_SAME_INPUTS=0
        # for an old binary without fused attention or `bench --inputs`.
        old_in=""; [ "${OLD_SAME_INPUTS:-1}" = 1 ] && old_in="--inputs $T/pos.safetensors"
        echo "=== inference $e pos=$p $OLD $old_in" >> $R
        timeout 240 $OLD bench $T/llama_inf_old.fbir --entry $e --device $D --profile $P $old_in --repeat 10 >> $R 2>&1
      fi
      [ $e = prefill ] && break
    done
  done
fi
# Fused attention (issue 14, part attention): the 16-layer Llama decode step with
# fuse-attention and without it (`--disable-pass`), the same binary side by side, at the
# positions POSITIONS.
if want attention; then
  [ -e $T/llama_inf.fbir ] || $B gen llama3.2-1b --inference --seq 512 --max-seq 2048 -o $T/llama_inf.fbir
  for p in ${POSITIONS:-2047 127}; do
    e=decode
    python3 tests/bench/scalar_i32.py pos $p > $T/pos.safetensors
    for d in "" "--disable-pass fuse-attention"; do
      echo "=== attention llama $e pos=$p ${d:-fused} $B" >> $R
      timeout 200 $B bench $T/llama_inf.fbir --entry $e --device $D --profile $P --inputs $T/pos.safetensors --repeat 10 $d >> $R 2>&1
    done
  done
fi
# Prefill attention in query blocks (issue 14, part flat): a one-layer Llama 3.2-1B prefill of
# 512 tokens (the MHA C1 shape: 32 heads of 64 over 512 positions, GQA 8) with its attention
# fused (`fuse-attention{max-queries=1024}` ahead of -O3: the query-block kernel) and unfused
# (the tiled products and the softmax), the fused one checked against the interpreter first,
# then alternated twice, with $OLD's kernel for the same fused module where OLD is set.
# Results: $O/flat.txt; PyTorch's figures for the same attention (eager and SDPA) come from part
# torch ($O/torch.json, attn_prefill_eager_ms and attn_prefill_sdpa_ms).
if want flat; then
  F2=$O/flat.txt
  $B gen llama3.2-1b --inference --layers 1 --seq 512 --max-seq 512 --vocab 512 -o $T/flat.fbir
  $B opt $T/flat.fbir --passes 'fuse-attention{max-queries=1024}' -o $T/flat_fused.fbir
  python3 tests/bench/scalar_i32.py pos 0 > $T/pos0.safetensors
  echo "== check prefill, fused in query blocks" >> $F2
  timeout 200 $B run $T/flat_fused.fbir --entry prefill --target opencl --device $D --profile $P --random-inputs 1 --check >> $F2 2>&1; echo "rc=$?" >> $F2
  # The unfused chain: the profile without fusing a prompt's attention (the nvidia profile
  # fuses it in any module: `[attention] fuse_prompts`).
  sed 's/^fuse_prompts = true/fuse_prompts = false/' dialects/target/profiles/nvidia.toml > $T/nofuse.toml
  [ "$P" = nvidia ] || sed 's/^fuse_prompts = true/fuse_prompts = false/' $P > $T/nofuse.toml
  # PROMPT_SPLITS: `[attention] prompt_splits` values to measure beside the profile's own
  # (each block's keys over that many work-groups, replacing the profile's), e.g. "1 4".
  SPLIT_RUNS=""
  for n in ${PROMPT_SPLITS:-}; do
    sed -e '/^prompt_splits *=/d' -e "s/^\[attention\]/[attention]\nprompt_splits = $n/" $( [ "$P" = nvidia ] && echo dialects/target/profiles/nvidia.toml || echo $P ) > $T/splits$n.toml
    timeout 200 $B run $T/flat_fused.fbir --entry prefill --target opencl --device $D --profile $T/splits$n.toml --random-inputs 1 --check >> $F2 2>&1; echo "rc=$? (prompt_splits $n)" >> $F2
    SPLIT_RUNS="$SPLIT_RUNS $n"
  done
  for round in 1 2; do
    for n in $SPLIT_RUNS; do
      echo "=== flat flat_fused round $round $B $T/splits$n.toml" >> $F2
      timeout 200 $B bench $T/flat_fused.fbir --entry prefill --device $D --profile $T/splits$n.toml --inputs $T/pos0.safetensors --repeat 10 >> $F2 2>&1
    done
    for run in "$B flat_fused $P" "$B flat $T/nofuse.toml" ${OLD:+"$OLD flat_fused $P"}; do
      read -r bin mod prof <<< "$run"
      echo "=== flat $mod round $round $bin $prof" >> $F2
      timeout 200 $bin bench $T/$mod.fbir --entry prefill --device $D --profile $prof --inputs $T/pos0.safetensors --repeat 10 >> $F2 2>&1
    done
  done
fi
# Skinny products (issues 10 and 14, part skinny): the skinny kernel's [skinny] parameters set
# through a profile file (the nvidia profile with a [skinny] table appended), on the decode
# step's matrix-vector products (tests/bench/decode_products.fbir) and, for the sets named in
# SKINNY_LLAMA, on the 16-layer Llama decode step at position 2047. Results: $O/skinny.txt.
# SKINNY: the sets, `name|wide_lanes|wide_rows|groups_per_cu|matvec_min_k[|images[|split-k[|one]]]`,
# one per line (images true, split-k auto, one_launch_split false unless given). SKINNY_LLAMA
# may name a set more than once (alternated runs).
if want skinny; then
K=$O/skinny.txt
DEFAULT_SKINNY=$(printf '%s\n' "base|32|8|2|256" "g8|32|8|8|256" "l8r128off|8|128|2|256|true|off" \
  "l8r128|8|128|2|256" "l8r64off|8|64|2|256|true|off" "l16r64off|16|64|2|256|true|off" \
  "l4r256off|4|256|2|256|true|off" "buffers_l8r128off|8|128|2|256|false|off")
declare -A SPLIT
while IFS='|' read -r n l r g m img split one; do
  [ -n "$n" ] || continue
  # The shipped profile without its own [skinny] table, which the set replaces.
  sed -e "s/^supported = true/supported = ${img:-true}/" dialects/target/profiles/nvidia.toml \
    | awk '/^\[skinny\]/{skip=1; next} /^\[/{skip=0} !skip' > $T/sk_$n.toml
  printf '\n[skinny]\nwide_lanes = %s\nwide_rows = %s\ngroups_per_cu = %s\nmatvec_min_k = %s\none_launch_split = %s\n' "$l" "$r" "$g" "$m" "${one:-false}" >> $T/sk_$n.toml
  SPLIT[$n]=${split:-auto}
  echo "=== skinny $n wide_lanes $l wide_rows $r groups_per_cu $g matvec_min_k $m images ${img:-true} split-k ${split:-auto} one_launch_split ${one:-false}" >> $K
  timeout 100 $B bench tests/bench/decode_products.fbir --device $D --profile $T/sk_$n.toml --split-k ${split:-auto} --repeat 10 < /dev/null >> $K 2>&1
done <<< "${SKINNY:-$DEFAULT_SKINNY}"
for n in ${SKINNY_LLAMA:-}; do
  [ -e $T/llama_inf.fbir ] || $B gen llama3.2-1b --inference --seq 512 --max-seq 2048 -o $T/llama_inf.fbir
  python3 tests/bench/scalar_i32.py pos 2047 > $T/pos.safetensors
  echo "=== skinny llama decode pos=2047 $n split-k ${SPLIT[$n]}" >> $K
  timeout 200 $B bench $T/llama_inf.fbir --entry decode --device $D --profile $T/sk_$n.toml --split-k ${SPLIT[$n]} --inputs $T/pos.safetensors --repeat 10 < /dev/null >> $K 2>&1
done
fi
# `fbc generate` end to end (issue 14, part generate): the 16-layer Llama 3.2-1B with random
# weights, a 16-token prompt, GEN_NEW new tokens (default 64), its report of the time to the
# first token and per output token (wall clock, host included) with $B, and with $OLD for
# GEN_OLD_NEW tokens (default 3). GEN_PROFILES: the hardware profiles (names or files) $B runs
# with, one run each in order (default $P; a name may repeat: alternated runs). Results:
# $O/generate.txt.
if want generate; then
  G=$O/generate.txt
  $B gen llama3.2-1b --inference --seq 16 --max-seq 2048 -o $T/llama_gen.fbir
  PROMPT=$(seq -s, 1 16)
  for prof in ${GEN_PROFILES:-$P}; do
    echo "=== generate $B new ${GEN_NEW:-64} profile $prof" >> $G
    timeout 300 $B generate $T/llama_gen.fbir --random-weights 1 --prompt $PROMPT --max-new ${GEN_NEW:-64} --target opencl --device $D --profile $prof >> $G 2>&1
    echo "rc=$?" >> $G
  done
  # Whisper large-v3's decoder (32 layers, batch 1, 1500 encoder positions, random weights and
  # encoder states): the cross-attention caches stay on the device from @prefill on.
  $B gen whisper-large-decoder --inference --batch 1 --seq 16 --max-seq 448 -o $T/whisper_gen.fbir
  echo "=== generate whisper $B new ${GEN_NEW:-64}" >> $G
  timeout 300 $B generate $T/whisper_gen.fbir --random-weights 1 --prompt $PROMPT --max-new ${GEN_NEW:-64} --target opencl --device $D --profile $P >> $G 2>&1
  echo "rc=$?" >> $G
  if [ -n "$OLD" ]; then
    $OLD gen llama3.2-1b --inference --seq 16 --max-seq 2048 -o $T/llama_gen_old.fbir
    echo "=== generate $OLD new ${GEN_OLD_NEW:-3}" >> $G
    timeout 300 $OLD generate $T/llama_gen_old.fbir --random-weights 1 --prompt $PROMPT --max-new ${GEN_OLD_NEW:-3} --target opencl --device $D --profile $P >> $G 2>&1
    echo "rc=$?" >> $G
  fi
fi
# Flash-decoding chunks (part chunks, issue 14): the 16-layer Llama 3.2-1B decode step at
# POSITIONS (default 2047 127) with the profile P (a .toml, or the builtin nvidia's file) and its
# `[attention] decode_chunk` at each of CHUNKS (default 32 64 128), alternated twice in one call,
# after the 2-layer decode over 256 positions checked against the interpreter with each.
# Results: $O/chunks.txt.
if want chunks; then
  F3=$O/chunks.txt
  base=dialects/target/profiles/nvidia.toml; [ -f "$P" ] && base=$P
  [ -e $T/llama_inf.fbir ] || $B gen llama3.2-1b --inference --seq 512 --max-seq 2048 -o $T/llama_inf.fbir
  [ -e $T/inf2.fbir ] || $B gen llama3.2-1b --inference --layers 2 --seq 16 --max-seq 256 --vocab 512 -o $T/inf2.fbir
  for c in ${CHUNKS:-32 64 128}; do
    # The base's `[attention]` table (the nvidia profile's has `fuse_prompts`) gets the chunk.
    sed "s/^fuse_prompts = \(.*\)\$/fuse_prompts = \1\ndecode_chunk = $c/" $base > $T/chunk$c.toml
    echo "=== check chunk $c" >> $F3
    timeout 120 $B run $T/inf2.fbir --entry decode --target opencl --device $D --profile $T/chunk$c.toml --random-inputs 1 --check >> $F3 2>&1; echo "rc=$?" >> $F3
  done
  for round in 1 2; do
    for p in ${POSITIONS:-2047 127}; do
      python3 tests/bench/scalar_i32.py pos $p > $T/pos.safetensors
      for c in ${CHUNKS:-32 64 128}; do
        echo "=== chunks round $round pos=$p decode_chunk=$c" >> $F3
        timeout 120 $B bench $T/llama_inf.fbir --entry decode --device $D --profile $T/chunk$c.toml --inputs $T/pos.safetensors --repeat 10 >> $F3 2>&1
      done
    done
  done
fi
# Merged launches (part merge, issue 14): the 16-layer Llama 3.2-1B decode step at position
# 2047 and `fbc generate` (GEN_NEW new tokens, default 32) with the shipped nvidia profile and
# with `[skinny] merge_launches = true` (a decode step's Q, K and V projections as one launch,
# and its up and gate projections as another),
# alternated twice in one call, after a 2-layer decode checked against the interpreter with it
# (three runs). Results: $O/merge.txt.
if want merge; then
  M=$O/merge.txt
  sed 's/^\[skinny\]$/[skinny]\nmerge_launches = true/' dialects/target/profiles/nvidia.toml > $T/merge.toml
  [ -e $T/llama_inf.fbir ] || $B gen llama3.2-1b --inference --seq 512 --max-seq 2048 -o $T/llama_inf.fbir
  [ -e $T/llama_gen.fbir ] || $B gen llama3.2-1b --inference --seq 16 --max-seq 2048 -o $T/llama_gen.fbir
  $B gen llama3.2-1b --inference --layers 2 --seq 16 --max-seq 256 --vocab 512 -o $T/inf2m.fbir
  echo "== check decode, 2 layers, 256 positions, merged" >> $M
  timeout 200 $B run $T/inf2m.fbir --entry decode --target opencl --device $D --profile $T/merge.toml --random-inputs 1 --runs 3 --check >> $M 2>&1; echo "rc=$?" >> $M
  python3 tests/bench/scalar_i32.py pos 2047 > $T/pos.safetensors
  for round in 1 2; do
    for prof in nvidia $T/merge.toml; do
      echo "=== merge decode pos=2047 round $round profile $prof" >> $M
      timeout 200 $B bench $T/llama_inf.fbir --entry decode --device $D --profile $prof --inputs $T/pos.safetensors --repeat 10 >> $M 2>&1
      echo "=== merge generate round $round profile $prof" >> $M
      timeout 300 $B generate $T/llama_gen.fbir --random-weights 1 --prompt $(seq -s, 1 16) --max-new ${GEN_NEW:-32} --target opencl --device $D --profile $prof >> $M 2>&1
    done
  done
fi
# Split-K's work-groups per compute unit for matrix-vector products (part matvec, issue 14): the
# nvidia profile with `[skinny] matvec_groups_per_cu` at each of GPCS (default 2 4 8 16; the
# shipped profile says 16, 2 was `groups_per_cu`'s and so the value before) and
# `[skinny] matvec_min_k` (the shortest chunk of a split reduction) at each of MINKS (default
# 128, the shipped value) on tests/bench/decode_products.fbir, then the 16-layer Llama 3.2-1B
# decode step at position 2047 with each, ROUNDS rounds (default 2). Results: $O/matvec.txt.
if want matvec; then
  V=$O/matvec.txt
  [ -e $T/llama_inf.fbir ] || $B gen llama3.2-1b --inference --seq 512 --max-seq 2048 -o $T/llama_inf.fbir
  python3 tests/bench/scalar_i32.py pos 2047 > $T/pos.safetensors
  for g in ${GPCS:-2 4 8 16}; do
    for m in ${MINKS:-128}; do
      sed -e '/^matvec_groups_per_cu = /d' -e '/^matvec_min_k = /d' \
        -e "s/^\[skinny\]\$/[skinny]\nmatvec_groups_per_cu = $g\nmatvec_min_k = $m/" \
        dialects/target/profiles/nvidia.toml > $T/gpc${g}_$m.toml
      echo "=== matvec products matvec_groups_per_cu $g matvec_min_k $m" >> $V
      timeout 60 $B bench tests/bench/decode_products.fbir --device $D --profile $T/gpc${g}_$m.toml --repeat 10 >> $V 2>&1
    done
  done
  for round in $(seq 1 ${ROUNDS:-2}); do
    for g in ${GPCS:-2 4 8 16}; do
      for m in ${MINKS:-128}; do
        echo "=== matvec decode pos=2047 round $round matvec_groups_per_cu $g matvec_min_k $m" >> $V
        timeout 100 $B bench $T/llama_inf.fbir --entry decode --device $D --profile $T/gpc${g}_$m.toml --inputs $T/pos.safetensors --repeat 10 >> $V 2>&1
      done
    done
  done
fi
# Variants of the nvidia profile side by side (part variants, issue 14): each line of VARIANTS
# is `name|key = value;key = value` (the keys replace the shipped ones in [skinny], or in the
# table a `table.key` names: `attention.decode_chunk = 32`; an empty list is the shipped
# profile). Each set's 2-layer decode over 256 positions checked
# against the interpreter, then the 16-layer Llama 3.2-1B decode step at position 2047 with
# each, alternated ROUNDS rounds (default 2). Results: $O/variants.txt.
# variant_profile NAME SETS: $T/var_NAME.toml, the nvidia profile with SETS (`key = value;...`)
# in place of its own keys.
variant_profile() {
  cp dialects/target/profiles/nvidia.toml $T/var_$1.toml
  IFS=';' read -ra kvs <<< "$2"
  for kv in "${kvs[@]}"; do
    key=$(echo "${kv%%=*}" | tr -d ' ')
    [ -n "$key" ] || continue
    sec=skinny
    case $key in *.*) sec=${key%%.*}; key=${key#*.}; kv="$key =${kv#*=}";; esac
    grep -q "^\[$sec\]\$" $T/var_$1.toml || printf '\n[%s]\n' $sec >> $T/var_$1.toml
    sed -i -e "/^$key = /d" -e "s/^\[$sec\]\$/[$sec]\n$kv/" $T/var_$1.toml
  done
}
if want variants; then
  VR=$O/variants.txt
  [ -e $T/llama_inf.fbir ] || $B gen llama3.2-1b --inference --seq 512 --max-seq 2048 -o $T/llama_inf.fbir
  [ -e $T/inf2.fbir ] || $B gen llama3.2-1b --inference --layers 2 --seq 16 --max-seq 256 --vocab 512 -o $T/inf2.fbir
  python3 tests/bench/scalar_i32.py pos 2047 > $T/pos.safetensors
  names=()
  while IFS='|' read -r n sets; do
    [ -n "$n" ] || continue
    names+=("$n")
    variant_profile "$n" "$sets"
    echo "== check decode, 2 layers, 256 positions, variant $n: $sets" >> $VR
    timeout 100 $B run $T/inf2.fbir --entry decode --target opencl --device $D --profile $T/var_$n.toml --random-inputs 1 --check >> $VR 2>&1; echo "rc=$?" >> $VR
  done <<< "${VARIANTS:-shipped|}"
  for round in $(seq 1 ${ROUNDS:-2}); do
    for n in "${names[@]}"; do
      echo "=== variants decode pos=2047 round $round variant $n" >> $VR
      timeout 100 $B bench $T/llama_inf.fbir --entry decode --device $D --profile $T/var_$n.toml --inputs $T/pos.safetensors --repeat 10 >> $VR 2>&1
    done
  done
fi
# The same kind of variants on contractions (part gemm, issue 10): GVARIANTS as VARIANTS above
# (default: the shipped profile, and buffer loads one value at a time), each checked on the
# one-layer Llama step (seq 64) against the interpreter at -O2 and -O3, then GRAPHS (default
# matmul-fb at -O2, whose operands are buffers, and -O3, R-Tile images; the one-layer Llama
# LoRA step at seq 512, -O3) benchmarked with each, alternated ROUNDS rounds (default 2);
# GCHECK=0 skips the checks.
# Results: $O/gemm.txt.
if want gemm; then
  G=$O/gemm.txt
  [ -f $T/l512.fbir ] || $B gen llama3.2-1b --layers 1 --seq 512 --vocab 512 --lora-rank 8 --training -o $T/l512.fbir
  [ -f $T/l64.fbir ] || $B gen llama3.2-1b --layers 1 --seq 64 --vocab 128 --lora-rank 8 --training -o $T/l64.fbir
  names=()
  while IFS='|' read -r n sets; do
    [ -n "$n" ] || continue
    names+=("$n")
    variant_profile "$n" "$sets"
    [ "${GCHECK:-1}" = 0 ] && continue
    for lv in -O2 -O3; do
      echo "== check l64 $lv variant $n: $sets" >> $G
      timeout 100 $B run $T/l64.fbir --entry loss_grad $lv --target opencl --device $D --profile $T/var_$n.toml --random-inputs 1 --check >> $G 2>&1; echo "rc=$?" >> $G
    done
  done <<< "${GVARIANTS:-$'shipped|\nscalar|contraction.vector_loads = false'}"
  for round in $(seq 1 ${ROUNDS:-2}); do
    for g in ${GRAPHS:-mfb:-O2 mfb:-O3 l512:-O3}; do
      f=${g%%:*}; lv=${g#*:}; e=""; [ $f = l512 ] && e="--entry loss_grad"
      for n in "${names[@]}"; do
        echo "=== gemm $f $lv round $round variant $n" >> $G
        timeout 100 $B bench $T/$f.fbir $e $lv --device $D --profile $T/var_$n.toml --repeat 10 >> $G 2>&1
      done
    done
  done
fi
# Several binaries side by side (part bins): the 16-layer Llama 3.2-1B decode step at the
# positions POSITIONS (default 2047) with each entry of BINS (in order: an fbc path, or
# PATH@PROFILE to run it with that profile instead of P), ROUNDS rounds (default 2), after the
# 2-layer decode checked against the interpreter with each; skipped without BINS.
# Results: $O/bins.txt.
if want bins && [ -n "${BINS:-}" ]; then
  N=$O/bins.txt
  first=${BINS%% *}; first=${first%%@*}
  $first gen llama3.2-1b --inference --layers 2 --seq 16 --max-seq 256 --vocab 512 -o $T/inf2b.fbir
  $first gen llama3.2-1b --inference --seq 512 --max-seq 2048 -o $T/llama_bins.fbir
  for entry in $BINS; do
    bin=${entry%%@*}; prof=$P; [ "$entry" = "$bin" ] || prof=${entry#*@}
    echo "== check decode, 2 layers, 256 positions, $bin, profile $prof" >> $N
    timeout 60 $bin run $T/inf2b.fbir --entry decode --target opencl --device $D --profile $prof --random-inputs 1 --runs 2 --check >> $N 2>&1; echo "rc=$?" >> $N
  done
  for round in $(seq 1 ${ROUNDS:-2}); do
    for p in ${POSITIONS:-2047}; do
      python3 tests/bench/scalar_i32.py pos $p > $T/pos.safetensors
      for entry in $BINS; do
        bin=${entry%%@*}; prof=$P; [ "$entry" = "$bin" ] || prof=${entry#*@}
        echo "=== bins decode pos=$p round $round $bin profile $prof" >> $N
        timeout 90 $bin bench $T/llama_bins.fbir --entry decode --device $D --profile $prof --inputs $T/pos.safetensors --repeat 10 >> $N 2>&1
      done
    done
  done
fi
want torch && timeout 120 python3 tests/bench/torch_ref.py > $O/torch.json 2>&1
# The SD 1.5 UNet (part unet, issue 17): its first down block (a ResNet and a transformer block
# at 64x64x320, batch 2, LoRA rank 8) forward + backward, fblayout against reuse and convert,
# against PyTorch eager FP32 (cuDNN, TF32 off) in the same call; the reduced training step and
# the block at 16x16 checked on the device first. Results: $O/unet.txt, $O/torch_unet.json.
if want unet; then
  U=$O/unet.txt
  $B gen sd1.5-down-block --training -o $T/sdblock.fbir
  $B gen sd1.5-down-block --training --latent 16 -o $T/sdblock16.fbir
  $B gen sd1.5-unet --training --levels 2 --res-blocks 1 --latent 16 --channels 64 --batch 1 -o $T/unet_small.fbir
  for f in sdblock16 unet_small; do
    echo "== $f" >> $C
    timeout 200 $B run $T/$f.fbir --entry loss_grad --target opencl --device $D --profile $P -O3 --random-inputs 1 --check >> $C 2>&1; echo "rc=$?" >> $C
  done
  for b in $B $OLD; do
    echo "=== sd1.5-down-block $b" >> $U
    timeout 300 $b bench $T/sdblock.fbir --entry loss_grad --device $D --profile $P --compare fblayout,reuse,convert --repeat 10 >> $U 2>&1
  done
  timeout 120 python3 tests/bench/torch_unet_block.py > $O/torch_unet.json 2>&1
fi
# Channel-packed textures (part nc4hw4, issue 17): four SD 1.5 UNet convolutions at batch 2
# (tests/bench/conv_layouts), each as -O3 lowers it (linear, the tiled implicit GEMM) and with
# input, weight and output in NC4HW4 textures at -O1 (the convolution as a direct kernel: a
# work-item per output texel of 4 channels). Each is checked against the interpreter at -O1
# where the interpreter is quick enough (conv_in, conv_out). Results: $O/nc4hw4.txt.
if want nc4hw4; then
  N4=$O/nc4hw4.txt
  for f in conv_in_nc4hw4 conv_out_nc4hw4; do
    echo "== $f" >> $C
    timeout 200 $B run tests/bench/conv_layouts/$f.fbir -O1 --target opencl --device $D --profile $P --random-inputs 1 --check >> $C 2>&1; echo "rc=$?" >> $C
  done
  for c in conv_in conv_mid conv_out conv_down; do
    echo "=== $c -O3" >> $N4
    timeout 120 $B bench tests/bench/conv_layouts/$c.fbir --device $D --profile $P --repeat 10 >> $N4 2>&1
    echo "=== $c nc4hw4 -O1" >> $N4
    timeout 120 $B bench tests/bench/conv_layouts/${c}_nc4hw4.fbir -O1 --device $D --profile $P --repeat 10 >> $N4 2>&1
  done
fi
# Weight streaming under a budget (part stream, issue 15): the 16-layer Llama 3.2-1B prefill of
# 512 tokens (f32, full vocabulary, 512 cache positions) unconstrained, then with
# --memory-budget a quarter of its f32 weights (the arguments of @prefill but the tokens, the
# position and the caches, summed from the .fbir). The goal: the budgeted run's launch span
# within 1.15x of max(its kernels' time, its transfer time). Results: $O/stream.txt.
if want stream; then
  S=$O/stream.txt
  $B gen llama3.2-1b --inference --seq 512 --max-seq 512 -o $T/pre16.fbir
  Q=$(python3 - $T/pre16.fbir <<'PY'
import re, sys
sig = next(l for l in open(sys.argv[1]) if "func.func @prefill(" in l)
total = 0
for name, dims in re.findall(r"%([\w.]+): tensor<([0-9x]+)xf32>", sig):
    if name.endswith("_cache") or name.startswith("rope_"):
        continue
    n = 1
    for d in dims.split("x"):
        n *= int(d)
    total += 4 * n
print(total // 4)
PY
)
  echo "budget $Q bytes (a quarter of the f32 weights)" >> $S
  echo "=== prefill (no budget)" >> $S
  timeout 250 $B bench $T/pre16.fbir --entry prefill --device $D --profile $P --repeat 3 >> $S 2>&1; echo "rc=$?" >> $S
  # The quarter, then STREAM_BUDGETS (default: the plan's minimum for this graph, measured in
  # session 10, and 2 GiB), by $B and, where set, $OLD in turn.
  # STREAM_JSON=1: $B's runs also write `fbc bench --json` (every launch's and upload's place
  # on the device's timeline) to $O/stream_BUDGET.json.
  for q in $Q ${STREAM_BUDGETS:-1351090176 2147483648}; do
    for b in $B $OLD; do
      echo "=== prefill --memory-budget $q $b" >> $S
      json=""; [ -n "${STREAM_JSON:-}" ] && [ $b = $B ] && json="--json"
      if [ -n "$json" ]; then
        timeout 250 $b bench $T/pre16.fbir --entry prefill --device $D --profile $P --repeat 3 --memory-budget $q --json > $O/stream_$q.json 2>> $S; echo "rc=$?" >> $S
        python3 -c "import json,sys; d=json.load(open(sys.argv[1])); r=d['runs'][0] if 'runs' in d else d; print(json.dumps(r.get('streaming', {}).get('overlap')))" $O/stream_$q.json >> $S 2>&1
      else
        timeout 250 $b bench $T/pre16.fbir --entry prefill --device $D --profile $P --repeat 3 --memory-budget $q >> $S 2>&1; echo "rc=$?" >> $S
      fi
    done
  done
fi
# Packed weights (part quant, issue 15): the 16-layer Llama 3.2-1B decode step (f32 cache of
# 2048 positions, full vocabulary) with f32, INT8 (groups of 64) and INT4 (groups of 64) linear
# weights, at position 2047, side by side; the packed products are tiled and skinny
# contractions that decode the bytes as they stage them. The goal: decode time drops with the
# weight bytes where decode is bandwidth-bound. Results: $O/quant.txt.
# QUANTS picks the schemes (default all three). With OLD set, each is benchmarked by $B and $OLD
# in turn. The packed kernels are checked on the
# device against the interpreter first (a one-layer model, small vocabulary; into $C).
if want quant; then
  Q=$O/quant.txt
  python3 tests/bench/scalar_i32.py pos 2047 > $T/pos.safetensors
  for q in ${QUANTS:-f32 int8 int4}; do
    qa=""; [ $q != f32 ] && qa="--quant $q --group 64"
    $B gen llama3.2-1b --inference --seq 512 --max-seq 2048 $qa -o $T/llama_$q.fbir
    if [ $q != f32 ]; then
      $B gen llama3.2-1b --inference --layers 1 --seq 16 --max-seq 64 --vocab 512 $qa -o $T/q1_$q.fbir
      for e in prefill decode; do
        echo "== quant $q $e" >> $C
        timeout 200 $B run $T/q1_$q.fbir --entry $e --target opencl --device $D --profile $P --random-inputs 1 --check >> $C 2>&1; echo "rc=$?" >> $C
      done
    fi
    for b in $B $OLD; do
      echo "=== decode $q $b" >> $Q
      timeout 240 $b bench $T/llama_$q.fbir --entry decode --device $D --profile $P --inputs $T/pos.safetensors --repeat 10 >> $Q 2>&1; echo "rc=$?" >> $Q
    done
  done
fi
# PyTorch's decode step with a static cache (issue 14's reference), at POSITIONS.
want torchdecode && timeout 200 python3 tests/bench/torch_decode.py ${POSITIONS:-2047 127} > $O/torch_decode.json 2>&1
# CLBlast 1.5.3 (issue 10), where tests/bench/clblast.sh built it into devbin/clblast: the
# matmul-fb products, the MHA C1 attention products (32 heads) and the LoRA products of
# lora_products.fbir, NAME:M:N:K:TA:TB[:BATCH], row-major. Results: $O/clblast.txt.
if want clblast && [ -x devbin/clblast/clblast_bench ]; then
  LD_LIBRARY_PATH=$PWD/devbin/clblast:$PWD/devbin timeout 200 devbin/clblast/clblast_bench $D 10 \
    mfb_fwd:512:8192:2048:0:0 mfb_dA:512:2048:8192:0:1 mfb_dB:2048:8192:512:1:0 \
    mha_c1_qk:512:512:64:0:1:32 mha_c1_pv:512:64:512:0:0:32 \
    xa_q:512:8:2048:0:0 xa_down:512:8:8192:0:0 dxa_q:512:8:2048:0:1 dxa_up:512:8:8192:0:1 \
    db_q:8:2048:512:1:0 da_q:2048:8:512:1:0 da_down:8192:8:512:1:0 > $O/clblast.txt 2>&1
fi
# A side-by-side of $B and $OLD (part ab): two alternated rounds of `fbc bench --compare
# fblayout,reuse` (AB_COMPARE names other strategies) on matmul-fb, the Llama training step at
# sequence 512, MHA C1 and C3 and the SD 1.5 down block, so that a kernel change is measured against the same call's noise (how
# the four-wide stores of the tiled contraction were measured); AB_GRAPHS narrows the graphs.
# Results: $O/ab.txt.
if want ab && [ -n "$OLD" ]; then
  [ -f $T/l512.fbir ] || $B gen llama3.2-1b --layers 1 --seq 512 --vocab 512 --lora-rank 8 --training -o $T/l512.fbir
  [ -f $T/sdblock.fbir ] || $B gen sd1.5-down-block --training -o $T/sdblock.fbir
  for round in 1 2; do
    for b in $B $OLD; do
      for g in ${AB_GRAPHS:-mfb l512 mha_c1 mha_c3 sdblock}; do
        e=""; case $g in l512|sdblock) e="--entry loss_grad" ;; esac
        echo "=== $g round $round $b" >> $O/ab.txt
        timeout 150 $b bench $T/$g.fbir $e --device $D --profile $P --compare ${AB_COMPARE:-fblayout,reuse} --repeat 10 >> $O/ab.txt 2>&1
      done
    done
  done
fi
echo done >> $C
# FBLayout must never lose to a baseline (issue 11): `fbc bench --compare` warns, and this
# script then fails, for the runs of $B (each `=== ...` header of bench.txt and unet.txt ends
# with the binary).
: > $O/losses.txt
for f in "$R" "$O/unet.txt"; do
  [ -e "$f" ] && awk -v b="$B" '/^=== /{cur=$NF} /fblayout is slower than/ && cur==b' "$f" >> $O/losses.txt
done
if [ -s $O/losses.txt ]; then echo "FBLayout is slower than a baseline:"; cat $O/losses.txt; exit 1; fi
