#!/usr/bin/env bash
# Task-agnostic distillation at CPU scale: MiniLM-L6 -> random 3x384 student with att_mse for 300 steps on the
# shared Wikipedia sample, then the fine-tuning grid on RTE and MRPC (500-example subsets, 1 epoch), then the
# report (a Table-2-style table).
set -euo pipefail
cd "$(dirname "$0")/.."
export KDBENCH_GLUE_DIR="${KDBENCH_GLUE_DIR:-../shared/data/glue}" KDBENCH_MODELS_DIR="${KDBENCH_MODELS_DIR:-../shared/data/models}"
CORPUS="${KDBENCH_CORPUS:-../shared/data/corpus/enwiki-wikiextractor-sample}"
PY=.venv/bin/python
$PY -m kdbench.run setting=task_agnostic teacher=minilm_l6 student=3x384 init=random objective=att_mse \
  corpus.path="$CORPUS" trainer.max_steps=300 trainer.batch_size=32 trainer.device_batch_size=32 \
  trainer.eval_every=100 trainer.heldout_batches=8 paths.run_dir=runs/agnostic_demo/agnostic_att_mse
$PY -m kdbench.run -m +experiment=finetune_grid setting.student_path=runs/agnostic_demo/agnostic_att_mse/student \
  task=rte,mrpc data.train_limit=500 trainer.stage2_epochs=1 hydra.sweep.dir=runs/agnostic_demo/finetune_grid
$PY -m kdbench.report runs/agnostic_demo --out results/agnostic_demo
