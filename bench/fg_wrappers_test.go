//go:build !nofg_lease

package bench

import (
	"context"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/lease"
	"github.com/floodgate-go/floodgate/memstore"
	"github.com/floodgate-go/floodgate/observe"
)

// floodgateWrapped returns floodgate's token bucket on memstore through
// its wrappers, for the in-process scenarios: observed by a Tally (what
// the metrics adapters install), and leased (decisions served from a
// local pool over memstore: the lease layer's own cost, without Redis).
func floodgateWrapped() []inProc {
	return []inProc{
		{name: "floodgate-observed", open: func(q quota) (func(string) bool, func(), error) {
			s, err := memstore.New(nil)
			if err != nil {
				return nil, nil, err
			}
			observed, err := observe.Store(s, &observe.Observer{Tally: new(observe.Tally)})
			if err != nil {
				return nil, nil, err
			}
			return allowOf(observed, q, func() {})
		}},
		{name: "floodgate-leased", open: func(q quota) (func(string) bool, func(), error) {
			s, err := memstore.New(nil)
			if err != nil {
				return nil, nil, err
			}
			leased, err := lease.New(s, nil)
			if err != nil {
				return nil, nil, err
			}
			return allowOf(leased, q, func() { _ = leased.Close() })
		}},
	}
}

// allowOf returns the Allow of a token bucket of q on store.
func allowOf(store floodgate.Store, q quota, closeFn func()) (func(string) bool, func(), error) {
	lim, err := floodgate.New(store, tokenBucket(q), &floodgate.Options{Name: "bench"})
	if err != nil {
		closeFn()
		return nil, nil, err
	}
	ctx := context.Background()
	return func(key string) bool {
		d, err := lim.Allow(ctx, key)
		return err == nil && d.Allowed
	}, closeFn, nil
}
