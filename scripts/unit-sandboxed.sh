#!/usr/bin/env bash
# Host-safety check for the unit tests: runs `go test -race -count=1` on
# every package of the module except integration/ inside a private mount
# and network namespace in which the host's CNI state directories
#   /var/lib/cni, /run/cni (= /var/run/cni), /run/netns (= /var/run/netns)
# are fresh tmpfs holding planted state (libcni cache entries, host-local
# reservations, a netns file), and iptables, ip6tables and nftables hold
# the rules the bridge, portmap and firewall plugins write for the planted
# attachments. It fails when the tests fail, and when anything planted
# changed, vanished, or something new appeared there: a unit test must use
# temp dirs, CacheDir and fakes, never the host's state.
#
#   scripts/unit-sandboxed.sh [go test flags, e.g. -timeout 45m -run X]
#
# Needs root and util-linux unshare. Without them it fails when CI=true,
# else it warns and runs the same tests unsandboxed (and unchecked).
# Everything planted lives only in the namespaces this script creates.
# The one way it can touch the host's file system: when one of those
# directories does not exist, it creates it (empty) to mount on, and
# removes it again at the end.
set -euo pipefail

GO=${GO:-go}
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
self="$repo/scripts/$(basename "${BASH_SOURCE[0]}")"
cd "$repo"

log() { echo "unit-sandboxed: $*" >&2; }

# The directories the tests must leave alone, as the paths code uses.
STATE_DIRS=(/var/lib/cni /run/cni /var/run/cni /run/netns /var/run/netns /var/lib/cninet)

# ---------------------------------------------------------------------------
# Outside: list the packages (with the network, in case a module is
# missing), then re-run this script in new mount and network namespaces.
# ---------------------------------------------------------------------------
if [ "${CNINET_UNIT_SANDBOX:-}" != inside ]; then
	module=$("$GO" list -m) && listed=$("$GO" list ./...) || {
		log "go list failed; cannot tell which packages to test"
		exit 1
	}
	pkgs=$(grep -vx "$module/integration" <<<"$listed" | tr '\n' ' ')

	why=""
	if [ "$(id -u)" != 0 ]; then
		why="not running as root (uid $(id -u))"
	elif ! command -v unshare >/dev/null 2>&1; then
		why="unshare (util-linux) is not installed"
	elif ! out=$(unshare --mount --net --propagation private -- \
		sh -c 'mount -n -t tmpfs cninet-probe /tmp && ip link set lo up' 2>&1); then
		# The probe does in throwaway namespaces what the run needs.
		why="unshare --mount --net (with a tmpfs mount and lo up) failed: ${out:-no message}"
	fi
	if [ -n "$why" ]; then
		if [ "${CI:-}" = true ]; then
			log "cannot run the unit tests in a sandbox: $why"
			log "CI=true: failing rather than running them unchecked"
			exit 1
		fi
		log "WARNING: cannot sandbox the unit tests: $why"
		log "WARNING: running them unsandboxed; nothing keeps them off this host's CNI state,"
		log "WARNING: iptables and nftables, and nothing checks that they left them alone"
		# shellcheck disable=SC2086 # one word per package
		exec "$GO" test -race -count=1 "$@" $pkgs
	fi
	export CNINET_UNIT_SANDBOX=inside CNINET_UNIT_PKGS="$pkgs"
	exec unshare --mount --net --propagation private -- bash "$self" "$@"
fi

# ---------------------------------------------------------------------------
# Inside the new namespaces.
# ---------------------------------------------------------------------------
for tool in ip iptables-restore ip6tables-restore iptables-save ip6tables-save sha256sum base64 mountpoint; do
	if ! command -v "$tool" >/dev/null 2>&1; then
		log "$tool not found (make deps installs iptables and iproute2)"
		exit 1
	fi
done
have_nft=false
if command -v nft >/dev/null 2>&1; then
	have_nft=true
else
	log "nft not found: nftables rules are not planted (make deps installs nftables)"
fi

ip link set lo up

# One mount per real directory: /var/run is usually a symlink to /run, and
# then /var/run/cni is /run/cni.
mounts=()
for d in "${STATE_DIRS[@]}"; do
	real=$(realpath -m "$d")
	seen=false
	for m in "${mounts[@]}"; do [ "$m" = "$real" ] && seen=true; done
	$seen || mounts+=("$real")
done

