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
// Name one that is not UTF-8, which no metrics adapter can use as a label
// value: each must refuse it with floodgate.ErrInvalidConfig when it is
// built, rather than hand it to an observer on a caller's goroutine.
func TestComponentsRefuseNamesNotUTF8(t *testing.T) {
	const bad = "api\xff"
	if err := observe.CheckName(bad); !errors.Is(err, floodgate.ErrInvalidConfig) {
		t.Errorf("CheckName(%q) = %v, want ErrInvalidConfig", bad, err)
	}
	for _, good := range []string{"", "api", "Überweisung", "支付"} {
		if err := observe.CheckName(good); err != nil {
			t.Errorf("CheckName(%q) = %v, want nil", good, err)
		}
	}
	store, err := memstore.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	remote, err := floodgate.New(store, floodgate.TokenBucket{Rate: 10, Per: time.Second, Burst: 10})
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
	for name, build := range map[string]func() error{
		"redisstore": func() error { _, err := redisstore.New(client, &redisstore.Options{Name: bad}); return err },
		"lease":      func() error { _, err := lease.New(remote, &lease.Options{Name: bad}); return err },
		"adaptive":   func() error { _, err := adaptive.NewLimiter(limit, &adaptive.LimiterOptions{Name: bad}); return err },
		"shed": func() error {
			_, err := shed.New(shed.GaugeFunc(func() float64 { return 0 }), &shed.Options{Name: bad})
			return err
		},
		"inflight": func() error { _, err := inflight.New(store, 10, &inflight.Options{Name: bad}); return err },
		"observe.New": func() error {
			_, err := observe.New(store, floodgate.FixedWindow{Limit: 1, Window: time.Second}, bad, &observe.Observer{Tally: new(observe.Tally)})
			return err
		},
	} {
		if err := build(); !errors.Is(err, floodgate.ErrInvalidConfig) {
			t.Errorf("%s with Name %q: %v, want an error matching ErrInvalidConfig", name, bad, err)
		}
	}
}
