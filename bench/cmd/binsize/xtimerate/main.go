// Command xtimerate is the golang.org/x/time/rate half of the binary-size
// comparison (see package main in the parent directory): the program of
// fgmemstore, one rate.Limiter per key in a map.
package main

import (
	"fmt"

	"golang.org/x/time/rate"
)

func main() {
	limiters := map[string]*rate.Limiter{}
	for _, key := range []string{"alice", "bob", "carol"} {
		lim, ok := limiters[key]
		if !ok {
			lim = rate.NewLimiter(10, 5) // 10 per second, bursts of 5
			limiters[key] = lim
		}
		admitted := 0
		for range 8 {
			if lim.Allow() {
				admitted++
			}
		}
		fmt.Println(key, admitted, "of 8 admitted")
	}
}
