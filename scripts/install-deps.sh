#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 The memcuda Authors
# SPDX-License-Identifier: Apache-2.0

# Installs what memcuda builds and runs with, from Debian 12's packages. The CUDA Toolkit is not
# a Debian package here: it must already be installed under /usr/local/cuda (or CUDA_HOME).
set -euo pipefail

packages=(build-essential cmake pkg-config libhiredis-dev libcli11-dev nlohmann-json3-dev
          googletest libgtest-dev rapidjson-dev redis-server redis-tools redis-sentinel libucx-dev mandoc
          clang-format
          libvulkan-dev
          g++-mingw-w64-x86-64-posix clang-14 libclang-rt-14-dev
          python3-numpy python3-pytest python3-prometheus-client python3-venv python3-pip
          python3-setuptools python3-wheel mypy libseccomp-dev
          libsystemd0 systemd lintian)
sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}" >&2
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

cuda_home="${CUDA_HOME:-/usr/local/cuda}"
if [ ! -x "$cuda_home/bin/nvcc" ]; then
  echo "install-deps: error: no CUDA Toolkit at $cuda_home (nvcc not found); install CUDA 12.x/13.x" \
       "and set CUDA_HOME" >&2
  exit 69
fi
echo "install-deps: ok (CUDA $("$cuda_home/bin/nvcc" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p'))" >&2
