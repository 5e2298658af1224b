#!/usr/bin/env bash
# The stored-verdict campaign: `nox -s bench` run after run in one clone, as a user runs it,
# on four kinds of code, each slowed run judged against a run of unchanged code saved at
# least 30 minutes earlier. Results: docs/measurements/2026-12-02-stored-verdicts.md.
#
#   scripts/campaign/stored_verdicts.sh setup CLONE            # a fresh clone and its branches
#   scripts/campaign/stored_verdicts.sh run CLONE KIND [REF]   # one run; REF: ledger index, or old
#   scripts/campaign/stored_verdicts.sh table CLONE            # one markdown row per run
#
# Kinds: X (main), Y (main plus one comment line), inj (main, every decode step 15% longer
# through llmbench's injector), Z (main plus scripts/campaign/slow_mlp.py as a root plugin).
# REF "old" is the newest X run saved at least 30 minutes before now; no REF: `latest`.
# The ledger is CLONE/campaign/ledger.tsv, each run's log CLONE/campaign/NN_KIND.log.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cmd=${1:?setup, run or table}
clone=${2:?the campaign clone}
G=(git -C "$clone" -c user.name=campaign -c user.email=campaign@example.invalid)

setup() {
    git clone -q "$here/../.." "$clone" || exit 1
    mkdir -p "$clone/campaign"
    "${G[@]}" checkout -q -b comment main
    printf '# (a comment added for the campaign: the code is unchanged)\n' >> "$clone/llmbench/engine/loop.py"
    "${G[@]}" commit -qam "comment only"
    "${G[@]}" checkout -q -b slowmlp main
    cp "$here/slow_mlp.py" "$clone/slow_mlp.py"
    sed -i 's/"fixtures.server",/"fixtures.server", "slow_mlp",/' "$clone/conftest.py"
    grep -q '"slow_mlp"' "$clone/conftest.py" || { echo "conftest.py: pytest_plugins not found"; exit 1; }
    "${G[@]}" add slow_mlp.py conftest.py
    "${G[@]}" commit -qm "every Llama MLP busy-waits 40% of its time (a plugin outside llmbench)"
    "${G[@]}" checkout -q main
    printf 'campaign/\n' >> "$clone/.git/info/exclude"
}

run() {
    local kind=${3:?X, Y, inj or Z} ref=${4:-} ledger="$clone/campaign/ledger.tsv" branch extra=()
    case $kind in
        X) branch=main;; Y) branch=comment;; Z) branch=slowmlp;;
        inj) branch=main; extra=(-p llmbench.bench.inject --slow-down=decode_step=0.15);;
        *) echo "unknown kind $kind"; exit 2;;
    esac
    touch "$ledger"
    local idx=$(( $(wc -l < "$ledger") + 1 )) against=
    if [ "$ref" = old ]; then
        against=$(awk -F'\t' -v now="$(date +%s)" '$2=="X" && now-$3-$6>=1800 {f=$4} END {print f}' "$ledger")
        [ -n "$against" ] || { echo "no X run saved 30 minutes ago"; exit 2; }
    elif [ -n "$ref" ]; then
        against=$(awk -F'\t' -v i="$ref" 'NR==i {print $4}' "$ledger")
    fi
    "${G[@]}" checkout -q "$branch" || exit 1
    local args=("${extra[@]}")
    [ -n "$against" ] && args+=("--compare-to=$against")
    local before start log
    before=$(cd "$clone" && ls baselines/*/*.json 2>/dev/null | sort)
    start=$(date +%s)
    log=$(printf '%s/campaign/%02d_%s.log' "$clone" "$idx" "$kind")
    (cd "$clone" && nox -s bench -- "${args[@]}") > "$log" 2>&1
    local rc=$? saved
    saved=$(comm -13 <(echo "$before") <(cd "$clone" && ls baselines/*/*.json | sort) | tail -1)
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$idx" "$kind" "$start" "$saved" "$rc" \
        "$(( $(date +%s) - start ))" "$against" >> "$ledger"
    "${G[@]}" checkout -q main
}

table() {
    python3 - "$clone/campaign" <<'PY'
import datetime, glob, os, re, sys
folder = sys.argv[1]
for line in open(os.path.join(folder, "ledger.tsv")):
    idx, kind, start, saved, rc, wall, against = line.rstrip("\n").split("\t")
    text = open(glob.glob(os.path.join(folder, f"{int(idx):02d}_*.log"))[0], errors="replace").read()
    verdicts = [v for v in text.splitlines()
                if re.match(r"^(SAME CODE|PASS|REGRESSION|NOT CONFIRMED|FAIL)", v)]
    regressions = sorted(set(re.findall(r"^(test_\S+)\s.*\bregression\b", text, flags=re.M)))
    when = datetime.datetime.fromtimestamp(int(start), datetime.timezone.utc).strftime("%H:%M")
    print(f"| {idx} | {kind} | {when} | {os.path.basename(against)[:4] or '-'} | "
          f"{int(wall) // 60} min {int(wall) % 60} s | {rc} | "
          f"{verdicts[-1] if verdicts else '?'} | {', '.join(regressions)} |")
PY
}

"$cmd" "$@"
