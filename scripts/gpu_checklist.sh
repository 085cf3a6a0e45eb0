#!/bin/bash
# docs/install.md's GPU checklist in one go, on a machine with CUDA, torch, numpy, pyarrow and
# pytest (no DGL needed), from the repository root: the environment, every strategy trained
# with --device cuda on the DGL-free path and an epoch timed beside the CPU
# (scripts/gpu_checklist.py), the GPU's speed-up at the model's math (dglx plan --measure),
# the comm layer's NCCL and gloo-on-CUDA exchanges, and with
# CORE=1 the DGL-free core's tests. Packages the core needs beyond those (cmeel-metis, ...)
# come from wheels in $WHEELS when it is set (a machine with no package index), else they must
# be installed. Logs go to $OUT (default /tmp/gpu-checklist). About 6 minutes on one H100.
#   WHEELS=.whl OUT=/tmp/gpu bash scripts/gpu_checklist.sh
#   DEVICE=cpu bash scripts/gpu_checklist.sh            # the same list on the CPU (a dry run)
set -u -o pipefail
OUT=${OUT:-/tmp/gpu-checklist}
DEVICE=${DEVICE:-cuda}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
if [ -n "${WHEELS:-}" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/gpu-checklist-site "$WHEELS"/*.whl || exit 2
  export PYTHONPATH=/tmp/gpu-checklist-site:$PYTHONPATH
fi
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  python3 -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__,
"cuda", torch.version.cuda, "gpus", torch.cuda.device_count())
import importlib.util; print("dgl importable:", importlib.util.find_spec("dgl") is not None)'
} 2>&1 | tee "$OUT/env.log"
rc=0
python3 scripts/gpu_checklist.py --device "$DEVICE" --out "$OUT" ${CHECKLIST_ARGS:-} \
  2>&1 | tee "$OUT/checklist.md" || rc=1
if [ "$DEVICE" != cpu ]; then
  # the GPU's speed-up at the model's math that --strategy auto plans GPU ranks with (cached
  # under $OUT, not in the machine's ~/.cache)
  XDG_CACHE_HOME="$OUT/cache" python3 -m dglx_dist plan --measure --nodes 100000 \
    --edges 1000000 2>&1 | grep -i "measured here" | tee "$OUT/plan-measure.log" || rc=1
  torchrun --standalone --nproc-per-node 1 -m dglx_dist commcheck --backend nccl \
    --payload-mb 64 2>&1 | tee "$OUT/commcheck.log" | tail -1 || rc=1
  torchrun --standalone --nproc-per-node 2 -m dglx_dist commcheck --backend gloo \
    --device cuda --payload-mb 64 2>&1 | tee -a "$OUT/commcheck.log" | tail -1 || rc=1
fi
if [ -n "${CORE:-}" ]; then
  CORE_LIST=$(make -s -f - print <<'MK'
include Makefile
print:
	@echo $(CORE_TESTS)
MK
)
  python3 -m pytest -p no:cacheprovider -m "not dgl" -q -rfE --timeout 150 $CORE_LIST \
    >"$OUT/core.log" 2>&1 || rc=1
  tail -1 "$OUT/core.log"
fi
exit $rc
