// Command waitcost measures what WAIT 1 would add to a write on a Cluster
// master with a replica: it times 20,000 sequential SETs of one key, alone
// and pipelined with WAIT 1 100, twice each, and prints the medians and
// 99th percentiles. Run it with REDIS_CLUSTER_ADDRS set (.ci/redis.sh):
//
//	go run ./redisstore/testdata/waitcost
package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

func main() {
	addr := strings.Split(os.Getenv("REDIS_CLUSTER_ADDRS"), ",")[0]
	c := redis.NewClient(&redis.Options{Addr: addr})
	ctx := context.Background()
	// A key the seed master owns: the others answer MOVED.
	key := ""
	for i := 0; i < 100_000 && key == ""; i++ {
		k := fmt.Sprintf("waitcost:%d", i)
		if err := c.Set(ctx, k, "1", time.Minute).Err(); err == nil {
			key = k
		}
	}
	if key == "" {
		log.Fatalf("no key of %s found: is REDIS_CLUSTER_ADDRS a Cluster's?", addr)
	}
	for _, wait := range []bool{false, true, false, true} {
		var ds []time.Duration
		for i := 0; i < 20000; i++ {
			st := time.Now()
			if wait {
				p := c.Pipeline()
				p.Set(ctx, key, i, time.Minute)
				p.Do(ctx, "WAIT", 1, 100)
				if _, err := p.Exec(ctx); err != nil {
					log.Fatal(err)
				}
			} else if err := c.Set(ctx, key, i, time.Minute).Err(); err != nil {
				log.Fatal(err)
			}
			ds = append(ds, time.Since(st))
		}
		sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
		fmt.Printf("wait=%v p50=%v p99=%v\n", wait, ds[len(ds)/2], ds[len(ds)*99/100])
	}
}
