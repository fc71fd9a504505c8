#!/usr/bin/env bash
# The CPU-scale replicas of the paper's Tables 1 and 3 (about 1.5 hours on a 2-core CPU, alone).
set -euo pipefail
cd "$(dirname "$0")/.."
export KDBENCH_GLUE_DIR="${KDBENCH_GLUE_DIR:-../shared/data/glue}" KDBENCH_MODELS_DIR="${KDBENCH_MODELS_DIR:-../shared/data/models}"
make sweep-mini_table1 && make report-mini_table1
make sweep-mini_table3 && make report-mini_table3
