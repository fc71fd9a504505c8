#!/usr/bin/env bash
# Does group_by_length in the distillation stages change the scores? mini_table1 (nine objectives, seeds 1-4) with length-grouped
# batches and without, paired by objective and seed (experiments/setting_effect.py) into
# results/group_by_length.md. Both arms share one fine-tuned teacher (trained on plain batches): the setting
# changes the stages' batches only.
# About 80 minutes on 2 cores with one thread per process.
set -euo pipefail
cd "$(dirname "$0")/.."
export KDBENCH_GLUE_DIR="${KDBENCH_GLUE_DIR:-../shared/data/glue}" KDBENCH_MODELS_DIR="${KDBENCH_MODELS_DIR:-../shared/data/models}"
for grouped in true false; do
  .venv/bin/python -m kdbench.run -m +experiment=mini_table1 stages.intermediate.group_by_length=$grouped \
      stages.prediction.group_by_length=$grouped stages.teacher.group_by_length=false \
      hydra.sweep.dir=multirun/group_by_length_$grouped
done
.venv/bin/python experiments/setting_effect.py multirun/group_by_length_true multirun/group_by_length_false \
    --names grouped plain --out results/group_by_length.md
