#!/bin/bash
# One evalkit run as a Slurm job array: the array's first task runs shard 1, the next shard 2,
# ... (SLURM_ARRAY_TASK_ID minus SLURM_ARRAY_TASK_MIN, plus 1, so --array=1-4 works as well as
# 0-3; the count is SLURM_ARRAY_TASK_COUNT), into results/<run id>-shard-<n> on the shared
# filesystem.
#   sbatch docs/examples/slurm-array.sh
#   sbatch --dependency=afterok:<array job id> --wrap \
#     'evalkit merge eval-$RUN-shard-{1,2,3,4} --run-id eval-$RUN --results-dir results'
#SBATCH --job-name=evalkit
#SBATCH --array=0-3
#SBATCH --time=02:00:00
set -euo pipefail
RUN=${RUN:-$(date -u +%Y%m%d)}
shard=$((SLURM_ARRAY_TASK_ID - ${SLURM_ARRAY_TASK_MIN:-0} + 1))   # as --shard-from-env counts it
id="eval-$RUN-shard-$shard"
if [ -f "results/$id/config.json" ]; then   # requeued: finish what was started
  exec evalkit run --resume "$id" --results-dir results --quiet
fi
exec evalkit run --eval-set eval_set.jsonl --api-url "$EVAL_API_URL" --retrieval-only --quiet \
  --results-dir results --shard-from-env --run-id "$id"
