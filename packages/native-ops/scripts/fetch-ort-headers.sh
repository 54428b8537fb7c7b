#!/usr/bin/env bash
# Fetches the ONNX Runtime C API headers at build time from Debian's
# libonnxruntime-dev (the next release after the host's), without touching the
# system: apt runs with a private sources list, state and cache under build/.
# Output: build/ort-headers/usr/include/onnxruntime/onnxruntime_c_api.h, ...
# Nothing is installed and no header is ever committed.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$here/build"
dest="$build/ort-headers"
header="$dest/usr/include/onnxruntime/onnxruntime_c_api.h"
suite="${ULYSSES_ORT_HEADERS_SUITE:-trixie}"

if [[ -f "$header" ]]; then
  echo "fetch-ort-headers: already present at $dest"
  exit 0
fi

# A prepared headers folder (e.g. from an offline cache) may be named instead.
if [[ -n "${ULYSSES_ORT_INCLUDE_DIR:-}" ]]; then
  echo "fetch-ort-headers: using ULYSSES_ORT_INCLUDE_DIR=$ULYSSES_ORT_INCLUDE_DIR"
  exit 0
fi

command -v apt-get >/dev/null || { echo "fetch-ort-headers: apt-get not found; set ULYSSES_ORT_INCLUDE_DIR to a folder holding onnxruntime_c_api.h" >&2; exit 1; }

# The Debian mirror this machine already uses (deb822 or one-line format).
mirror=""
for f in /etc/apt/sources.list.d/*.sources /etc/apt/sources.list.d/*.list /etc/apt/sources.list; do
  [[ -f "$f" ]] || continue
  mirror="$(grep -hoE '(URIs:[[:space:]]*|^deb[[:space:]]+(\[[^]]*\][[:space:]]+)?)https?://[^[:space:]]*/debian/?([[:space:]]|$)' "$f" \
    | grep -oE 'https?://[^[:space:]]*/debian/?' | grep -v security | head -n1 || true)"
  [[ -n "$mirror" ]] && break
done
mirror="${mirror%/}"
if [[ -z "$mirror" ]]; then
  echo "fetch-ort-headers: no Debian mirror found in /etc/apt; set ULYSSES_ORT_INCLUDE_DIR instead" >&2
  exit 1
fi

apt_dir="$build/apt"
mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial" "$apt_dir/debs"
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
signed=""
[[ -f "$keyring" ]] && signed="signed-by=$keyring"
echo "deb [${signed}] $mirror $suite main" > "$apt_dir/sources.list"

apt_opts=(
  -o "Dir::Etc::SourceList=$apt_dir/sources.list"
  -o "Dir::Etc::SourceParts=-"
  -o "Dir::State::Lists=$apt_dir/lists"
  -o "Dir::Cache=$apt_dir/cache"
  -o "Dir::State::status=/dev/null"
  -o "Debug::NoLocking=1"
  -o "APT::Sandbox::User=root"
  -o "Acquire::Retries=1"
  -o "Acquire::http::Timeout=30"
)
echo "fetch-ort-headers: apt-get update ($mirror $suite)"
apt-get "${apt_opts[@]}" -qq update
(cd "$apt_dir/debs" && apt-get "${apt_opts[@]}" -qq download libonnxruntime-dev)
deb="$(ls "$apt_dir"/debs/libonnxruntime-dev_*.deb | head -n1)"
rm -rf "$dest.tmp"
dpkg-deb -x "$deb" "$dest.tmp"
[[ -f "$dest.tmp/usr/include/onnxruntime/onnxruntime_c_api.h" ]] || { echo "fetch-ort-headers: $deb has no onnxruntime_c_api.h" >&2; exit 1; }
rm -rf "$dest" && mv "$dest.tmp" "$dest"
echo "fetch-ort-headers: unpacked $(basename "$deb") into $dest"
