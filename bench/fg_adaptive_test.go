//go:build !nofg_adaptive

package bench

import (
	"context"
	"errors"

	"github.com/floodgate-go/floodgate/adaptive"
)

// floodgateAdaptive is floodgate's adaptive concurrency Limiter with each
// of its latency- and loss-based limits, at their defaults (an initial
// limit of 20, which the benchmark's goroutines never reach).
func floodgateAdaptive() []concLib {
	lib := func(name string, newLimit func() (adaptive.Limit, error)) concLib {
		return concLib{name: name, open: func() (func(context.Context) (bool, error), error) {
			limit, err := newLimit()
			if err != nil {
				return nil, err
			}
			l, err := adaptive.NewLimiter(limit, nil)
			if err != nil {
				return nil, err
			}
			return func(ctx context.Context) (bool, error) {
				tok, err := l.Acquire(ctx)
				if errors.Is(err, adaptive.ErrLimitExceeded) {
					return false, nil
				}
				if err != nil {
					return false, err
				}
				tok.Success()
				return true, nil
			}, nil
		}}
	}
	return []concLib{
		lib("floodgate-vegas", func() (adaptive.Limit, error) { return adaptive.NewVegas(nil) }),
		lib("floodgate-gradient2", func() (adaptive.Limit, error) {
			g, err := adaptive.NewGradient2(nil)
			if err != nil {
				return nil, err
			}
			return adaptive.NewWindowed(g, nil)
		}),
		lib("floodgate-aimd", func() (adaptive.Limit, error) { return adaptive.NewAIMD(nil) }),
	}
}
