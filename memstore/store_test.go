package memstore_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"pgregory.net/rapid"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/floodgatetest"
	"github.com/floodgate-go/floodgate/memstore"
)

const ms = time.Millisecond

// t0 is the tests' starting instant, aligned to every window they use.
var t0 = time.Unix(1_700_000_000, 0)

// tb is what the helpers need of a *testing.T or a *rapid.T.
type tb interface {
	Helper()
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
	FailNow()
}

func newMemStore(t tb, opts *memstore.Options) *memstore.Store {
	t.Helper()
	s, err := memstore.New(opts)
	require.NoError(t, err)
	return s
}

func take(n int64) floodgate.Request { return floodgate.Request{Op: floodgate.OpTake, N: n} }

// apply calls s.Apply and requires no error.
func apply(t tb, s *memstore.Store, key string, alg floodgate.Algorithm, req floodgate.Request) floodgate.Result {
	t.Helper()
	res, err := applyOnce(context.Background(), s, key, alg, req)
	require.NoError(t, err, "Apply(%q, %v, %+v)", key, alg, req)
	return res
}

func TestNewOptions(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts *memstore.Options
		ok   bool
	}{
		{"nil", nil, true},
		{"zero", &memstore.Options{}, true},
		{"one shard, one key", &memstore.Options{Shards: 1, MaxKeys: 1}, true},
		{"many shards", &memstore.Options{Shards: 1 << 20}, true},
		{"negative MaxKeys", &memstore.Options{MaxKeys: -1}, false},
		{"negative Shards", &memstore.Options{Shards: -1}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := memstore.New(tc.opts)
			if !tc.ok {
				assert.ErrorIs(t, err, memstore.ErrInvalidOptions, "New(%+v)", tc.opts)
				assert.Nil(t, s)
				return
			}
			require.NoError(t, err)
			res := apply(t, s, "k", floodgate.TokenBucket{Rate: 1, Per: time.Second, Burst: 2}, take(1))
			assert.True(t, res.Allowed)
			assert.Equal(t, 1, s.Len())
		})
	}
}

// TestUnsupportedAlgorithm: Apply takes the five configurations as values
// (floodgate.New dereferences pointers, the one place that does); a pointer
// or nil is an error matching ErrInvalidConfig, not a panic, and leaves no
// entry behind.
func TestUnsupportedAlgorithm(t *testing.T) {
	s := newMemStore(t, nil)
	_, err := applyOnce(context.Background(), s, "k", &floodgate.TokenBucket{Rate: 1, Per: time.Second, Burst: 1}, take(1))
	assert.ErrorIs(t, err, floodgate.ErrInvalidConfig)
	var nilAlg floodgate.Algorithm
	assert.NotPanics(t, func() { _, err = applyOnce(context.Background(), s, "k", nilAlg, take(1)) })
	assert.ErrorIs(t, err, floodgate.ErrInvalidConfig)
	_, err = s.Bind(testName, (*floodgate.SlidingLog)(nil))
	assert.ErrorIs(t, err, floodgate.ErrInvalidConfig)
	assert.Zero(t, s.Len())
	lim, err := floodgate.New(s, &floodgate.TokenBucket{Rate: 1, Per: time.Second, Burst: 1}, testOpts)
	require.NoError(t, err, "New dereferences a pointer configuration")
	d, err := lim.Allow(context.Background(), "k")
	require.NoError(t, err)
	assert.True(t, d.Allowed)
}

