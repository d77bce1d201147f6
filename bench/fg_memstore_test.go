package bench

import (
	"context"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/memstore"
)

// floodgateInProc returns floodgate on its in-process store: the token
// bucket (the bar of the issue) and, for like-for-like comparisons, the
// fixed window (the algorithm of ulule and, in effect, sethvargo) and the
// sliding window counter (httprate's).
func floodgateInProc() []inProc {
	open := func(alg func(q quota) floodgate.Algorithm) func(q quota) (func(string) bool, func(), error) {
		return func(q quota) (func(string) bool, func(), error) {
			s, err := memstore.New(nil)
			if err != nil {
				return nil, nil, err
			}
			lim, err := floodgate.New(s, alg(q))
			if err != nil {
				return nil, nil, err
			}
			ctx := context.Background()
			allow := func(key string) bool {
				d, err := lim.Allow(ctx, key)
				return err == nil && d.Allowed
			}
			return allow, func() {}, nil
		}
	}
	return []inProc{
		{name: "floodgate", open: open(func(q quota) floodgate.Algorithm {
			return floodgate.TokenBucket{Rate: q.Limit, Per: q.Period, Burst: q.Limit}
		})},
		{name: "floodgate-fixedwindow", open: open(func(q quota) floodgate.Algorithm {
			return floodgate.FixedWindow{Limit: q.Limit, Window: q.Period}
		})},
		{name: "floodgate-slidingwindow", open: open(func(q quota) floodgate.Algorithm {
			return floodgate.SlidingWindow{Limit: q.Limit, Window: q.Period}
		})},
	}
}