created=() # directories this script had to create on the host's file system
work=$(mktemp -d)
cleanup() {
	local m c
	for m in "${mounts[@]}"; do
		mountpoint -q "$m" && umount -n "$m"
	done
	# Created here, so remove them again (rmdir: only if still empty; the
	# namespace sees the host's directory again once the tmpfs is gone).
	for ((c = ${#created[@]} - 1; c >= 0; c--)); do
		rmdir "${created[c]}" 2>/dev/null ||
			log "note: could not remove ${created[c]}, created for the mount (not empty now?)"
	done
	rm -rf "$work"
}
trap cleanup EXIT

for m in "${mounts[@]}"; do
	if [ ! -d "$m" ]; then
		# Note the outermost missing directory, then create the path. The
		# mount namespace is private, the file system is not: these stay
		# empty on the host (the tmpfs goes on top) and are removed at exit.
		top=$m
		while [ ! -e "$(dirname "$top")" ]; do top=$(dirname "$top"); done
		[ -e "$top" ] && { log "$m exists but is not a directory"; exit 1; }
		mkdir -p "$m"
		created+=("$top")
		log "note: created the empty directory $top on the host to mount on (it did not exist)"
	fi
	# -n: no /run/mount/utab entry (libmount would create it on the host).
	mount -n -t tmpfs -o mode=0755,size=16m "cninet-unit-$(basename "$m")" "$m"
done

# --- planted state ----------------------------------------------------------
# Network "nomad" (the default network), 172.26.64.0/20 and
# fd00:172:26:64::/64:
#   planted-1  172.26.64.5, fd00:172:26:64::5, in /var/run/netns/planted,
#              reservations in /var/run/cni/nomad (the default conflist's
#              dataDir), rules of bridge, portmap and firewall, nftables;
#   planted-2  172.26.64.6, cached without a netns, reservation in
#              /var/lib/cni/networks/nomad (host-local's default dataDir).
# Network "it1", 10.89.0.0/24: planted-1 (the same id in another network)
#   at 10.89.0.2, reservation in /var/run/cni/it1, masquerade rules.

# plant_file PATH MODE CONTENT: writes CONTENT exactly (no newline added).
plant_file() {
	mkdir -p "$(dirname "$1")"
	printf '%s' "$3" >"$1"
	chmod "$2" "$1"
}

# hex N STRING: the first N hex digits of sha512(STRING), as the plugins
# name their chains and nftables comments.
hex() { printf '%s' "$2" | sha512sum | cut -c "1-$1"; }

conflist() { # NAME SUBNET [DATADIR]: the conflist libcni caches as "config"
	local datadir=""
	[ -n "${3:-}" ] && datadir=",\"dataDir\":\"$3\""
	printf '{"cniVersion":"1.0.0","name":"%s","plugins":[{"type":"loopback"},{"type":"bridge","bridge":"%s","ipMasq":true,"isGateway":true,"forceAddress":true,"hairpinMode":false,"ipam":{"type":"host-local","ranges":[[{"subnet":"%s"}]],"routes":[{"dst":"0.0.0.0/0"}]%s}},{"type":"firewall","backend":"iptables","iptablesAdminChainName":"NOMAD-ADMIN"},{"type":"portmap","capabilities":{"portMappings":true},"snat":true}]}' \
		"$1" "$1" "$2" "$datadir"
}

# cache_entry NETWORK ID NETNS IPS CONFIG: a libcni cache file
# as cacheAdd writes it (the cachedInfo struct's field order; the result
# went through a map, so its keys are sorted; no trailing newline). An
# empty NETNS leaves the "netns" key out, as omitempty does.
cache_entry() {
	local network=$1 id=$2 netns=$3 ips=$4 config=$5 ns="" sandbox=""
	if [ -n "$netns" ]; then
		ns=",\"netns\":\"$netns\""
		sandbox=",\"sandbox\":\"$netns\""
	fi
	printf '{"kind":"cniCacheV1","containerId":"%s","config":"%s","ifName":"eth0","networkName":"%s"%s,"cniArgs":[["IgnoreUnknown","1"],["NOMAD_ALLOC_ID","%s"]],"capabilityArgs":{"portMappings":[{"hostPort":28080,"containerPort":8080,"protocol":"tcp"}]},"result":{"cniVersion":"1.0.0","dns":{},"interfaces":[{"mac":"7a:1e:3c:4d:5e:01","name":"%s"},{"mac":"de:ad:be:ef:00:01","name":"veth%s"},{"mac":"0a:58:ac:1a:40:05","name":"eth0"%s}],"ips":[%s],"routes":[{"dst":"0.0.0.0/0"}]}}' \
		"$id" "$(printf '%s' "$config" | base64 -w0)" "$network" "$ns" "$id" "$network" "$(hex 8 "$id")" "$sandbox" "$ips"
}

nomad_conf=$(conflist nomad 172.26.64.0/20 /var/run/cni)
plant_file /var/lib/cni/results/nomad-planted-1-eth0 0600 "$(cache_entry nomad planted-1 /var/run/netns/planted \
	'{"address":"172.26.64.5/20","gateway":"172.26.64.1","interface":2},{"address":"fd00:172:26:64::5/64","gateway":"fd00:172:26:64::1","interface":2}' \
	"$nomad_conf")"
plant_file /var/lib/cni/results/nomad-planted-2-eth0 0600 "$(cache_entry nomad planted-2 "" \
	'{"address":"172.26.64.6/20","gateway":"172.26.64.1","interface":2}' \
	"$(conflist nomad 172.26.64.0/20)")"
plant_file /var/lib/cni/results/it1-planted-1-eth0 0600 "$(cache_entry it1 planted-1 /var/run/netns/planted \
	'{"address":"10.89.0.2/24","gateway":"10.89.0.1","interface":2}' \
	"$(conflist it1 10.89.0.0/24 /var/run/cni)")"
chmod 0700 /var/lib/cni/results

# host-local: files named by the address holding "ID\r\nIFNAME", next to
# last_reserved_ip.N (the last address, no newline) and an empty lock.
plant_file /var/run/cni/nomad/172.26.64.5 0600 $'planted-1\r\neth0'
plant_file /var/run/cni/nomad/fd00:172:26:64::5 0600 $'planted-1\r\neth0'
plant_file /var/run/cni/nomad/last_reserved_ip.0 0600 172.26.64.5
plant_file /var/run/cni/nomad/last_reserved_ip.1 0600 fd00:172:26:64::5
plant_file /var/run/cni/nomad/lock 0600 ""
plant_file /var/lib/cni/networks/nomad/172.26.64.6 0600 $'planted-2\r\neth0'
plant_file /var/lib/cni/networks/nomad/last_reserved_ip.0 0600 172.26.64.6
plant_file /var/lib/cni/networks/nomad/lock 0600 ""
plant_file /var/run/cni/it1/10.89.0.2 0600 $'planted-1\r\neth0'
plant_file /var/run/cni/it1/last_reserved_ip.0 0600 10.89.0.2
plant_file /var/run/cni/it1/lock 0600 ""

# A named network namespace (a plain file does: nothing may touch it).
plant_file /var/run/netns/planted 0444 ""

# iptables, as the plugins write them (testdata/iptables has captures):
# bridge's masquerade jump and chain CNI-<24 hex of sha512(net+id)>,
# portmap's DNAT jump and chain CNI-DN-<21 hex>, firewall's CNI-FORWARD.
masq_rules() { # NETWORK ID ADDR/LEN SUBNET MULTICAST
	local chain comment
	chain="CNI-$(hex 24 "$1$2")"
	comment="name: \\\"$1\\\" id: \\\"$2\\\""
	echo ":$chain - [0:0]"
	echo "-A POSTROUTING -s $3 -m comment --comment \"$comment\" -j $chain"
	echo "-A $chain -d $4 -m comment --comment \"$comment\" -j ACCEPT"
	echo "-A $chain ! -d $5 -m comment --comment \"$comment\" -j MASQUERADE"
}
portmap_rules() { # NETWORK ID SUBNET DEST [LOCALHOST]
	local chain
	chain="CNI-DN-$(hex 21 "$1$2")"
	echo ":$chain - [0:0]"
	echo "-A CNI-HOSTPORT-DNAT -p tcp -m comment --comment \"dnat name: \\\"$1\\\" id: \\\"$2\\\"\" -m multiport --dports 28080 -j $chain"
	echo "-A $chain -s $3 -p tcp -m tcp --dport 28080 -j CNI-HOSTPORT-SETMARK"
	[ -n "${5:-}" ] && echo "-A $chain -s $5 -p tcp -m tcp --dport 28080 -j CNI-HOSTPORT-SETMARK"
	echo "-A $chain -p tcp -m tcp --dport 28080 -j DNAT --to-destination $4"
}
portmap_base() {
	cat <<-'EOF'
		:CNI-HOSTPORT-DNAT - [0:0]
		:CNI-HOSTPORT-MASQ - [0:0]
		:CNI-HOSTPORT-SETMARK - [0:0]
		-A PREROUTING -m addrtype --dst-type LOCAL -j CNI-HOSTPORT-DNAT
		-A OUTPUT -m addrtype --dst-type LOCAL -j CNI-HOSTPORT-DNAT
		-A POSTROUTING -m comment --comment "CNI portfwd requiring masquerade" -j CNI-HOSTPORT-MASQ
		-A CNI-HOSTPORT-MASQ -m mark --mark 0x2000/0x2000 -j MASQUERADE
		-A CNI-HOSTPORT-SETMARK -m comment --comment "CNI portfwd masquerade mark" -j MARK --set-xmark 0x2000/0x2000
	EOF
}
firewall_rules() { # ADDR/LEN...
	echo ":CNI-FORWARD - [0:0]"
	echo ":NOMAD-ADMIN - [0:0]"
	echo '-A FORWARD -m comment --comment "CNI firewall plugin rules" -j CNI-FORWARD'
	echo '-A CNI-FORWARD -m comment --comment "CNI firewall plugin admin overrides" -j NOMAD-ADMIN'
	for a in "$@"; do
		echo "-A CNI-FORWARD -d $a -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT"
		echo "-A CNI-FORWARD -s $a -j ACCEPT"
	done
}

{
	echo "*nat"
	portmap_base
	masq_rules nomad planted-1 172.26.64.5/32 172.26.64.0/20 224.0.0.0/4
	masq_rules it1 planted-1 10.89.0.2/32 10.89.0.0/24 224.0.0.0/4
	portmap_rules nomad planted-1 172.26.64.0/20 172.26.64.5:8080 127.0.0.1/32
	echo "COMMIT"
	echo "*filter"
	firewall_rules 172.26.64.5/32 10.89.0.2/32
	echo "COMMIT"
} >"$work/rules.v4"
{
	echo "*nat"
	portmap_base
	masq_rules nomad planted-1 fd00:172:26:64::5/128 fd00:172:26:64::/64 ff00::/8
	portmap_rules nomad planted-1 fd00:172:26:64::/64 '[fd00:172:26:64::5]:8080'
	echo "COMMIT"
	echo "*filter"
	firewall_rules fd00:172:26:64::5/128
	echo "COMMIT"
} >"$work/rules.v6"
iptables-restore --noflush <"$work/rules.v4"
ip6tables-restore --noflush <"$work/rules.v6"

# nftables, as the upstream plugins' nftables backends write them: the
# ipMasq table (comment: hash of network, hash of ifname:id, then names)
# and portmap's table (comment: the container id).
if $have_nft; then
	masq_comment="$(hex 16 nomad)-$(hex 16 eth0:planted-1), net: nomad, if: eth0, id: planted-1"
	nft -f - <<-EOF
		table inet cni_plugins_masquerade {
			comment "Masquerading for plugins from github.com/containernetworking/plugins"
			chain masq_checks {
				ip saddr 172.26.64.5 ip daddr != 172.26.64.0/20 masquerade comment "$masq_comment"
			}
			chain postrouting {
				type nat hook postrouting priority srcnat;
				ip daddr 224.0.0.0/4 return
				ip6 daddr ff00::/8 return
				goto masq_checks
			}
		}
		table ip cni_hostport {
			comment "CNI portmap plugin"
			chain hostports {
				tcp dport 28080 dnat to 172.26.64.5:8080 comment "planted-1"
			}
			chain hostports_all {
				jump hostports
			}
			chain prerouting {
				type nat hook prerouting priority dstnat;
				fib daddr type local jump hostports_all
			}
		}
	EOF
fi

# --- fingerprint -------------------------------------------------------------
# One line per item, "KEY<TAB>VALUE": every path under the mounts (type,
# mode, mtime, and a file's sha256), then every chain and rule of
# iptables-save, ip6tables-save and nft list ruleset.
fingerprint() {
	local m type mode mtime path
	for m in "${mounts[@]}"; do
		find "$m" -mindepth 1 -printf '%y %m %TY-%Tm-%TdT%TT %p\0' |
			while IFS=' ' read -r -d '' type mode mtime path; do
				case $type in
				f) printf '%s\t%s %s sha256:%s mtime:%s\n' "$path" file "$mode" "$(sha256sum <"$path" | cut -c1-64)" "$mtime" ;;
				d) printf '%s\t%s %s mtime:%s\n' "$path" dir "$mode" "$mtime" ;;
				l) printf '%s\t%s -> %s\n' "$path" symlink "$(readlink "$path")" ;;
				*) printf '%s\t%s %s\n' "$path" "type-$type" "$mode" ;;
				esac
			done
	done | LC_ALL=C sort
	iptables-save | flat_iptables iptables-save
	ip6tables-save | flat_iptables ip6tables-save
	if $have_nft; then
		# nft also lists iptables-nft's tables (covered above too) and says
		# on stderr that it cannot decode their xtables targets.
		nft list ruleset 2>/dev/null | flat_nft
	fi
}

