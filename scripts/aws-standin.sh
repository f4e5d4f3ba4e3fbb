#!/bin/sh
# EC2 stand-in: moto as the EC2 control plane, booted systemd-nspawn containers as instances,
# all inside one network namespace without a default route. Needs root. The same as
# `python3 -m xeoncluster.standin ...` (the package is installed with xeoncluster: scripts/install.sh).
#   aws-standin.sh start [--scale N] [--faults JSON]   start (safe to run twice)
#   aws-standin.sh run -- CMD ...                      CMD in the namespace, AWS_ENDPOINT_URL set
#   aws-standin.sh config                              path of a cluster.yaml for the stand-in
#   aws-standin.sh interrupt INSTANCE_ID [SECONDS]     spot interruption
#   aws-standin.sh faults [KEY=VALUE ...]              show/set fault and latency knobs
#   aws-standin.sh user NAME POLICY_JSON [BOUNDARY_JSON]  IAM user with exactly that policy; prints its keys
#   aws-standin.sh status | stop
set -eu
# -P: a `standin` folder in the current directory (another checkout) must not shadow the installed package.
exec "${PYTHON:-python3}" -P -m xeoncluster.standin "$@"
