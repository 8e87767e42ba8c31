#!/usr/bin/env bash
# One borrowed GPU (the device tool: ~15 minutes of device time, one shot): the speed sections, then the parity
# checks, under a time limit, every figure written under $OUT as soon as its section ends (gpu_speed.json, and the
# log). Run from the repository root on the device machine:
#
#     bash benchmarks/gpu_lease.sh                       # run with carry [".whl"] and a timeout of ~570 s
#     bash benchmarks/gpu_lease.sh --pairs 320 --passages 10000   # with less device time left
#
# A stock PyTorch image lacks lmdb (berds' passage store, which the TART parity check imports): wheels in $WHEELS
# (default .whl/, carried along; docs/benchmarks.md says how to fetch them) are installed first, into a folder of
# their own. SECTIONS and TIME_LIMIT (seconds, default 420) override the defaults; other arguments go to
# benchmarks/gpu_check.py.
set -uo pipefail
out="${OUT:-.}"
wheels="${WHEELS:-.whl}"
if compgen -G "$wheels/*.whl" >/dev/null; then
    site="$(mktemp -d)"
    if python3 -m pip install -q --no-index --no-deps --no-compile --target "$site" "$wheels"/*.whl; then
        export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
        echo "wheels from $wheels installed into $site for this run: $(ls "$wheels" | tr '\n' ' ')"
    fi
fi
if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=name,memory.total,memory.used --format=csv
fi
PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 python3 benchmarks/gpu_check.py --sections "${SECTIONS:-judge,train,dense,parity}" \
    --time-limit "${TIME_LIMIT:-420}" --out "$out/gpu_speed.json" "$@" 2>&1 | tee "$out/gpu_check.log"