# flat_iptables NAME: "NAME<TAB>TABLE: LINE" per chain and rule of
# iptables-save output, counters zeroed.
flat_iptables() {
	awk -v name="$1" '
		/^#/ || /^COMMIT$/ { next }
		/^\*/ { table = substr($0, 2); next }
		{ sub(/\[[0-9]+:[0-9]+\]$/, "[0:0]"); print name "\t" table ": " $0 }'
}

# flat_nft: "nft<TAB>table FAMILY NAME [chain NAME]: LINE" per line of nft
# list ruleset, counters zeroed, so that each line says where it was.
flat_nft() {
	awk '
		/^#/ || /^[ \t]*$/ || /^\t*}$/ { if ($0 == "\t}") block = ""; next }
		/^table / { table = $0; sub(/ [{]$/, "", table); block = ""; print "nft\t" table; next }
		/^\t[^\t].* [{]$/ { block = $0; sub(/^\t/, "", block); sub(/ [{]$/, "", block); print "nft\t" table " " block; next }
		{
			line = $0
			sub(/^[ \t]+/, "", line)
			gsub(/counter packets [0-9]+ bytes [0-9]+/, "counter", line)
			print "nft\t" table (block == "" ? "" : " " block) ": " line
		}'
}

fingerprint >"$work/before"
nfiles=$(find "${mounts[@]}" -type f | wc -l)
nrules=$(grep -cE $'^ip6?tables-save\t[a-z]+: -A ' "$work/before" || true)
log "planted $nfiles files under ${mounts[*]} and $nrules iptables/ip6tables rules$($have_nft && echo ' plus nftables tables') for networks nomad and it1"

# --- the tests ---------------------------------------------------------------
read -r -a pkgs <<<"$CNINET_UNIT_PKGS"
status=0
"$GO" test -race -count=1 "$@" "${pkgs[@]}" || status=$?

# --- the check ---------------------------------------------------------------
fingerprint >"$work/after"
if cmp -s "$work/before" "$work/after"; then
	log "host-safety check passed: every planted file and rule untouched, nothing added"
	exit "$status"
fi
log "HOST-SAFETY CHECK FAILED: the unit tests changed host state they must leave alone:"
# Paths: removed, changed or added. Rule lines: removed or added (a
# changed rule is both), counted, since lines like "}" repeat.
awk -F '\t' '
	function rule(s) { return s == "iptables-save" || s == "ip6tables-save" || s == "nft" }
	FNR == NR {
		if (rule($1)) { if (!nb[$0]++) rules[++r] = $0 }
		else { before[$1] = $2; paths[++n] = $1 }
		next
	}
	rule($1) { if (!na[$0]++ && !($0 in nb)) rules[++r] = $0; next }
	{ after[$1] = $2; if (!($1 in before)) added[++m] = $1 }
	END {
		for (i = 1; i <= n; i++) {
			k = paths[i]
			if (!(k in after)) printf "  removed  %s\n", k
			else if (before[k] != after[k]) printf "  changed  %s\n             was: %s\n             now: %s\n", k, before[k], after[k]
		}
		for (i = 1; i <= m; i++) printf "  added    %s\n", added[i]
		for (i = 1; i <= r; i++) {
			k = rules[i]
			for (j = na[k]; j < nb[k]; j++) printf "  removed  %s\n", k
			for (j = nb[k]; j < na[k]; j++) printf "  added    %s\n", k
		}
	}' "$work/before" "$work/after" | sed 's/\t/: /' >&2
log "diff of the fingerprints (before -> after):"
diff -u --label before --label after "$work/before" "$work/after" | tail -n +3 >&2 || true
[ "$status" != 0 ] && log "go test also failed (exit status $status)"
exit $((status != 0 ? status : 1))
