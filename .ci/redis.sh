#!/usr/bin/env bash
# Starts and stops the Redis servers floodgate's tests use: one standalone
# server and a Redis Cluster of 3 masters with a replica each (six nodes,
# cluster-node-timeout 1000ms, so that a failover takes a few seconds), on
# free loopback ports, without persistence, with their data under a
# temporary directory. REDIS_CLUSTER_ADDRS lists the 3 masters as seeds.
#
#   bash .ci/redis.sh start [ENVFILE]   # prints `export REDIS_ADDR=...` and
#                                       # `export REDIS_CLUSTER_ADDRS=...`;
#                                       # also writes them to ENVFILE if given
#   eval "$(bash .ci/redis.sh start)"   # typical use by hand
#   bash .ci/redis.sh env               # prints the exports of running servers
#   bash .ci/redis.sh stop              # stops what start started
#
# It installs Debian's redis-server (apt-get) when it is missing. The state
# (pids, logs, ports) lives in a directory derived from this checkout's path,
# so clones in other directories on the same machine do not collide. Set
# FG_REDIS_STATE to choose that directory.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
state=${FG_REDIS_STATE:-${TMPDIR:-/tmp}/floodgate-redis-$(printf '%s' "$repo" | cksum | cut -d' ' -f1)}

log() { printf 'redis.sh: %s\n' "$*" >&2; }

ensure_installed() {
	if command -v redis-server >/dev/null && command -v redis-cli >/dev/null; then
		return
	fi
	log "installing redis-server with apt-get"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq >&2
	apt-get install -y -qq redis-server >&2
	# Debian's package may start a system-wide server on 6379; floodgate's
	# servers never use it, and it is left as the package set it up.
}

