package shard

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/memstore"
)

// TestKeysBounded: 10,000 keys through a Store of MaxKeys 100 keep at most
// 100 entries per limiter.
func TestKeysBounded(t *testing.T) {
	mem, err := memstore.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(mem, &Options{Shards: 4, MaxKeys: 100})
	if err != nil {
		t.Fatal(err)
	}
	fb, err := s.Bind("rot", floodgate.FixedWindow{Limit: 8, Window: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	b := fb.(*bound)
	for i := range 10_000 {
		if _, err := b.Take(context.Background(), strconv.Itoa(i), 1); err != nil {
			t.Fatal(err)
		}
		n := 0
		if i%500 == 0 {
			b.keys.Range(func(_, _ any) bool { n++; return true })
			if n > 100 || b.n > 100 {
				t.Fatalf("after %d keys: %d entries (counted %d), want at most 100", i+1, n, b.n)
			}
		}
	}
}
