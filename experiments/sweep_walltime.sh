#!/usr/bin/env bash
# Wall time of a full mini_table1 sweep with kdbench's fast paths on (logits and features caches, length-grouped batches) and
# off, each from an empty cache (so both include the teacher's fine-tuning); about 45 minutes on 2 cores, alone.
# Writes the times to multirun/sweep_walltime/times.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
export KDBENCH_GLUE_DIR="${KDBENCH_GLUE_DIR:-../shared/data/glue}" KDBENCH_MODELS_DIR="${KDBENCH_MODELS_DIR:-../shared/data/models}"
out=multirun/sweep_walltime
mkdir -p "$out"
for variant in fast plain; do
  if [ "$variant" = fast ]; then on=true; else on=false; fi
  flags="trainer.cache_teacher_logits=$on trainer.cache_teacher_features=$on"
  flags="$flags stages.teacher.group_by_length=$on stages.intermediate.group_by_length=$on"
  flags="$flags stages.prediction.group_by_length=$on"
  rm -rf "$out/$variant" "$out/cache_$variant"
  start=$(date +%s)
  KDBENCH_CACHE="$out/cache_$variant" .venv/bin/python -m kdbench.run -m +experiment=mini_table1 $flags \
      hydra.sweep.dir="$out/$variant"
  echo "$variant: $(( $(date +%s) - start )) s ($flags)" | tee -a "$out/times.txt"
done