# port_free reports whether nothing listens on 127.0.0.1:$1.
port_free() {
	! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# pick_port sets port to a free port whose cluster bus port (port+10000) is
# free too, avoiding the ports (and bus ports) already chosen in this run.
# Ports and bus ports stay below the kernel's ephemeral range (from 32768
# by default): a port an outgoing connection happens to use cannot be
# bound, though nothing listens on it.
chosen=" "
pick_port() {
	local p i lo
	lo=$(awk '{print $1}' /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
	for i in $(seq 1 200); do
		p=$((10000 + RANDOM % (lo - 20000)))
		case "$chosen" in *" $p "* | *" $((p + 10000)) "*) continue ;; esac
		if port_free "$p" && port_free $((p + 10000)); then
			chosen="$chosen$p $((p + 10000)) "
			port=$p
			return 0
		fi
	done
	log "no free port found"
	return 1
}

# start_server PORT [EXTRA ARGS...] starts a daemonized redis-server.
start_server() {
	local port=$1
	shift
	redis-server --port "$port" --bind 127.0.0.1 --protected-mode yes \
		--save '' --appendonly no --dir "$state" \
		--dbfilename "dump-$port.rdb" \
		--daemonize yes --pidfile "$state/redis-$port.pid" \
		--logfile "$state/redis-$port.log" "$@"
}

# wait_ping PORT waits until the server answers PING.
wait_ping() {
	local i
	for i in $(seq 1 100); do
		if [ "$(redis-cli -p "$1" ping 2>/dev/null)" = PONG ]; then
			return 0
		fi
		sleep 0.1
	done
	log "redis on port $1 did not start; log:"
	tail -n 20 "$state/redis-$1.log" >&2 || true
	return 1
}

print_env() {
	if [ ! -f "$state/env" ]; then
		log "not running (no $state/env)"
		return 1
	fi
	cat "$state/env"
}

# alive reports whether the process $1 runs (a zombie does not).
alive() {
	[ -n "$1" ] && kill -0 "$1" 2>/dev/null || return 1
	[ "$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" != Z ]
}

start() {
	if [ -f "$state/env" ] && all_alive; then
		log "already running (state in $state)"
		print_env
		write_envfile "${1:-}"
		return
	fi
	[ -d "$state" ] && stop >/dev/null 2>&1 || true
	ensure_installed
	mkdir -p "$state"

	# Whatever fails from here stops what was started.
	trap 'log "start failed; stopping what it started"; stop >/dev/null 2>&1' ERR
	local single port p nodes=() addrs=()
	pick_port
	single=$port
	for _ in 1 2 3 4 5 6; do
		pick_port
		nodes+=("$port")
		addrs+=("127.0.0.1:$port")
	done
	echo "$single ${nodes[*]}" >"$state/ports"

	start_server "$single"
	for p in "${nodes[@]}"; do
		# The diskless sync's delay (5s by default) would hold back
		# every replica's first sync. Without full coverage, a master
		# that fails costs only its own slots, not every key of the
		# Cluster (CLUSTERDOWN) until its replica takes over.
		start_server "$p" --cluster-enabled yes \
			--cluster-config-file "$state/nodes-$p.conf" \
			--cluster-node-timeout 1000 \
			--cluster-require-full-coverage no \
			--repl-diskless-sync-delay 0
	done
	for p in "$single" "${nodes[@]}"; do
		wait_ping "$p"
	done

	if ! redis-cli --cluster create "${addrs[@]}" \
		--cluster-replicas 1 --cluster-yes >"$state/cluster-create.log" 2>&1; then
		log "cluster create failed:"
		cat "$state/cluster-create.log" >&2
		false
	fi
	local i why=""
	for i in $(seq 1 150); do
		why=$(cluster_unready "${nodes[@]}")
		[ -z "$why" ] && break
		sleep 0.2
	done
	if [ -n "$why" ]; then
		log "the cluster is not ready after 30s: $why"
		false
	fi
	# The masters, as seeds: redis-cli chose them among the six.
	local seeds
	seeds=$(redis-cli -p "${nodes[0]}" cluster nodes |
		awk '$3 ~ /master/ && NF > 8 { split($2, a, "@"); print a[1] }' | sort | paste -sd, -)
	trap - ERR

	{
		echo "export REDIS_ADDR=127.0.0.1:$single"
		echo "export REDIS_CLUSTER_ADDRS=$seeds"
	} >"$state/env"
	log "standalone on $single, cluster on ${nodes[*]}, masters $seeds (state in $state)"
	print_env
	write_envfile "${1:-}"
}

# cluster_unready PORTS... prints why the cluster of those nodes is not
# ready yet, or nothing when it is: every node says cluster_state:ok, sees
# 3 masters serving slots and 3 replicas and none failing, and every
# replica's link to its master is up (its first sync is done).
cluster_unready() {
	local p nodes repl
	for p in "$@"; do
		if ! redis-cli -p "$p" cluster info 2>/dev/null | grep -q '^cluster_state:ok'; then
			echo "$p: cluster_state is not ok"
			return
		fi
		nodes=$(redis-cli -p "$p" cluster nodes 2>/dev/null)
		if [ "$(awk '$3 ~ /master/ && NF > 8' <<<"$nodes" | wc -l)" != 3 ] ||
			[ "$(awk '$3 ~ /slave/' <<<"$nodes" | wc -l)" != 3 ]; then
			echo "$p: does not see 3 masters serving slots and 3 replicas"
			return
		fi
		if awk '$3 ~ /fail|handshake|noaddr/' <<<"$nodes" | grep -q .; then
			echo "$p: sees a failing node"
			return
		fi
		repl=$(redis-cli -p "$p" info replication 2>/dev/null | tr -d '\r')
		if grep -q '^role:slave' <<<"$repl" && ! grep -q '^master_link_status:up' <<<"$repl"; then
			echo "$p: replica not in sync with its master"
			return
		fi
	done
}

write_envfile() {
	if [ -n "${1:-}" ]; then
		cp "$state/env" "$1"
	fi
}

all_alive() {
	local p
	[ -f "$state/ports" ] || return 1
	for p in $(cat "$state/ports"); do
		[ "$(redis-cli -p "$p" ping 2>/dev/null)" = PONG ] || return 1
	done
}

stop() {
	if [ ! -d "$state" ]; then
		log "nothing to stop"
		return 0
	fi
	local p pid f
	for f in "$state"/redis-*.pid; do
		[ -e "$f" ] || continue
		p=${f##*/redis-}
		p=${p%.pid}
		redis-cli -p "$p" shutdown nosave >/dev/null 2>&1 || true
	done
	# Whatever did not shut down on request is killed by its recorded pid.
	for f in "$state"/redis-*.pid; do
		[ -e "$f" ] || continue
		pid=$(cat "$f" 2>/dev/null || true)
		for _ in $(seq 1 50); do
			alive "$pid" || break
			sleep 0.1
		done
		if alive "$pid"; then
			kill -9 "$pid" 2>/dev/null || true
		fi
	done
	rm -rf "$state"
	log "stopped"
}

case "${1:-}" in
start) start "${2:-}" ;;
stop) stop ;;
env) print_env ;;
*)
	echo "usage: $0 start [ENVFILE] | env | stop" >&2
	exit 2
	;;
esac