// TestStateBelongsToKeyAndKind: a key's state belongs to (key, kind), as
// floodgate.Store requires: two configurations of one kind share it (here
// with different packings, so the key's word moves under a mutex), two
// kinds do not, and two keys do not.
func TestStateBelongsToKeyAndKind(t *testing.T) {
	clock := floodgatetest.NewClock(t0)
	s := newMemStore(t, &memstore.Options{Now: clock.Now})
	a := floodgate.FixedWindow{Limit: 1, Window: time.Second}
	b := floodgate.FixedWindow{Limit: 2, Window: time.Minute}
	assert.True(t, apply(t, s, "k", a, take(1)).Allowed)
	res := apply(t, s, "k", b, take(1))
	assert.True(t, res.Allowed, "b counts a's unit and has room for one more")
	assert.EqualValues(t, 0, res.Remaining, "b counts a's unit")
	assert.False(t, apply(t, s, "k", b, take(1)).Allowed, "b's limit of 2 is spent")
	assert.False(t, apply(t, s, "k", a, take(1)).Allowed, "a sees b's units")
	assert.True(t, apply(t, s, "k2", a, take(1)).Allowed, "another key under the same configuration")
	assert.True(t, apply(t, s, "k", floodgate.TokenBucket{Rate: 1, Per: time.Second, Burst: 1}, take(1)).Allowed, "another kind")
	assert.Equal(t, 3, s.Len())
}

// TestExactUnderContention is the exactness bar: 64 goroutines × 10,000
// calls on one key with a frozen clock admit exactly the quota (at most the
// quota for the sliding window counter, whose estimate is approximate).
func TestExactUnderContention(t *testing.T) {
	// The full count takes about 7 s under -race on 2 busy cores, 0.4 s
	// without.
	const goroutines, calls = 64, 10_000
	const quota = 100_000
	for _, tc := range []struct {
		name   string
		alg    floodgate.Algorithm
		atMost bool
	}{
		{"TokenBucket", floodgate.TokenBucket{Rate: 1, Per: time.Second, Burst: quota}, false},
		{"FixedWindow/packed", floodgate.FixedWindow{Limit: quota, Window: time.Hour}, false},
		// A 1 µs window leaves too few bits beside a limit of 100,000 to
		// pack the state in one word: this one takes the locked path.
		{"FixedWindow/locked", floodgate.FixedWindow{Limit: quota, Window: time.Microsecond}, false},
		{"SlidingLog", floodgate.SlidingLog{Limit: quota, Window: time.Hour}, false},
		{"SlidingWindow", floodgate.SlidingWindow{Limit: quota, Window: time.Hour}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := int64(quota)
			frozen := t0.Add(30*time.Minute + 500)
			s := newMemStore(t, &memstore.Options{Now: func() time.Time { return frozen }})
			var (
				admitted, allowed, denied atomic.Int64
				wg                        sync.WaitGroup
				errs                      = make(chan error, goroutines)
				start                     = make(chan struct{})
			)
			for range goroutines {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					for range calls {
						res, err := applyOnce(context.Background(), s, "hot", tc.alg, take(1))
						if err != nil {
							errs <- err
							return
						}
						admitted.Add(res.Granted)
						if res.Allowed {
							allowed.Add(1)
						} else {
							denied.Add(1)
						}
					}
				}()
			}
			close(start)
			wg.Wait()
			close(errs)
			for err := range errs {
				require.NoError(t, err)
			}
			assert.Equal(t, int64(goroutines*calls), allowed.Load()+denied.Load())
			assert.Equal(t, allowed.Load(), admitted.Load(), "units granted vs admissions of 1 unit")
			if tc.atMost {
				assert.LessOrEqual(t, admitted.Load(), q, "admitted")
				assert.Greater(t, admitted.Load(), q*9/10, "admitted")
			} else {
				assert.Equal(t, q, admitted.Load(), "admitted by %d goroutines × %d calls, quota %d", goroutines, calls, q)
			}
			// The next call sees the quota spent.
			res := apply(t, s, "hot", tc.alg, take(1))
			assert.False(t, res.Allowed, "Apply after the quota was spent = %+v", res.Decision)
		})
	}
}

