#!/usr/bin/env bash
# One-time set-up on a fresh Debian machine (also run by CI): system packages weft's tests and the
# Node host need, then the exact npm dependencies from the lock file. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
[ -x /usr/bin/chromium ] || missing+=(chromium)
# Vulkan loader for Dawn in Node (Chromium ships its own).
ldconfig -p 2>/dev/null | grep -q 'libvulkan.so.1 ' || missing+=(libvulkan1)
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "setup: need Debian packages: ${missing[*]} (run as root, or: sudo apt-get install ${missing[*]})" >&2
    exit 1
  fi
  echo "setup: installing ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
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
