#!/usr/bin/env bash
# The prepared GPU check: everything a short loan of a GPU host needs, decided here.
#
#   scripts/gpu_check.sh prepare [--dry-run]      here, with llmbench installed: fill .gpu-check/
#   scripts/gpu_check.sh run [--dry-run] [--out DIR]   there: the check itself, within 8 minutes
#
# The GPU host has torch, transformers, pytest, pytest-benchmark, scipy, httpx, numpy,
# matplotlib, jinja2 and accelerate, reaches no package index, and takes 64 MiB with the tree.
# `prepare` downloads, into the ignored folder .gpu-check/, the wheels it lacks (CPython 3.12,
# manylinux x86_64; the versions installed here, so the set is one that works together) and the
# converted SmolLM2 tokenizer the tiny model uses (the GGUF package it comes from is larger
# than a run may carry). `run` installs the wheels into a temporary folder, puts the tree on
# the import path and, one stage after another, each with its time and exit code in
# summary.txt:
#   tests   the library's device tests, unmocked where a GPU is present (tests/test_cuda.py)
#   suite   the quick suite on the tiny model on the GPU: the run JSON and a table of TTFT,
#           ms per token and each case's peak memory
#   smollm2 the quick suite's prefill and decode on smollm2-135m in bfloat16, where its
#           weights are on the machine (said plainly where they are not)
#   ab      a paired A/A of one commit (`llmbench ab HEAD --budget 2m -- -k decode`)
# all written into one folder (DIR, else $OUT, else .gpu-check/out), at most 8 files.
# `--dry-run` does the same on the CPU with CUDA hidden, for the local Python, on a few
# benchmarks and a shorter A/A: CI runs it (`nox -s tests`) so the check cannot rot between
# loans.
set -uo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)
HERE=.gpu-check
# What the GPU host lacks that llmbench imports (its image lists the rest).
PACKAGES=(fastapi starlette pydantic pydantic-core annotated-types typing-inspection uvicorn
          gguf ruptures httpx-sse)
CARRY_LIMIT_MIB=64
PYTHON=${PYTHON:-python3}

die() { echo "gpu_check: $*" >&2; exit 2; }

