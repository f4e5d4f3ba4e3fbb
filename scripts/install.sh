#!/usr/bin/env bash
# Installs what xeoncluster, its local provider and its tests need on Debian 12 / Ubuntu 24.04 (as root):
# sshd and iproute2 for namespace nodes, tcmalloc/numactl/python3-venv that the node playbooks check
# for, mmdebstrap/systemd-nspawn/apt-ftparchive for the EC2 stand-in, then the package itself with the
# training stack and the test tools.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" -ne 0 ]; then
    echo "scripts/install.sh: run as root (the local provider creates network namespaces and mounts)" >&2
    exit 2
fi
export DEBIAN_FRONTEND=noninteractive
echo "==> OS packages"
apt-get update -qq
apt-get install -y -qq --no-install-recommends \
    openssh-server openssh-client iproute2 util-linux procps tar ca-certificates nftables \
    libgoogle-perftools4 numactl python3 python3-venv \
    mmdebstrap systemd-container apt-utils dpkg-dev >/dev/null
echo "==> python packages (xeoncluster[dev,train])"
python3 -m pip install --quiet --disable-pip-version-check -e '.[dev,train]'
echo "==> installed: $(xeoncluster --help >/dev/null && echo xeoncluster ok)"
