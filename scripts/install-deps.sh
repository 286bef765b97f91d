#!/usr/bin/env bash
# Installs what cninet's tests and demo need, when it is missing:
#   - iptables, iproute2 and Debian's CNI plugins (v1.1.1, /usr/lib/cni);
#   - the upstream CNI plugins, built with `go install` into
#     .cache/cni/$UPSTREAM_VERSION of this repository.
# Idempotent and quiet when everything is present. Needs root for apt-get.
set -euo pipefail

UPSTREAM_VERSION=${UPSTREAM_VERSION:-v1.9.1}
repo=$(cd "$(dirname "$0")/.." && pwd)
upstream_dir="$repo/.cache/cni/$UPSTREAM_VERSION"
installed=()

missing_pkgs=()
command -v iptables >/dev/null 2>&1 || missing_pkgs+=(iptables)
command -v ip >/dev/null 2>&1 || missing_pkgs+=(iproute2)
[ -x /usr/lib/cni/bridge ] || missing_pkgs+=(containernetworking-plugins)
if [ ${#missing_pkgs[@]} -gt 0 ]; then
	if [ "$(id -u)" != 0 ]; then
		echo "install-deps: need root to install ${missing_pkgs[*]}" >&2
		exit 1
	fi
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq >/dev/null
	apt-get install -y -qq --no-install-recommends "${missing_pkgs[@]}" >/dev/null
	installed+=("${missing_pkgs[@]}")
fi

if [ ! -x "$upstream_dir/bridge" ]; then
	mkdir -p "$upstream_dir"
	GOBIN="$upstream_dir" GOFLAGS=-mod=mod go install \
		"github.com/containernetworking/plugins/plugins/...@$UPSTREAM_VERSION"
	installed+=("upstream CNI plugins $UPSTREAM_VERSION")
fi

if [ ${#installed[@]} -gt 0 ]; then
	echo "install-deps: installed ${installed[*]}"
fi