prepare() {
    local dry=$1 wheels=$HERE/wheels
    [ "$dry" = 1 ] && wheels=$HERE/dry-run/wheels
    "$PYTHON" -c "import llmbench" 2>/dev/null ||
        die "prepare needs llmbench installed in $PYTHON (pip install -e .)"
    rm -rf "$wheels" && mkdir -p "$wheels" "$HERE/cache"
    local specs
    specs=$("$PYTHON" - "${PACKAGES[@]}" <<'EOF'
import importlib.metadata as md, sys
missing = []
for name in sys.argv[1:]:
    try:
        print(f"{name}=={md.version(name)}")
    except md.PackageNotFoundError:
        missing.append(name)
if missing:
    sys.exit(f"gpu_check: not installed here, so no version to match: {' '.join(missing)}")
EOF
    ) || exit 2
    local platform=()
    if [ "$dry" = 0 ]; then
        platform=(--python-version 3.12 --implementation cp)
        for tag in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 \
                   manylinux2014_x86_64 manylinux1_x86_64; do
            platform+=(--platform "$tag")
        done
    fi
    # shellcheck disable=SC2086
    "$PYTHON" -m pip download -q --no-deps --only-binary=:all: "${platform[@]}" -d "$wheels" \
        $specs || die "pip download failed: is PyPI reachable from here?"
    # The tiny model's tokenizer, converted from SmolLM2's GGUF (converted first if need be).
    local entry
    entry=$("$PYTHON" -c "from llmbench.engine.gguf import converted_gguf
print(converted_gguf(with_weights=False)[0])") || die "cannot convert SmolLM2's tokenizer"
    rm -rf "$HERE/cache" && mkdir -p "$HERE/cache" && cp -a "$entry" "$HERE/cache/"
    echo "$HERE holds:"
    (cd "$HERE" && find wheels dry-run/wheels cache -maxdepth 1 -mindepth 1 2>/dev/null |
        xargs -r du -sh)
    local total gguf
    total=$(du -sm --total "$wheels" "$HERE/cache" | tail -1 | cut -f1)
    echo "to carry: ${total} MiB (+ the tree) of the ${CARRY_LIMIT_MIB} MiB a run takes"
    gguf=$("$PYTHON" -c "from llmbench.engine.gguf import shipped_gguf_path as p
import os; print(os.path.getsize(p()) >> 20)" 2>/dev/null || echo "?")
    echo "smollm2-135m: its GGUF is ${gguf} MiB, over what a run carries: the smollm2 stage" \
         "runs only where the weights are already on the machine"
    [ "$dry" = 0 ] && echo "device run: carry [\"$HERE\"], command: scripts/gpu_check.sh run --out \$OUT"
    return 0
}

SUMMARY=""
stage() {  # stage NAME SECONDS COMMAND...: run it, log it, time it
    local name=$1 limit=$2 started rc
    shift 2
    started=$(date +%s.%N)
    echo "== $name (at most ${limit} s): $*" | tee -a "$SUMMARY"
    timeout --kill-after=10 "$limit" "$@" >"$OUTDIR/$name.log" 2>&1
    rc=$?
    local took
    took=$(awk "BEGIN {printf \"%.0f\", $(date +%s.%N) - $started}")
    echo "$name: exit $rc in ${took} s$([ $rc = 124 ] && echo ' (over its time)')" | tee -a "$SUMMARY"
    tail -n 3 "$OUTDIR/$name.log" | sed 's/^/    /' | tee -a "$SUMMARY"
    FAILED=$((FAILED + (rc != 0)))
    return 0
}

case_table() {  # the run's cases: median, TTFT, ms per token, own peak memory
    "$PYTHON" - "$1" <<'EOF'
import json, sys
run = json.load(open(sys.argv[1]))
env = run["llmbench"]["environment"]
print(f"{env['device_name']}, {env['model']} {env['dtype']}, torch {env['versions'].get('torch')}")
print(f"{'benchmark':58} {'median ms':>10} {'TTFT ms':>8} {'ms/token':>9} {'peak MiB':>9}")
for b in run["benchmarks"]:
    x = b["extra_info"]
    peak = x.get("peak_memory_bytes")
    cell = lambda v, f: (f % v) if isinstance(v, (int, float)) else "-"
    print(f"{b['name'][:58]:58} {b['stats']['median'] * 1000:10.2f} {cell(x.get('ttft_ms'), '%.2f'):>8}"
          f" {cell(x.get('ms_per_token'), '%.3f'):>9} {cell(peak and peak / 2**20, '%.0f'):>9}")
EOF
}

run_check() {
    local dry=$1 out=$2 device=cuda budget=2m wheels=$HERE/wheels selection=()
    if [ "$dry" = 1 ]; then
        # Every stage, on a selection small enough for CI: the script is what is checked.
        device=cpu budget=30s wheels=$HERE/dry-run/wheels
        selection=(-k "test_prefill or test_decode_steps or test_server_generate" --rounds=3)
        export CUDA_VISIBLE_DEVICES=""
    fi
    [ -d "$wheels" ] && [ -d "$HERE/cache" ] ||
        die "$wheels or $HERE/cache is missing: run scripts/gpu_check.sh prepare$([ "$dry" = 1 ] && echo ' --dry-run') first"
    OUTDIR=$(realpath -m "${out:-${OUT:-$HERE/out}}")
    mkdir -p "$OUTDIR"
    SUMMARY=$OUTDIR/summary.txt
    : >"$SUMMARY"
    FAILED=0
    local tmp
    tmp=$(mktemp -d)
    trap "rm -rf '$tmp'" EXIT
    "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target "$tmp/site" "$wheels"/*.whl || die "installing the carried wheels failed"
    export PYTHONPATH="$REPO:$tmp/site${PYTHONPATH:+:$PYTHONPATH}"
    export LLMBENCH_CACHE=$tmp/cache HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
    cp -a "$HERE/cache" "$LLMBENCH_CACHE"
    {
        echo "gpu_check run$([ "$dry" = 1 ] && echo ' --dry-run (CUDA hidden)') on $(uname -n)," \
             "$(date -u +%FT%TZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo '(no git)')"
        "$PYTHON" -c "import torch, transformers, llmbench
print('torch', torch.__version__, '| transformers', transformers.__version__, '| cuda available:',
      torch.cuda.is_available(), '|', torch.cuda.get_device_name() if torch.cuda.is_available() else 'cpu')"
    } | tee -a "$SUMMARY"
    if command -v nvidia-smi >/dev/null && [ "$dry" = 0 ]; then
        nvidia-smi -q >"$OUTDIR/nvidia-smi.txt" 2>&1
    else
        echo "no nvidia-smi query: $([ "$dry" = 1 ] && echo 'a dry run' || echo 'not installed')" \
            >"$OUTDIR/nvidia-smi.txt"
    fi

    stage tests 90 "$PYTHON" -m pytest -q -p no:cacheprovider -rs tests/test_cuda.py \
        tests/test_device.py tests/test_cpu_features.py

    local saved=$tmp/saved.txt
    stage suite 240 "$PYTHON" -m pytest benchmarks --benchmark-only -p no:cacheprovider \
        --model tiny --device "$device" "--baseline-dir=$tmp/baselines" "--saved-path-file=$saved" \
        "${selection[@]}"
    if [ -s "$saved" ]; then
        cp "$(cat "$saved")" "$OUTDIR/run-tiny.json"
        case_table "$OUTDIR/run-tiny.json" >>"$SUMMARY" 2>&1
    fi

    if [ "$dry" = 1 ]; then
        echo "smollm2: skipped in a dry run (its bfloat16 runs on a GPU)" | tee -a "$SUMMARY"
    elif "$PYTHON" -c "from llmbench.engine.gguf import converted_gguf; converted_gguf(True)" \
            >/dev/null 2>&1; then
        stage smollm2 120 "$PYTHON" -m pytest benchmarks --benchmark-only -p no:cacheprovider \
            --model smollm2-135m --device cuda --dtype bfloat16 --no-save \
            -k "test_prefill or test_decode_steps"
    else
        echo "smollm2: not run: its weights are not on this machine (the GGUF package is" \
             "larger than a run carries)" | tee -a "$SUMMARY"
    fi

    # The A/A needs a git checkout; the tree that travels may have none, so one commit of it
    # is made in a scratch repository, and its HEAD is paired against its own working tree.
    local repo=$tmp/repo
    mkdir -p "$repo"
    tar -C "$REPO" --exclude=./.git --exclude="./$HERE" --exclude=./.nox --exclude=./baselines \
        --exclude=./reports -cf - . | tar -C "$repo" -xf -
    if git -C "$repo" init -q && git -C "$repo" add -A &&
            git -C "$repo" -c user.name=gpu-check -c user.email=gpu-check@localhost \
                commit -q -m "gpu check tree"; then
        (cd "$repo" && export PYTHONPATH="$repo:$tmp/site" &&
            stage ab 150 "$PYTHON" -m llmbench ab HEAD --budget "$budget" --keep "$tmp/ab" \
                -- --model tiny --device "$device" -k decode)
        [ -f "$tmp/ab/pairing.json" ] && cp "$tmp/ab/pairing.json" "$OUTDIR/ab-pairing.json"
        FAILED=$((FAILED + $(grep -c '^ab: exit [1-9]' "$SUMMARY")))
    else
        echo "ab: not run: git cannot make a scratch repository here" | tee -a "$SUMMARY"
        FAILED=$((FAILED + 1))
    fi
    echo "gpu_check: $FAILED stage(s) failed; everything is in $OUTDIR" | tee -a "$SUMMARY"
    [ "$FAILED" = 0 ]
}

command=${1:-}
shift || true
dry=0 out=""
while [ $# -gt 0 ]; do
    case $1 in
        --dry-run) dry=1 ;;
        --out) out=${2:?--out needs a folder}; shift ;;
        --out=*) out=${1#--out=} ;;
        *) die "unknown option $1: see the top of $0" ;;
    esac
    shift
done
case $command in
    prepare) prepare "$dry" ;;
    run) run_check "$dry" "$out" ;;
    *) die "usage: $0 prepare|run [--dry-run] [--out DIR]" ;;
esac
