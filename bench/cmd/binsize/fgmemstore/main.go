// Command fgmemstore is the floodgate half of the binary-size comparison
// (see package main in the parent directory): one token bucket on memstore,
// a few keys, the decisions printed. xtimerate does the same with
// golang.org/x/time/rate.
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/memstore"
)

func main() {
	store, err := memstore.New(nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	lim, err := floodgate.New(store, floodgate.TokenBucket{Rate: 10, Per: time.Second, Burst: 5}, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	ctx := context.Background()
	for _, key := range []string{"alice", "bob", "carol"} {
		admitted := 0
		for range 8 {
			d, err := lim.Allow(ctx, key)
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
			if d.Allowed {
				admitted++
			}
		}
		fmt.Println(key, admitted, "of 8 admitted")
	}
}
