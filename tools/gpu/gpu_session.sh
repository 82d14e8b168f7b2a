#!/bin/bash
# One lent-GPU call for the recipe screen and Sec. 8 (docs/training.md, 'The recipe screen'):
#     bash tools/gpu/gpu_session.sh LIMIT_S RUN...
# LIMIT_S is the call's own timeout; RUN as tools/gpu/gpu_runs.py takes them, highest priority first;
# a run of the preset sec8 (24,000 steps) is dropped where the graphed step fails its test, as
# eager steps cannot end it in one call. Everything it says goes to $OUT/setup.log too.
# DEMO_MATRIX=CPUS (a taskset list, e.g. 10-15) runs tools/maintenance/demo_matrix.py on those of
# the host's cores beside the runs, its cells at once, resumed by the next call on a warm machine;
# its records and table come back in $OUT/demo-matrix.
#
# CUDA's MPS daemon is started where the driver has one and a client works under it: the runs'
# graphed steps are chains of tiny kernels, which without it the GPU time-slices between the
# processes (two eager runs at once made 14% more steps than one), and with it runs side by side.
LIMIT=$1; shift
export PYTHONUNBUFFERED=1 PYTHONPATH=src
log() { echo "[$SECONDS s] $*" | tee -a "$OUT/setup.log"; }
nvidia-smi -L | tee -a "$OUT/setup.log"
log "$(python3 -c 'import torch; print(torch.__version__, torch.cuda.get_device_name())' 2>&1)"
mps_off() { echo quit | nvidia-cuda-mps-control >/dev/null 2>&1; unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY; log "MPS off"; }
if command -v nvidia-cuda-mps-control >/dev/null; then
  export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log
  mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY
  if nvidia-cuda-mps-control -d && timeout 60 python3 -c "import torch; assert torch.ones(4, device='cuda').sum().item() == 4"; then
    log "MPS on"
  else
    mps_off
  fi
else
  log "no MPS daemon on this driver"
fi
graph_test() { timeout 180 python3 -m pytest -q -x -p no:cacheprovider tests/test_cuda_graph.py 2>&1 | tail -4 | tee -a "$OUT/setup.log"; return ${PIPESTATUS[0]}; }
G=--cuda-graph
if [ -n "${GRAPH_TESTED:-}" ]; then log "graph test passed earlier on this image: not run again"
elif ! graph_test; then
  if [ -n "${CUDA_MPS_PIPE_DIRECTORY:-}" ]; then mps_off; graph_test || G=; else G=; fi
fi
RUNS=()
# Eager, sec9 makes about 23 steps/s in all however many run at once: two runs can end.
for r in "$@"; do
  if [[ -z "$G" && ( $r == sec8:* || ${#RUNS[@]} -ge 2 ) ]]; then log "dropped $r: eager steps cannot end it"; else RUNS+=("$r"); fi
done
# A fresh folder per call, except for runs in pieces, which the next call resumes from /tmp/gpu-runs
# (a folder left by an earlier call with other settings is refused, not resumed).
[ -z "${SCREEN_ROOT:-}" ] && { [ -n "${PIECES:-}" ] && export SCREEN_ROOT=/tmp/gpu-runs || export SCREEN_ROOT=/tmp/gpu-runs-$(date +%s); }
DEADLINE=$(( LIMIT - SECONDS - 45 ))  # the archive, the exports and the transfer back
log "graph flag '${G}'; runs ${RUNS[*]} in $SCREEN_ROOT; deadline ${DEADLINE}s from now"
if [ -n "${DEMO_MATRIX:-}" ]; then
  if python3 -c 'import jinja2, matplotlib, rich, safetensors, typer' 2>>"$OUT/setup.log"; then
    setsid taskset -c "$DEMO_MATRIX" nice -n 10 python3 tools/maintenance/demo_matrix.py /tmp/demo-matrix --parallel \
      >>"$OUT/demo-matrix.log" 2>&1 & MATRIX=$!
    log "demo matrix on cores $DEMO_MATRIX (pid $MATRIX)"
  else
    log "demo matrix not started: a package it needs is missing (setup.log)"
  fi
fi
SCREEN_EXTRA="$G" python3 tools/gpu/gpu_runs.py "$OUT" "$DEADLINE" "${RUNS[@]}"
log "done: $(tail -1 "$OUT/driver.log")"
if [ -n "${MATRIX:-}" ]; then
  # Stopped with the runs (a rerun resumes its folders); what finished comes back.
  kill -- -"$MATRIX" 2>/dev/null && log "demo matrix stopped" || log "demo matrix ended: $(tail -1 "$OUT/demo-matrix.log")"
  mkdir -p "$OUT/demo-matrix" && cp /tmp/demo-matrix/*.json /tmp/demo-matrix/*.md /tmp/demo-matrix/*.log "$OUT/demo-matrix/" 2>/dev/null
fi
[ -n "${CUDA_MPS_PIPE_DIRECTORY:-}" ] && mps_off
nvidia-smi --query-gpu=name,memory.used --format=csv | tee -a "$OUT/setup.log"
