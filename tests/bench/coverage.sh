#!/usr/bin/env bash
# Issue-4 figures: -O3 report per generated training graph (16+ layers, default sizes).
B=${B:-devbin/fbc}; T=${T:-/tmp/cov}; mkdir -p "$T"  # B: a release fbc; T: scratch folder
printf "%-24s %6s %6s %6s %6s %6s %8s %8s %8s\n" model ops total elim folded fallbk divm_bef divm_aft wall_s
for m in llama3.2-1b qwen2.5-1.5b gemma2-2b bert-large vit-large whisper-large-decoder; do
  $B gen $m --training --lora-rank 8 -o $T/$m.fbir 2>/dev/null || $B gen $m --training -o $T/$m.fbir || continue
  s=$(date +%s.%N)
  $B $T/$m.fbir -O3 --emit report -o $T/$m.json || { echo "$m FAILED"; continue; }
  e=$(date +%s.%N)
  python3 - "$m" "$T/$m.json" "$(echo "$e - $s" | bc)" <<'PY'
import json,sys
r=json.load(open(sys.argv[2])); t=r["transforms"]; d=r["divmod"]
print(f"{sys.argv[1]:24s} {r['ops']:6d} {t['total']:6d} {t['eliminated']:6d} {t.get('folded', -1):6d} {t['fallback']:6d} {d['before']:8d} {d['after']:8d} {float(sys.argv[3]):8.2f}")
PY
done
