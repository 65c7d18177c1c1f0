#!/usr/bin/env bash
# Installs the system packages GaaS needs where they are missing: as root
# with apt-get (as on CI), otherwise it says what is missing and the one
# command that installs it.
set -euo pipefail

missing=()
command -v bwrap >/dev/null 2>&1 || missing+=(bubblewrap)
command -v python3 >/dev/null 2>&1 || missing+=(python3)
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "Installing ${missing[*]} from Debian's packages..."
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  exit 0
fi
echo "GaaS needs ${missing[*]}, which this machine lacks. Install with:" >&2
echo "  sudo apt-get install -y ${missing[*]}" >&2
exit 1