// algorithmsForSweep are small configurations of every algorithm, so that
// random traces fill, restore and reclaim keys often.
var algorithmsForSweep = []floodgate.Algorithm{
	floodgate.TokenBucket{Rate: 2, Per: time.Second, Burst: 3},
	floodgate.LeakyBucket{Rate: 2, Per: time.Second, Capacity: 3},
	floodgate.FixedWindow{Limit: 3, Window: time.Second},
	floodgate.SlidingWindow{Limit: 3, Window: time.Second},
	floodgate.SlidingLog{Limit: 3, Window: time.Second},
}

// TestReclamationChangesNoDecision runs random traces over many keys of
// every algorithm on a store with one shard per algorithm (so that
// insertions sweep often), calling Sweep at random points, and requires the
// decisions of the reference Steps, which never forget anything. It also
// requires that reclamation happened.
func TestReclamationChangesNoDecision(t *testing.T) {
	var swept atomic.Int64
	rapid.Check(t, func(rt *rapid.T) {
		clock := floodgatetest.NewClock(t0)
		s := newMemStore(rt, &memstore.Options{Now: clock.Now, Shards: 1})
		ref := new(floodgatetest.Reference)
		// A few keys that the trace revisits, and one-off keys that grow the
		// shards so that insertions sweep them.
		alg := algorithmsForSweep[rapid.IntRange(0, len(algorithmsForSweep)-1).Draw(rt, "alg")]
		nkeys := rapid.IntRange(1, 3).Draw(rt, "keys")
		oneOff := 0
		type slot struct {
			key string
			alg floodgate.Algorithm
		}
		admitted := map[slot][]time.Time{}
		now := t0.Add(time.Duration(rapid.Int64Range(0, int64(time.Second)).Draw(rt, "start")))
		for i := range rapid.IntRange(1, 300).Draw(rt, "steps") {
			// The clock never goes back here: a store reclaims an entry
			// restored at the clock's latest reading, which a clock that then
			// goes back would find not quite restored (see TestTimeGoingBackwards
			// for what a clock going back may do). memstore's own clock is
			// monotonic.
			switch rapid.IntRange(0, 9).Draw(rt, "clock") {
			case 0, 1, 2, 3:
			case 4:
				now = now.Add(time.Duration(rapid.Int64Range(1, int64(3*time.Second)).Draw(rt, "jump")))
			default:
				now = now.Add(50 * ms * time.Duration(rapid.Int64Range(1, 10).Draw(rt, "ticks")))
			}
			clock.Set(now)
			switch rapid.IntRange(0, 9).Draw(rt, "sweep") {
			case 0:
				before := s.Len()
				s.Sweep()
				swept.Add(int64(before - s.Len()))
				continue
			case 1, 2:
				for range rapid.IntRange(1, 80).Draw(rt, "oneOff") {
					oneOff++
					key := fmt.Sprintf("one-off/%d", oneOff)
					want, err := ref.Apply(testName, key, alg, now, take(1), nil)
					require.NoError(rt, err)
					if got := apply(rt, s, key, alg, take(1)); !floodgatetest.SameResult(want, got) {
						rt.Fatalf("step %d: %v on %s at T0+%v:\n got %+v\nwant %+v", i, alg, key, now.Sub(t0), got, want)
					}
				}
				continue
			}
			sl := slot{key: "k" + strconv.Itoa(rapid.IntRange(0, nkeys-1).Draw(rt, "key")), alg: alg}
			req := floodgate.Request{N: rapid.Int64Range(1, 3).Draw(rt, "n")}
			switch rapid.IntRange(0, 5).Draw(rt, "op") {
			case 0:
				req.Op = floodgate.OpTakeUpTo
			case 1:
				req.Op = floodgate.OpSettle
				req.N = -req.N
				req.At = now
				if at := admitted[sl]; len(at) > 0 {
					req.At = at[rapid.IntRange(0, len(at)-1).Draw(rt, "which")]
				}
			case 2, 3:
				req.MaxDelay = time.Duration(rapid.Int64Range(0, int64(3*time.Second)).Draw(rt, "maxDelay"))
			}
			want, err := ref.Apply(testName, sl.key, sl.alg, now, req, nil)
			require.NoError(rt, err)
			got := apply(rt, s, sl.key, sl.alg, req)
			if !floodgatetest.SameResult(want, got) {
				rt.Fatalf("step %d: %v on %s at T0+%v, %+v:\n got %+v\nwant %+v (never reclaimed)", i, sl.alg, sl.key, now.Sub(t0), req, got, want)
			}
			if got.Allowed && req.Op != floodgate.OpSettle {
				admitted[sl] = append(admitted[sl], got.At.Add(got.Delay))
			}
		}
	})
	assert.Positive(t, swept.Load(), "Sweep never reclaimed an entry: the test does not exercise reclamation")
}

