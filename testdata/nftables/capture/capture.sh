#!/usr/bin/env bash
# Regenerates the captures in testdata/nftables (see ../README.md).
#
#   sudo bash testdata/nftables/capture/capture.sh [OUTDIR]
#
# Needs root, nft (Debian's nftables), iptables, iproute2, Go, and the
# upstream plugins v1.9.1 in $CNI_PATH (default .cache/cni/v1.9.1 of the
# repo). Every scenario runs in a fresh network+mount namespace of its own,
# with tmpfs over /run/netns, /run/cni and /var/lib/cni: nothing on the
# host is read or changed. Subnets: 198.18.N.0/24, fd00:198:18:0:N::/80.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../../.." && pwd)

if [ "${1:-}" != "__inner" ]; then
  OUT=$(mkdir -p "${1:-$HERE/..}" && cd "${1:-$HERE/..}" && pwd)
  WORK=$(mktemp -d)
  trap 'rm -rf "$WORK"' EXIT
  # drv and kprobe are built in a scratch module so the repo's go.mod is
  # left alone.
  for p in drv kprobe; do
    mkdir -p "$WORK/src/$p"
    sed '/^\/\/go:build ignore$/d' "$HERE/$p.go" > "$WORK/src/$p/main.go"
    (cd "$WORK/src/$p" && printf 'module scratch/%s\n\ngo 1.24\n' "$p" > go.mod &&
      GOFLAGS=-mod=mod go mod tidy >/dev/null 2>&1 && go build -o "$WORK/bin/$p" .)
  done
  export CAPTURE_BIN="$WORK/bin" CAPTURE_OUT="$OUT"
  export CNI_PATH="${CNI_PATH:-$REPO/.cache/cni/v1.9.1}"
  export NETCONFPATH="$(cd "$HERE/../conf" && pwd)"
  : > "$OUT/log.txt"
  for s in single two-networks-same-id prefix-ids long-id leaked-ns-deleted \
    leaked-no-del leaked-del-no-portmappings hostip-udp edge kprobe; do
    unshare --net --mount --propagation private bash "$0" __inner "$s" \
      2> >(grep -v 'managed by iptables-nft' >&2)
  done
  exit 0
fi

# ---- inside a private namespace ----
scen=$2
OUT=$CAPTURE_OUT
mkdir -p /run/netns /run/cni /var/lib/cni
mount -t tmpfs tmpfs /run/netns
mount -t tmpfs tmpfs /run/cni
mount -t tmpfs tmpfs /var/lib/cni
ip link set lo up
export PATH="$CAPTURE_BIN:$PATH"
PM='{"portMappings":[{"hostPort":28080,"containerPort":8080,"protocol":"tcp"}]}'
PM2='{"portMappings":[{"hostPort":28081,"containerPort":8080,"protocol":"tcp"}]}'
LONGNET=net-$(printf 'n%.0s' $(seq 1 60))          # 64 characters
LONGID=long-$(printf 'a%.0s' $(seq 1 110))-id       # 118 characters
echo "== $scen" >> "$OUT/log.txt"

capture() { # NAME: full ruleset in both forms + iptables-save (no # lines)
  nft list ruleset > "$OUT/$1.nft"
  nft -j list ruleset > "$OUT/$1.json"
  iptables-save | grep -v '^#' > "$OUT/$1.iptables-save"
  ip6tables-save | grep -v '^#' > "$OUT/$1.ip6tables-save"
}
files() { # NAME: host-local reservations and libcni cache entries
  {
    echo "## find /run/cni /var/lib/cni -type f | sort"
    find /run/cni /var/lib/cni -type f | sort
    for f in $(find /run/cni -type f | sort); do
      echo "## $f (od -c)"
      od -An -c "$f"
      echo
    done
    for f in $(find /var/lib/cni -type f | sort); do
      echo "## $f (top-level keys; kind/containerId/networkName/ifName; result.ips)"
      python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(sorted(d)); print({k:d[k] for k in ("kind","containerId","networkName","ifName","netns") if k in d}); print([i["address"] for i in d["result"]["ips"]])' "$f"
    done
  } > "$OUT/$1.files.txt"
}
add() { # ID NET NETNS [IFNAME] [CAP_ARGS]
  local rc=0
  CNI_CONTAINERID=$1 CNI_IFNAME=${4:-eth0} CAP_ARGS=${5:-$PM} drv add "$2" "$3" > /dev/null 2>> "$OUT/log.txt" || rc=$?
  echo "add id=$1 net=$2 netns=$3 if=${4:-eth0} rc=$rc" >> "$OUT/log.txt"
}
del() { # ID NET NETNS [IFNAME] [CAP_ARGS]
  local rc=0
  CNI_CONTAINERID=$1 CNI_IFNAME=${4:-eth0} CAP_ARGS=${5:-$PM} drv del "$2" "$3" 2>> "$OUT/log.txt" || rc=$?
  echo "del id=$1 net=$2 netns=$3 if=${4:-eth0} rc=$rc" >> "$OUT/log.txt"
}
run() { # append "$ cmd", its stdout+stderr and rc to $E
  echo "\$ $*" >> "$E"
  local rc=0
  "$@" >> "$E" 2>&1 || rc=$?
  echo "rc=$rc" >> "$E"
}

