#!/usr/bin/env bash
# The README demo: install everything, start a 2-node local cluster, fine-tune SQuAD on offline data
# (a tiny BERT and synthetic questions built on the nodes), print the metrics, and remove the cluster.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
name=${XEONCLUSTER_DEMO_NAME:-demo}
trap 'xeoncluster down --name "$name"' EXIT
xeoncluster up --provider local --nodes 2 --name "$name"
xeoncluster exec --name "$name" -- hostname
xeoncluster train squad --name "$name" --demo
