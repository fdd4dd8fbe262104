#!/usr/bin/env bash
# One-time set-up on a fresh Debian machine (also run by CI): system packages weft's tests and the
# Node host need (Chromium with SwiftShader, Firefox ESR, the Vulkan loader, Mesa 25's lavapipe), then the exact
# npm dependencies from the lock file. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
[ -x /usr/bin/chromium ] || missing+=(chromium)
# Firefox ESR: the browser tests run weft's engine worker in Firefox's own WebGPU (wgpu) on lavapipe.
[ -x /usr/bin/firefox-esr ] || missing+=(firefox-esr)
# Vulkan loader for Dawn in Node (Chromium ships its own).
ldconfig -p 2>/dev/null | grep -q 'libvulkan.so.1 ' || missing+=(libvulkan1)
# Mesa's lavapipe, the second CPU Vulkan driver (shader-f16, subgroups of 8): the test suite runs the
# kernels' GPU forms end to end on it in Node. Dawn needs Mesa 25 (bookworm-backports): bookworm's
# own 22.3 is refused ("Vulkan shaderUniform*ArrayDynamicIndexing required").
LAVAPIPE_ICD=/usr/share/vulkan/icd.d/lvp_icd.json
lavapipe_ok() {
  [ -f "$LAVAPIPE_ICD" ] && dpkg-query -W -f='${Version}' mesa-vulkan-drivers 2>/dev/null | grep -Eq '^(2[5-9]|[3-9][0-9])\.'
}
need_root() {
  if [ "$(id -u)" -ne 0 ]; then
    echo "setup: need Debian packages: $* (run as root, or: sudo apt-get install $*)" >&2
    exit 1
  fi
}
if [ ${#missing[@]} -gt 0 ]; then
  need_root "${missing[*]}"
  echo "setup: installing ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
if ! lavapipe_ok; then
  need_root "mesa-vulkan-drivers (from bookworm-backports)"
  echo "setup: installing Mesa 25's lavapipe (mesa-vulkan-drivers from bookworm-backports)"
  if ! grep -rqs 'bookworm-backports' /etc/apt/sources.list /etc/apt/sources.list.d/; then
    cat >/etc/apt/sources.list.d/weft-bookworm-backports.sources <<'SOURCES'
Types: deb
URIs: http://deb.debian.org/debian
Suites: bookworm-backports
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SOURCES
  fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends -t bookworm-backports \
    mesa-vulkan-drivers >/dev/null
  lavapipe_ok || {
    echo "setup: lavapipe (Mesa >= 25) is still missing after the install: $LAVAPIPE_ICD" >&2
    exit 1
  }
fi

# npm ci only when the installed tree is missing or older than the lock file.
if [ ! -f node_modules/.package-lock.json ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  npm ci --no-audit --no-fund
fi

# Dawn for Node ships its binary inside the npm package; npm 11 blocks install scripts unless
# approved (package.json allowScripts approves webgpu), so check the binary is really there.
if [ ! -f node_modules/webgpu/dist/linux-x64/dawn.node ]; then
  npm rebuild webgpu
fi
test -f node_modules/webgpu/dist/linux-x64/dawn.node || {
  echo "setup: node_modules/webgpu/dist/linux-x64/dawn.node is missing" >&2
  exit 1
}
node scripts/gen-shaders.mjs
node scripts/gen-xgrammar.mjs
