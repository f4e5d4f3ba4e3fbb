"""The EC2 stand-in: moto as the control plane, booted systemd-nspawn containers as instances.

Run it with scripts/aws-standin.sh (a thin wrapper around `python -m xeoncluster.standin`)."""
