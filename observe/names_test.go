package observe_test

import (
	"errors"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/adaptive"
	"github.com/floodgate-go/floodgate/adaptive/shed"
	"github.com/floodgate-go/floodgate/inflight"
	"github.com/floodgate-go/floodgate/lease"
	"github.com/floodgate-go/floodgate/memstore"
	"github.com/floodgate-go/floodgate/observe"
	"github.com/floodgate-go/floodgate/redisstore"
)

// TestComponentsRefuseNamesNotUTF8 gives every component that takes a
// name one that is not UTF-8, which no metrics adapter can use as a label
// value: each must refuse it with floodgate.ErrInvalidConfig when it is
// built or bound, rather than hand it to an observer on a caller's
// goroutine. The rule is floodgate.CheckName's, which replaced
// observe.CheckName.
func TestComponentsRefuseNamesNotUTF8(t *testing.T) {
	const bad = "api\xff"
	if err := floodgate.CheckName(bad); !errors.Is(err, floodgate.ErrInvalidConfig) {
		t.Errorf("CheckName(%q) = %v, want ErrInvalidConfig", bad, err)
	}
	for _, good := range []string{"api", "Überweisung", "支付", "tb:10/1s:b10"} {
		if err := floodgate.CheckName(good); err != nil {
			t.Errorf("CheckName(%q) = %v, want nil", good, err)
		}
	}
	store, err := memstore.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	m := miniredis.RunT(t)
	client := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { _ = client.Close() })
	limit, err := adaptive.NewAIMD(nil)
	if err != nil {
		t.Fatal(err)
	}
	alg := floodgate.TokenBucket{Rate: 10, Per: time.Second, Burst: 10}
	for name, build := range map[string]func() error{
		"redisstore": func() error { _, err := redisstore.New(client, &redisstore.Options{Name: bad}); return err },
		"lease": func() error {
			ls, err := lease.New(store, nil)
			if err != nil {
				return nil // not the error sought: reported as such below
			}
			defer ls.Close()
			_, err = floodgate.New(ls, alg, &floodgate.Options{Name: bad})
			return err
		},
		"adaptive": func() error { _, err := adaptive.NewLimiter(limit, &adaptive.LimiterOptions{Name: bad}); return err },
		"shed": func() error {
			_, err := shed.New(shed.GaugeFunc(func() float64 { return 0 }), &shed.Options{Name: bad})
			return err
		},
		"inflight": func() error {
			_, err := inflight.New(inflight.NewLocalStore(), 10, &inflight.Options{Name: bad})
			return err
		},
		"observe.Store": func() error {
			s, err := observe.Store(store, &observe.Observer{Tally: new(observe.Tally)})
			if err != nil {
				return nil
			}
			_, err = floodgate.New(s, alg, &floodgate.Options{Name: bad})
			return err
		},
		"observe.Store Bind": func() error {
			s, err := observe.Store(store, &observe.Observer{Tally: new(observe.Tally)})
			if err != nil {
				return nil
			}
			_, err = s.Bind(bad, alg)
			return err
		},
	} {
		if err := build(); !errors.Is(err, floodgate.ErrInvalidConfig) {
			t.Errorf("%s with name %q: %v, want an error matching ErrInvalidConfig", name, bad, err)
		}
	}
}
