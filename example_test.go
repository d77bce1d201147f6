package floodgate_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/memstore"
)

// exampleClock is a fixed clock, so that the examples' output does not
// depend on when they run. Real code leaves memstore.Options.Now nil.
func exampleClock() time.Time { return time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC) }

func ExampleNew() {
	store, err := memstore.New(nil)
	if err != nil {
		panic(err)
	}
	// 100 requests per second on average, bursts of up to 200.
	limiter, err := floodgate.New(store, floodgate.TokenBucket{Rate: 100, Per: time.Second, Burst: 200}, nil)
	if err != nil {
		panic(err)
	}
	fmt.Printf("%+v\n", limiter.Policy())

	// A configuration that cannot work is an error, never a panic.
	_, err = floodgate.New(store, floodgate.FixedWindow{Limit: 0, Window: time.Minute}, nil)
	fmt.Println(errors.Is(err, floodgate.ErrInvalidConfig))
	// Output:
	// {Quota:200 Window:2s}
	// true
}

func ExampleLimiter_allow() {
	store, _ := memstore.New(&memstore.Options{Now: exampleClock})
	limiter, _ := floodgate.New(store, floodgate.FixedWindow{Limit: 3, Window: time.Minute}, nil)
	ctx := context.Background()
	for range 4 {
		d, err := limiter.Allow(ctx, "user:42")
		if err != nil {
			fmt.Println("error:", err) // a bad argument or a failing store
			continue
		}
		if !d.Allowed {
			fmt.Printf("denied, retry after %v\n", d.RetryAfter)
			continue
		}
		fmt.Printf("allowed, %d left\n", d.Remaining)
	}
	// Output:
	// allowed, 2 left
	// allowed, 1 left
	// allowed, 0 left
	// denied, retry after 1m0s
}

func ExampleLimiter_reserve() {
	store, _ := memstore.New(&memstore.Options{Now: exampleClock})
	// Shape calls to a dependency to 10 per second, with up to 5 queued.
	limiter, _ := floodgate.New(store, floodgate.LeakyBucket{Rate: 10, Per: time.Second, Capacity: 5}, nil)
	ctx := context.Background()
	for range 6 {
		d, err := limiter.Reserve(ctx, "payments", 1, time.Second)
		if err != nil {
			fmt.Println("error:", err)
			continue
		}
		if !d.Allowed {
			fmt.Printf("queue full, retry after %v\n", d.RetryAfter)
			continue
		}
		// The caller sleeps d.Delay, then calls the dependency.
		fmt.Printf("go after %v\n", d.Delay)
	}
	// Output:
	// go after 0s
	// go after 100ms
	// go after 200ms
	// go after 300ms
	// go after 400ms
	// queue full, retry after 100ms
}

func ExampleLimiter_wait() {
	store, _ := memstore.New(&memstore.Options{Now: exampleClock})
	limiter, _ := floodgate.New(store, floodgate.TokenBucket{Rate: 1, Per: time.Second, Burst: 1}, nil)

	// The first unit is there: Wait returns at once.
	fmt.Println(limiter.Wait(context.Background(), "job", 1))

	// The next one refills in a second; a caller that can wait only 10 ms
	// is told at once instead of sleeping in vain, and takes nothing.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	err := limiter.Wait(ctx, "job", 1)
	fmt.Println(errors.Is(err, floodgate.ErrWaitExceedsDeadline), errors.Is(err, context.DeadlineExceeded))
	// Output:
	// <nil>
	// true true
}

// A monthly token budget that resets at 08:00 Tokyo time on the 1st,
// beside a per-second rate, with the cost settled once the work is done
// (an LLM completion whose tokens are known only at its end).
func ExampleCalendarWindow() {
	tokyo, err := time.LoadLocation("Asia/Tokyo")
	if err != nil {
		panic(err)
	}
	now := time.Date(2026, 12, 31, 23, 0, 0, 0, time.UTC) // 08:00 on 1 January in Tokyo
	store, _ := memstore.New(&memstore.Options{Now: func() time.Time { return now }})
	month := floodgate.CalendarWindow{Limit: 1_000_000, Unit: floodgate.Month, Location: tokyo, Offset: 8 * time.Hour}
	limiter, _ := floodgate.New(store, floodgate.Limits{
		floodgate.TokenBucket{Rate: 10_000, Per: time.Second, Burst: 20_000}, // tokens per second
		month, // tokens per calendar month
	}, nil)
	ctx := context.Background()

	start, end := month.Window(now)
	fmt.Println("window:", start.In(tokyo).Format(time.DateTime), "to", end.In(tokyo).Format(time.DateTime))

	// Admit the request on an estimate of 1,000 tokens...
	each := make([]floodgate.Decision, 2)
	res, _ := limiter.Apply(ctx, "tenant:7", floodgate.Request{Op: floodgate.OpTake, N: 1000}, each)
	fmt.Println("admitted:", res.Allowed, "month remaining:", each[1].Remaining)
	// ...and settle the 4,200 it cost, for the instant it was admitted for.
	_, _ = limiter.Apply(ctx, "tenant:7", floodgate.Request{Op: floodgate.OpSettle, N: 3200, At: res.At.Add(res.Delay)}, each)
	fmt.Println("month remaining:", each[1].Remaining, "resets in:", each[1].ResetAfter)
	// Output:
	// window: 2027-01-01 08:00:00 to 2027-02-01 08:00:00
	// admitted: true month remaining: 999000
	// month remaining: 995800 resets in: 744h0m0s
}

// A sliding window of 60 sub-windows never lets more than its Limit
// through in any minute, even to a client that fills it just before a
// boundary and retries when RetryAfter says: the two-counter estimate
// (SubWindows 0) lets that client through again as its estimate decays.
func ExampleSlidingWindow_subWindows() {
	now := time.Date(2025, 1, 1, 12, 0, 59, 0, time.UTC)
	store, err := memstore.New(&memstore.Options{Now: func() time.Time { return now }})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	for _, subs := range []int{0, 60} {
		limiter, err := floodgate.New(store, floodgate.SlidingWindow{Limit: 100, Window: time.Minute, SubWindows: subs}, nil)
		if err != nil {
			panic(err)
		}
		key := fmt.Sprint("client-", subs)
		start := now
		first, err := limiter.AllowN(ctx, key, 100) // the whole limit at 12:00:59
		if err != nil || !first.Allowed {
			panic(fmt.Sprint(first, err))
		}
		// Then one request every RetryAfter, until a minute after the
		// burst.
		got := int64(0)
		for now.Before(start.Add(time.Minute)) {
			d, err := limiter.Allow(ctx, key)
			if err != nil {
				panic(err)
			}
			if d.Allowed {
				got++
				continue
			}
			now = now.Add(d.RetryAfter)
		}
		fmt.Printf("SubWindows %d: 100 at once, then %d more within the same minute\n", subs, got)
		now = start
	}
	// Output:
	// SubWindows 0: 100 at once, then 98 more within the same minute
	// SubWindows 60: 100 at once, then 0 more within the same minute
}
