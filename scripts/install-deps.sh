#!/usr/bin/env bash
# Installs what cninet's tests and demo need, when it is missing:
#   - Debian's iptables, iproute2, nftables (the unit tests' host-safety
#     check plants nftables rules) and containernetworking-plugins (v1.1.1,
#     in /usr/lib/cni), and podman, containerd, runc and busybox-static (the
#     thick-mode tests run a Podman container and containerd's CRI pods on
#     a cninet-shim network), with apt-get;
#   - the upstream CNI plugins, built with `go install` into
#     .cache/cni/$UPSTREAM_VERSION of this repository;
#   - libcni's cnitool, at the libcni version go.mod requires, into
#     .cache/bin (the thick-mode tests drive cninet-shim with it);
#   - crictl, at $CRICTL_VERSION, into .cache/bin (the thick-mode tests
#     drive containerd's CRI plugin with it, as a kubelet would);
#   - staticcheck, at $STATICCHECK_VERSION, into .cache/bin (make lint).
# With the argument "staticcheck", installs staticcheck only (make lint
# needs nothing else, and no root).
# Idempotent; prints nothing when everything is present, else one summary
# line. apt-get needs root; the Go builds do not.
set -euo pipefail

UPSTREAM_VERSION=${UPSTREAM_VERSION:-v1.9.1}
# staticcheck 2026.2.2, the first release line that supports Go 1.26; a
# newer Go toolchain may need a newer staticcheck.
STATICCHECK_VERSION=${STATICCHECK_VERSION:-v0.8.2}
# crictl speaks the CRI v1 API, which containerd 1.6 serves.
CRICTL_VERSION=${CRICTL_VERSION:-v1.37.0}
only=${1:-all}
case "$only" in
all | staticcheck) ;;
*)
	echo "usage: $0 [staticcheck]" >&2
	exit 2
	;;
esac
GO=${GO:-go}
repo=$(cd "$(dirname "$0")/.." && pwd)
upstream_dir="$repo/.cache/cni/$UPSTREAM_VERSION"
start=$SECONDS
installed=()
scratch=()
trap 'rm -rf "${scratch[@]}"' EXIT

log() { echo "install-deps: $*" >&2; }

is_installed() {
	dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'
}

install_all() {
# Ask dpkg rather than PATH: iptables lives in /usr/sbin, which a non-login
# environment (CI) may not have on PATH, and a present binary says nothing
# about the package that the plugins' iptables calls expect.
missing=()
for pkg in iptables iproute2 nftables containernetworking-plugins podman containerd runc busybox-static; do
	is_installed "$pkg" || missing+=("$pkg")
done
reinstall=()
# Installed but gutted (someone deleted /usr/lib/cni): dpkg still says "ok".
if is_installed containernetworking-plugins && [ ! -x /usr/lib/cni/bridge ]; then
	reinstall+=(containernetworking-plugins)
fi

if [ ${#missing[@]} -gt 0 ] || [ ${#reinstall[@]} -gt 0 ]; then
	if [ "$(id -u)" != 0 ]; then
		log "need root to install ${missing[*]} ${reinstall[*]}"
		exit 1
	fi
	export DEBIAN_FRONTEND=noninteractive
	aptlog=$(mktemp)
	scratch+=("$aptlog")
	# An unreachable extra source makes update complain; what matters is
	# whether the install below then finds the packages, so go on and let
	# that step fail loudly if it does not.
	apt-get update -q >"$aptlog" 2>&1 || log "apt-get update failed; trying the install anyway"
	if [ ${#missing[@]} -gt 0 ]; then
		if ! apt-get install -y -q --no-install-recommends "${missing[@]}" >"$aptlog" 2>&1; then
			cat "$aptlog" >&2
			log "apt-get install ${missing[*]} failed"
			exit 1
		fi
		installed+=("${missing[@]}")
	fi
	if [ ${#reinstall[@]} -gt 0 ]; then
		if ! apt-get install -y -q --reinstall "${reinstall[@]}" >"$aptlog" 2>&1; then
			cat "$aptlog" >&2
			log "apt-get install --reinstall ${reinstall[*]} failed"
			exit 1
		fi
		installed+=("${reinstall[@]} (reinstalled)")
	fi
fi

if [ ! -x "$upstream_dir/bridge" ]; then
	if ! command -v "$GO" >/dev/null 2>&1; then
		log "$GO not found on PATH; it builds the upstream CNI plugins"
		exit 1
	fi
	mkdir -p "$(dirname "$upstream_dir")"
	# Build into a scratch directory and rename it into place, so that an
	# interrupted or failed build never leaves a directory that has `bridge`
	# (the completeness check above) but lacks other plugins.
	tmp=$(mktemp -d "$upstream_dir.tmp.XXXXXX")
	scratch+=("$tmp")
	chmod 755 "$tmp"
	golog=$(mktemp)
	scratch+=("$golog")
	# pkg@version builds the plugins' own module, whatever go.mod is here.
	if ! GOBIN="$tmp" "$GO" install \
		"github.com/containernetworking/plugins/plugins/...@$UPSTREAM_VERSION" >"$golog" 2>&1; then
		cat "$golog" >&2
		log "building the upstream CNI plugins $UPSTREAM_VERSION failed"
		exit 1
	fi
	rm -rf "$upstream_dir"
	mv "$tmp" "$upstream_dir"
	installed+=("upstream CNI plugins $UPSTREAM_VERSION")
fi

# cnitool of the libcni that cninet links, so that the thick-mode tests
# drive the shim exactly as that libcni does; a stamp file says which
# version .cache/bin/cnitool is.
cni_version=$(awk '$1 == "github.com/containernetworking/cni" { print $2 }' "$repo/go.mod")
if [ -z "$cni_version" ]; then
	log "go.mod names no github.com/containernetworking/cni version"
	exit 1
fi
go_install_stamped cnitool "github.com/containernetworking/cni/cnitool" "$cni_version"

# crictl, for the containerd tests.
go_install_stamped crictl "sigs.k8s.io/cri-tools/cmd/crictl" "$CRICTL_VERSION"
}

# go_install_stamped NAME PACKAGE VERSION: `go install PACKAGE@VERSION`
# into .cache/bin unless .cache/bin/NAME is there and its stamp file
# (NAME.version) says VERSION.
go_install_stamped() {
	local name=$1 pkg=$2 version=$3
	local bin="$repo/.cache/bin/$name"
	if [ -x "$bin" ] && [ "$(cat "$bin.version" 2>/dev/null)" = "$version" ]; then
		return
	fi
	if ! command -v "$GO" >/dev/null 2>&1; then
		log "$GO not found on PATH; it builds $name"
		exit 1
	fi
	mkdir -p "$repo/.cache/bin"
	local golog
	golog=$(mktemp)
	scratch+=("$golog")
	if ! GOBIN="$repo/.cache/bin" "$GO" install "$pkg@$version" >"$golog" 2>&1; then
		cat "$golog" >&2
		log "building $name $version failed"
		exit 1
	fi
	echo "$version" >"$bin.version"
	installed+=("$name $version")
}

if [ "$only" = all ]; then
	install_all
fi
go_install_stamped staticcheck "honnef.co/go/tools/cmd/staticcheck" "$STATICCHECK_VERSION"

if [ ${#installed[@]} -gt 0 ]; then
	joined=$(printf '%s, ' "${installed[@]}")
	echo "install-deps: installed ${joined%, } in $((SECONDS - start))s"
fi
