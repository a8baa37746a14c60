#!/bin/sh
# Installs the Debian packages in $DEB_PKGS that are missing; does nothing
# (and needs no network) when all are there.
missing=""
for p in $DEB_PKGS; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" \
    || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
echo "deps: installing$missing"
if [ "$(id -u)" != 0 ]; then
  echo "deps: run as root, or install:$missing" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -q && apt-get install -y -q --no-install-recommends $missing
