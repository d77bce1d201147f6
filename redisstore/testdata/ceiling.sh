#!/usr/bin/env bash
# The ceiling for redisstore's throughput: redis-benchmark running each
# floodgate script (EVALSHA, with the arguments BenchmarkStoreApply uses, on
# 10,000 keys) from 64 connections, without and with pipelining 16 deep.
#
#   REDIS_ADDR=127.0.0.1:6379 bash redisstore/testdata/ceiling.sh [requests]
set -euo pipefail
addr=${REDIS_ADDR:?set REDIS_ADDR}
host=${addr%:*}
port=${addr##*:}
n=${1:-200000}
dir=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../scripts" && pwd)
cli() { redis-cli -h "$host" -p "$port" "$@"; }

# algorithm file, then ARGV (no ARGV[8]: server TIME):
# op n maxDelay marginMs quota arg6 arg7
cases=(
	"tb tokenbucket   0 1 0 1000 1000 1000000 1000000000"
	"lb leakybucket   0 1 0 1000 1000 1000000 1000000000"
	"fw fixedwindow   0 1 0 1000 1000 1000000000 0"
	"sw slidingwindow 0 1 0 1000 1000 1000000000 0"
	"sl slidinglog    0 1 0 1000 100  1000000000 0"
)
printf '%-4s %14s %14s\n' alg 'rps -P 1' 'rps -P 16'
for c in "${cases[@]}"; do
	read -r kind file args <<<"$c"
	# The scripts as scripts.Source builds them: the fast paths first.
	head='' pre=()
	if [[ $kind == tb ]]; then head='local leaky = false' pre=("$dir/bucket_fast.lua"); fi
	if [[ $kind == lb ]]; then head='local leaky = true' pre=("$dir/bucket_fast.lua"); fi
	if [[ $kind == fw ]]; then pre=("$dir/fixedwindow_fast.lua"); fi
	sha=$(cli script load "$(printf '%s\n' "$head"; cat "${pre[@]}" "$dir/lib.lua" "$dir/$file.lua")")
	row=()
	for p in 1 16; do
		rps=$(redis-benchmark -h "$host" -p "$port" -c 64 -n "$n" -P "$p" -r 10000 --csv \
			evalsha "$sha" 1 "fgceil:{__rand_int__}:$kind" $args | tail -n 1 | cut -d, -f2 | tr -d '"')
		row+=("$rps")
	done
	printf '%-4s %14s %14s\n' "$kind" "${row[0]}" "${row[1]}"
done
cli --scan --pattern 'fgceil:*' | xargs -r -n 500 redis-cli -h "$host" -p "$port" del >/dev/null
