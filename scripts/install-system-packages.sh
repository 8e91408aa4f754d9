#!/usr/bin/env bash
# Debian packages the project needs on the host: debootstrap (node image), FUSE headers and
# pkg-config (pyfuse3 builds from source), gcc (the clock preload library), chromium (headless,
# for the browser test of the HTML reports: tests/integration/test_browser.py). Installs only
# what is missing; needs root (as on these machines).
set -euo pipefail
PACKAGES=(debootstrap fuse3 libfuse3-dev pkg-config gcc iproute2 iptables procps chromium
          openjdk-17-jre-headless)  # Java 17: the Spark pipeline (results/pipeline/)
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
  echo "error: missing Debian packages (${missing[*]}); install them with: sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi
echo "installing Debian packages: ${missing[*]}"
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