// TestSweepReclaimsRestoredEntries checks that Sweep and insertions reclaim
// exactly the entries whose quota is restored, for every algorithm.
func TestSweepReclaimsRestoredEntries(t *testing.T) {
	for _, alg := range algorithmsForSweep {
		t.Run(algName(alg), func(t *testing.T) {
			clock := floodgatetest.NewClock(t0)
			s := newMemStore(t, &memstore.Options{Now: clock.Now, Shards: 1})
			for i := range 100 {
				apply(t, s, "a"+strconv.Itoa(i), alg, take(1))
			}
			require.Equal(t, 100, s.Len())
			s.Sweep()
			assert.Equal(t, 100, s.Len(), "Sweep reclaimed entries that are not restored")

			// Every entry is restored by T0+2 s (the sliding window counter's
			// at the end of the window after the one it counted in). Half of
			// the keys, used again then, are still in use 100 ms later.
			clock.Advance(2500 * ms)
			for i := range 50 {
				apply(t, s, "a"+strconv.Itoa(i), alg, take(1))
			}
			clock.Advance(100 * ms)
			s.Sweep()
			assert.Equal(t, 50, s.Len(), "after Sweep: the 50 keys used 100 ms ago remain")
			clock.Advance(time.Hour)
			s.Sweep()
			assert.Zero(t, s.Len(), "after Sweep an hour later")

			// Insertions into a shard that doubled since its last sweep
			// reclaim restored entries without Sweep.
			for i := range 1000 {
				clock.Advance(10 * time.Second) // every earlier key is restored
				apply(t, s, "b"+strconv.Itoa(i), alg, take(1))
			}
			assert.Less(t, s.Len(), 200, "1000 one-off keys, each restored before the next came")
		})
	}
}

// TestMaxKeys checks that with MaxKeys = 1000, 10,000 distinct keys keep at
// most 1000 entries, and that the evicted keys start over with a full quota.
func TestMaxKeys(t *testing.T) {
	const maxKeys, keys = 1000, 10_000
	for _, alg := range algorithmsForSweep {
		t.Run(algName(alg), func(t *testing.T) {
			clock := floodgatetest.NewClock(t0)
			s := newMemStore(t, &memstore.Options{Now: clock.Now, MaxKeys: maxKeys})
			quota := alg.Policy().Quota
			// With a delay allowed, the leaky bucket queues the second unit
			// instead of denying it.
			req := floodgate.Request{N: 1, MaxDelay: time.Second}
			for i := range keys {
				res := apply(t, s, strconv.Itoa(i), alg, req)
				require.True(t, res.Allowed)
				require.LessOrEqual(t, s.Len(), maxKeys, "after inserting key %d", i)
			}
			assert.Equal(t, maxKeys, s.Len())
			// Each key still tracked remembers its unit; each evicted one
			// starts over with the whole quota.
			fresh, remembered := 0, 0
			for i := range keys {
				res := apply(t, s, strconv.Itoa(i), alg, req)
				require.True(t, res.Allowed, "key %d", i)
				switch res.Remaining {
				case quota - 1:
					fresh++
				case quota - 2:
					remembered++
				default:
					t.Fatalf("key %d: Remaining %d, want %d (evicted) or %d (tracked)", i, res.Remaining, quota-1, quota-2)
				}
			}
			assert.LessOrEqual(t, remembered, maxKeys)
			assert.GreaterOrEqual(t, fresh, keys-maxKeys)
			assert.LessOrEqual(t, s.Len(), maxKeys)
		})
	}
}

