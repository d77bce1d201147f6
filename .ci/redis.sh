#!/usr/bin/env bash
# Starts and stops the Redis servers floodgate's tests use: one standalone
# server and a 3-master Redis Cluster, on free loopback ports, without
# persistence, with their data under a temporary directory.
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
	local single c1 c2 c3 port
	pick_port
	single=$port
	pick_port
	c1=$port
	pick_port
	c2=$port
	pick_port
	c3=$port
	echo "$single $c1 $c2 $c3" >"$state/ports"

	start_server "$single"
	for p in "$c1" "$c2" "$c3"; do
		start_server "$p" --cluster-enabled yes \
			--cluster-config-file "$state/nodes-$p.conf" \
			--cluster-node-timeout 5000
	done
	for p in "$single" "$c1" "$c2" "$c3"; do
		wait_ping "$p"
	done

	if ! redis-cli --cluster create "127.0.0.1:$c1" "127.0.0.1:$c2" "127.0.0.1:$c3" \
		--cluster-replicas 0 --cluster-yes >"$state/cluster-create.log" 2>&1; then
		log "cluster create failed:"
		cat "$state/cluster-create.log" >&2
		false
	fi
	local i ok
	for i in $(seq 1 150); do
		ok=1
		for p in "$c1" "$c2" "$c3"; do
			if ! redis-cli -p "$p" cluster info 2>/dev/null | grep -q '^cluster_state:ok'; then
				ok=0
			fi
		done
		[ "$ok" = 1 ] && break
		sleep 0.2
	done
	if [ "$ok" != 1 ]; then
		log "cluster did not reach cluster_state:ok"
		false
	fi
	trap - ERR

	{
		echo "export REDIS_ADDR=127.0.0.1:$single"
		echo "export REDIS_CLUSTER_ADDRS=127.0.0.1:$c1,127.0.0.1:$c2,127.0.0.1:$c3"
	} >"$state/env"
	log "standalone on $single, cluster on $c1 $c2 $c3 (state in $state)"
	print_env
	write_envfile "${1:-}"
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
