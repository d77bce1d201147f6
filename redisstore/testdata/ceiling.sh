#!/usr/bin/env bash
# The ceiling for redisstore's throughput: redis-benchmark running each
# floodgate script (EVALSHA, with the arguments BenchmarkStoreApply uses, on
# 10,000 keys) from 64 connections, without and with pipelining 16 deep;
# and the script of a batch (scripts.BatchSource) making 16 decisions a
# call, as decisions per second.
#
#   REDIS_ADDR=127.0.0.1:6379 bash redisstore/testdata/ceiling.sh [requests]
set -euo pipefail
addr=${REDIS_ADDR:?set REDIS_ADDR}
host=${addr%:*}
port=${addr##*:}
n=${1:-200000}
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cli() { redis-cli -h "$host" -p "$port" "$@"; }

# algorithm, then the decision (a take of one unit without delay on Redis
# TIME, a TTL margin of 1s), which the source command lays out as ARGV
cases=(
	"tb -quota 1000 -period 1000000 -tau 1000000000"
	"lb -quota 1000 -period 1000000 -tau 1000000000"
	"fw -quota 1000 -period 1000000000"
	"sw -quota 1000 -period 1000000000"
	"sl -quota 100 -period 1000000000"
)
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
(cd "$repo" && go build -o "$bin/source" ./scripts/internal/source)
printf '%-4s %14s %14s %18s\n' alg 'rps -P 1' 'rps -P 16' 'batch of 16 (d/s)'
for c in "${cases[@]}"; do
	read -r kind fields <<<"$c"
	# shellcheck disable=SC2086 # fields are flags, split on purpose
	read -ra args <<<"$("$bin/source" -argv $fields)"
	row=()
	sha=$(cli script load "$("$bin/source" "$kind")")
	for p in 1 16; do
		rps=$(redis-benchmark -h "$host" -p "$port" -c 64 -n "$n" -P "$p" -r 10000 --csv \
			evalsha "$sha" 1 "fgceil:{__rand_int__}:$kind" "${args[@]}" | tail -n 1 | cut -d, -f2 | tr -d '"')
		row+=("$rps")
	done
	sha=$(cli script load "$("$bin/source" -batch "$kind")")
	# batch.lua's ARGV: one argument list (its length, its elements), then
	# each decision's list.
	keys=() argv=(1 "${#args[@]}" "${args[@]}")
	for _ in $(seq 16); do
		keys+=("fgceil:{__rand_int__}:$kind")
		argv+=(1)
	done
	rps=$(redis-benchmark -h "$host" -p "$port" -c 64 -n "$((n / 16))" -r 10000 --csv \
		evalsha "$sha" 16 "${keys[@]}" "${argv[@]}" | tail -n 1 | cut -d, -f2 | tr -d '"')
	row+=("$(awk -v r="$rps" 'BEGIN { printf "%.0f", r * 16 }')")
	printf '%-4s %14s %14s %18s\n' "$kind" "${row[@]}"
done
cli --scan --pattern 'fgceil:*' | xargs -r -n 500 redis-cli -h "$host" -p "$port" del >/dev/null