// TestMaxKeysPerConfiguration checks that MaxKeys bounds each configuration
// separately, as documented.
func TestMaxKeysPerConfiguration(t *testing.T) {
	clock := floodgatetest.NewClock(t0)
	s := newMemStore(t, &memstore.Options{Now: clock.Now, MaxKeys: 100})
	for i := range 1000 {
		for _, alg := range algorithmsForSweep {
			apply(t, s, strconv.Itoa(i), alg, take(1))
		}
	}
	assert.LessOrEqual(t, s.Len(), 100*len(algorithmsForSweep))
	assert.Greater(t, s.Len(), 100*(len(algorithmsForSweep)-1), "each configuration holds up to its cap")
}

// TestMaxKeysTiny checks the smallest caps, where the store has one shard
// and every insertion evicts.
func TestMaxKeysTiny(t *testing.T) {
	for _, maxKeys := range []int{1, 2, 17} {
		t.Run(strconv.Itoa(maxKeys), func(t *testing.T) {
			clock := floodgatetest.NewClock(t0)
			s := newMemStore(t, &memstore.Options{Now: clock.Now, MaxKeys: maxKeys, Shards: 64})
			for _, alg := range algorithmsForSweep {
				for i := range 100 {
					apply(t, s, strconv.Itoa(i), alg, take(1))
				}
			}
			assert.LessOrEqual(t, s.Len(), maxKeys*len(algorithmsForSweep))
		})
	}
}

// TestMaxKeysConcurrent inserts distinct keys from many goroutines into a
// capped store: each insertion counts its entry before checking the cap, so
// insertions into different shards cannot both see room for one key.
func TestMaxKeysConcurrent(t *testing.T) {
	const maxKeys = 1000
	for _, alg := range []floodgate.Algorithm{algorithmsForSweep[0], algorithmsForSweep[4]} {
		t.Run(algName(alg), func(t *testing.T) {
			clock := floodgatetest.NewClock(t0)
			s := newMemStore(t, &memstore.Options{Now: clock.Now, MaxKeys: maxKeys})
			var wg sync.WaitGroup
			for g := range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range 2000 {
						_, _ = applyOnce(context.Background(), s, fmt.Sprintf("%d/%d", g, i), alg, take(1))
					}
				}()
			}
			wg.Wait()
			assert.LessOrEqual(t, s.Len(), maxKeys)
		})
	}
}

// TestTimeGoingBackwards runs a random trace forwards, then moves the clock
// back and spends what is left, one unit at a time, on one store, and at the
// latest instant on a twin that saw the same trace: going back never admits
// more than staying at the later time.
func TestTimeGoingBackwards(t *testing.T) {
	for _, alg := range algorithmsForSweep {
		t.Run(algName(alg), func(t *testing.T) {
			rapid.Check(t, func(rt *rapid.T) {
				back, frozen := floodgatetest.NewClock(t0), floodgatetest.NewClock(t0)
				sBack := newMemStore(rt, &memstore.Options{Now: back.Now})
				sFrozen := newMemStore(rt, &memstore.Options{Now: frozen.Now})
				now := t0
				// The last step of the history is at the latest instant: the
				// key's state has seen it.
				for i := range rapid.IntRange(1, 20).Draw(rt, "steps") {
					if i > 0 {
						now = now.Add(time.Duration(rapid.Int64Range(0, int64(700*ms)).Draw(rt, "dt")))
					}
					back.Set(now)
					frozen.Set(now)
					req := take(rapid.Int64Range(1, 3).Draw(rt, "n"))
					if rapid.Bool().Draw(rt, "reserve") {
						req.MaxDelay = time.Duration(rapid.Int64Range(0, int64(2*time.Second)).Draw(rt, "maxDelay"))
					}
					a, b := apply(rt, sBack, "k", alg, req), apply(rt, sFrozen, "k", alg, req)
					require.True(rt, floodgatetest.SameResult(a, b))
				}
				back.Set(now.Add(-time.Duration(rapid.Int64Range(1, int64(3*time.Second)).Draw(rt, "back"))))
				maxDelay := time.Duration(rapid.Int64Range(0, int64(2*time.Second)).Draw(rt, "finalMaxDelay"))
				count := func(s *memstore.Store) (n int64) {
					for range 10 {
						if apply(rt, s, "k", alg, floodgate.Request{N: 1, MaxDelay: maxDelay}).Allowed {
							n++
						}
					}
					return n
				}
				b, f := count(sBack), count(sFrozen)
				if b > f {
					rt.Fatalf("%v: with the clock moved back to T0+%v, %d units admitted (maxDelay %v); at T0+%v, %d", alg, back.Now().Sub(t0), b, maxDelay, now.Sub(t0), f)
				}
			})
		})
	}
}