case $scen in
single)
  ip netns add w1
  add web-1 nftnet1 /run/netns/w1
  capture single
  files single
  nft -a list ruleset > "$OUT/single.handles.nft"
  for spec in "inet cni_plugins_masquerade masq_checks" \
    "inet cni_plugins_masquerade postrouting" \
    "ip cni_hostport hostports" "ip cni_hostport masquerading" \
    "ip6 cni_hostport hostports" "ip6 cni_hostport masquerading"; do
    set -- $spec
    nft --json list chain "$1" "$2" "$3" > "$OUT/single.list-chain.$1.$2.$3.json"
  done
  nft --json list table ip cni_hostport > "$OUT/single.list-table.ip.cni_hostport.json"
  del web-1 nftnet1 /run/netns/w1
  capture single-after-del
  files single-after-del
  ;;
two-networks-same-id)
  ip netns add w1
  add same-1 nftnet1 /run/netns/w1 eth0
  add same-1 nftnet2 /run/netns/w1 eth1 "$PM2"
  capture two-networks-same-id
  files two-networks-same-id
  del same-1 nftnet1 /run/netns/w1 eth0
  capture two-networks-same-id-after-del-nftnet1
  ;;
prefix-ids)
  ip netns add w1
  ip netns add w2
  add ab nftnet1 /run/netns/w1
  add abc nftnet1 /run/netns/w2 eth0 "$PM2"
  capture prefix-ids
  del ab nftnet1 /run/netns/w1
  capture prefix-ids-after-del-ab
  ;;
long-id)
  ip netns add w1
  add "$LONGID" "$LONGNET" /run/netns/w1
  capture long-id
  files long-id
  ;;
leaked-ns-deleted)
  ip netns add w1
  ip netns add w2
  add live-1 nftnet1 /run/netns/w1
  add gone-1 nftnet1 /run/netns/w2 eth0 "$PM2"
  capture leaked-ns-deleted-before
  ip netns del w2
  del gone-1 nftnet1 /run/netns/w2 eth0 "$PM2"
  capture leaked-ns-deleted
  files leaked-ns-deleted
  ;;
leaked-no-del)
  ip netns add w1
  ip netns add w2
  add live-1 nftnet1 /run/netns/w1
  add crash-1 nftnet1 /run/netns/w2 eth0 "$PM2"
  capture leaked-no-del
  files leaked-no-del
  ;;
leaked-del-no-portmappings)
  ip netns add w1
  add web-1 nftnet1 /run/netns/w1
  del web-1 nftnet1 /run/netns/w1 eth0 '{}'
  capture leaked-del-no-portmappings
  files leaked-del-no-portmappings
  ;;
hostip-udp)
  ip netns add w1
  add web-2 nftnet1 /run/netns/w1 eth0 '{"portMappings":[{"hostPort":28081,"containerPort":8081,"protocol":"udp"},{"hostPort":28082,"containerPort":8082,"protocol":"tcp","hostIP":"198.18.1.1"},{"hostPort":28083,"containerPort":8083,"protocol":"tcp","hostIP":"fd00:198:18:0:1::1"}]}'
  capture hostip-udp
  ;;
edge)
  E=$OUT/edge.txt
  : > "$E"
  ip netns add w1
  echo "### DEL of an id never added, no CNI tables exist yet" >> "$E"
  CNI_CONTAINERID=never-1 CAP_ARGS=$PM run drv del nftnet1 /run/netns/w1
  run nft list tables
  echo "### nft errors, no tables" >> "$E"
  run nft --json list chain ip cni_hostport hostports
  run nft --json list table ip cni_hostport
  run nft --json list chain inet cni_plugins_masquerade masq_checks
  echo "### empty transaction" >> "$E"
  run nft -f - < /dev/null
  add web-1 nftnet1 /run/netns/w1
  echo "### nft errors, tables present" >> "$E"
  run nft --json list chain ip cni_hostport nosuch
  echo "### deleting a missing handle; a transaction is all or nothing" >> "$E"
  run bash -c "printf 'delete rule ip cni_hostport hostports handle 11\\ndelete rule ip cni_hostport hostports handle 9999\\n' | nft -f -"
  run nft -a list chain ip cni_hostport hostports
  echo "### eth0 deleted inside a netns that still exists, then DEL" >> "$E"
  ip -n w1 link del eth0
  CNI_CONTAINERID=web-1 CAP_ARGS=$PM run drv del nftnet1 /run/netns/w1
  run nft list chain inet cni_plugins_masquerade masq_checks
  echo "### id of 130 characters: portmap's comment is over 128" >> "$E"
  ip netns add w2
  CNI_CONTAINERID=x$(printf 'b%.0s' $(seq 1 129)) CAP_ARGS=$PM run drv add nftnet1 /run/netns/w2
  run nft list chain inet cni_plugins_masquerade masq_checks
  run nft list chain ip cni_hostport hostports
  run find /run/cni /var/lib/cni -type f
  ;;
kprobe)
  K=$OUT/kprobe.txt
  kprobe fake > "$K"
  kprobe list ip cni_hostport hostports >> "$K"
  ip netns add w1
  add web-1 nftnet1 /run/netns/w1
  kprobe list ip cni_hostport hostports >> "$K"
  kprobe list ip cni_hostport nosuch >> "$K"
  kprobe list ip cni_hostport "" >> "$K"
  kprobe list inet cni_plugins_masquerade masq_checks >> "$K"
  kprobe delete ip cni_hostport hostports 11 >> "$K"
  kprobe delete ip cni_hostport hostports 11 >> "$K"
  kprobe empty ip cni_hostport >> "$K"
  ;;
esac
