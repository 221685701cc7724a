#!/usr/bin/env bash
# A/B of two commits' code in one checkout (this machine favours one directory over another, so a
# second worktree biases the comparison): checks out BASE's and NEW's extraction/, store/ and
# worker/ alternately and runs pipeline_throughput.py with the remaining arguments after each.
#   bench/ab_same_checkout.sh a4128db HEAD 3 --events 1000 --concurrency 32 --workers 1
# Leaves NEW's files checked out; commit or stash your changes first.
set -euo pipefail
cd "$(dirname "$0")/.."
base=$1 new=$2 pairs=$3
shift 3
trap 'git checkout -q "$new" -- extraction store worker' EXIT
for _ in $(seq "$pairs"); do
    for commit in "$base" "$new"; do
        git checkout -q "$commit" -- extraction store worker
        printf '%s ' "$commit"
        .venv/bin/python bench/pipeline_throughput.py "$@" 2>&1 | grep 'conv/s (' | sed 's/.*conv\/s (/(/'
    done
done
