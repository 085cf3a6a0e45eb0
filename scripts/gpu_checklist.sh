#!/bin/bash
# docs/install.md's GPU checklist in one go, on a machine with CUDA, torch, numpy, pyarrow and
# pytest (no DGL needed), from the repository root. Packages the core needs beyond those
# (cmeel-metis, boto3, ...) come from wheels in $WHEELS when it is set (a machine with no
# package index), else they must be installed. Logs go to $OUT (default /tmp/gpu-checklist).
#   WHEELS=.whl OUT=/tmp/gpu bash scripts/gpu_checklist.sh
set -u -o pipefail
OUT=${OUT:-/tmp/gpu-checklist}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
if [ -n "${WHEELS:-}" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/gpu-checklist-site "$WHEELS"/*.whl || exit 2
  export PYTHONPATH=/tmp/gpu-checklist-site:$PYTHONPATH
fi
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  python3 -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__,
"cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version(), "gpus", torch.cuda.device_count())'
} 2>&1 | tee "$OUT/env.log"
CORE=$(make -s -f - print <<'MK'
include Makefile
print:
	@echo $(CORE_TESTS)
MK
)
rc=0
python3 -m pytest -p no:cacheprovider -m "not dgl" -v -rfE --timeout 150 $CORE >"$OUT/core.log" 2>&1 \
  || rc=1
tail -1 "$OUT/core.log"
grep -E "\[cuda\]|nccl" "$OUT/core.log" | head -20
torchrun --standalone --nproc-per-node 1 -m dglx_dist commcheck --backend nccl --payload-mb 64 \
  2>&1 | tee "$OUT/commcheck.log" | tail -1 || rc=1
torchrun --standalone --nproc-per-node 2 -m dglx_dist commcheck --backend gloo --device cuda \
  --payload-mb 64 2>&1 | tee -a "$OUT/commcheck.log" | tail -1 || rc=1
python3 scripts/bench_h2d.py --device cuda --batch 10000 100000 400000 --repeat 20 \
  2>&1 | tee "$OUT/h2d.log" | tail -5 || rc=1
exit $rc
