#!/usr/bin/env bash
# The CPU-scale replicas of the paper's Tables 1, 3 and 2, each from nothing to its report in results/NAME
# (the distillations, the fine-tuning grid of mini_table2, the report with --paper and claims.md). Measured wall
# times and designs: results/NAME/README.md.
set -euo pipefail
cd "$(dirname "$0")/.."
export KDBENCH_GLUE_DIR="${KDBENCH_GLUE_DIR:-../shared/data/glue}" KDBENCH_MODELS_DIR="${KDBENCH_MODELS_DIR:-../shared/data/models}"
export KDBENCH_CORPUS="${KDBENCH_CORPUS:-../shared/data/corpus/enwiki-wikiextractor-sample}"
make study-mini_table1
make study-mini_table3
make study-mini_table2