// TestZeroAllocs checks that a decision on an existing key allocates
// nothing, through Store.Apply and through a Limiter's AllowN, for every
// algorithm, with the clock moving so that admissions and denials alternate.
func TestZeroAllocs(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		alg    floodgate.Algorithm
		n1, n2 int64 // the costs of the Apply and the AllowN of each step
	}{
		{floodgate.TokenBucket{Rate: 10, Per: time.Second, Burst: 100}, 3, 2},
		{floodgate.LeakyBucket{Rate: 10, Per: time.Second, Capacity: 100}, 3, 2},
		{floodgate.FixedWindow{Limit: 100, Window: time.Second}, 3, 2},
		// A limit of 1000 per µs does not pack in one word: the locked path.
		// Each step is in a new window; its AllowN finds the window full.
		{floodgate.FixedWindow{Limit: 1000, Window: time.Microsecond}, 600, 600},
		{floodgate.SlidingWindow{Limit: 100, Window: time.Second}, 3, 2},
		{floodgate.SlidingLog{Limit: 100, Window: time.Second}, 3, 2},
	} {
		alg := tc.alg
		t.Run(fmt.Sprint(alg), func(t *testing.T) {
			clock := floodgatetest.NewClock(t0)
			s := newMemStore(t, &memstore.Options{Now: clock.Now})
			l, err := floodgate.New(s, alg, testOpts)
			require.NoError(t, err)
			b, err := s.Bind(testName, alg)
			require.NoError(t, err)
			var allowed, denied int
			step := func() {
				clock.Advance(7 * ms)
				res, err := b.Apply(ctx, "k", floodgate.Request{N: tc.n1, MaxDelay: 10 * ms}, nil)
				if err != nil {
					panic(err)
				}
				if res.Allowed {
					allowed++
				} else {
					denied++
				}
				d, err := l.AllowN(ctx, "k", tc.n2)
				if err != nil {
					panic(err)
				}
				if d.Allowed {
					allowed++
				} else {
					denied++
				}
			}
			// Warm up: grow the sliding log's ring to its steady size.
			for range 2000 {
				step()
			}
			assert.Zero(t, testing.AllocsPerRun(1000, step), "allocations per Bound.Apply + AllowN on an existing key")
			assert.Positive(t, allowed)
			assert.Positive(t, denied)
		})
	}
}

// TestNoGoroutines checks that a store starts no goroutine: it reclaims
// memory on insertion and in Sweep, never in the background.
func TestNoGoroutines(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	for _, opts := range []*memstore.Options{nil, {MaxKeys: 10, Shards: 1}} {
		s := newMemStore(t, opts)
		for i := range 100 {
			for _, alg := range algorithmsForSweep {
				apply(t, s, strconv.Itoa(i), alg, take(1))
			}
		}
		s.Sweep()
	}
}
