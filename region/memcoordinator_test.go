package region

import (
	"context"
	"errors"
	"testing"
	"time"
)

// t0 is the start of window 1000 of a minute.
var t0 = time.Unix(0, 1000*int64(time.Minute))

func exchange(t *testing.T, c Coordinator, region string, at time.Time, q QuotaMessage) QuotaReply {
	t.Helper()
	r, err := c.Exchange(context.Background(), &Message{Region: region, At: at, Quotas: []QuotaMessage{q}})
	if err != nil {
		t.Fatalf("Exchange: %v", err)
	}
	return r.Quotas[0]
}

var three = []Region{{Name: "a", Floor: 0.1}, {Name: "b", Floor: 0.1}, {Name: "c"}}

// TestLedger steps a MemCoordinator through the protocol: floors, raises
// capped by the units nobody holds, debits applied once per transfer id
// and clamped, the next window, and the forgetting of old windows.
func TestLedger(t *testing.T) {
	c, err := NewMemCoordinator(three)
	if err != nil {
		t.Fatal(err)
	}
	base := QuotaMessage{ID: "q", Limit: 100, Window: time.Minute}
	msg := func(f func(*QuotaMessage)) QuotaMessage { m := base; f(&m); return m }

	r := exchange(t, c, "c", t0, base)
	if g := r.Windows[0].Granted; g[0] != 10 || g[1] != 10 || g[2] != 0 || r.Windows[0].Index != 1000 || r.Windows[1].Index != 1001 {
		t.Fatalf("fresh ledger: %+v, want floors 10, 10, 0 in windows 1000 and 1001", r.Windows)
	}
	// a asks for 70 of 100 (80 are free): it gets 70 in all.
	r = exchange(t, c, "a", t0, msg(func(m *QuotaMessage) { m.Raises = []Raise{{Window: 1000, To: 70}} }))
	if g := r.Windows[0].Granted[0]; g != 70 {
		t.Fatalf("raise to 70: granted %d", g)
	}
	// b asks for 50: only 20 are free (70 + 10 held), so it gets 10 + 20.
	r = exchange(t, c, "b", t0, msg(func(m *QuotaMessage) { m.Raises = []Raise{{Window: 1000, To: 50}} }))
	if g := r.Windows[0].Granted[1]; g != 30 {
		t.Fatalf("raise to 50 with 20 free: granted %d, want 30", g)
	}
	// a gives back 20 under transfer id x, twice: counted once.
	for range 2 {
		r = exchange(t, c, "a", t0, msg(func(m *QuotaMessage) { m.Debits = []Debit{{ID: "x", Window: 1000, Units: 20}} }))
		if d := r.Windows[0].Debited[0]; d != 20 || len(r.Acked) != 1 || r.Acked[0] != "x" {
			t.Fatalf("debit x: debited %d, acked %v", d, r.Acked)
		}
	}
	// b now gets its 50.
	r = exchange(t, c, "b", t0, msg(func(m *QuotaMessage) { m.Raises = []Raise{{Window: 1000, To: 50}} }))
	if g := r.Windows[0].Granted[1]; g != 50 {
		t.Fatalf("raise to 50 with 20 free: granted %d", g)
	}
	if h := c.Held("q", 100, time.Minute, 1000); h != 100 {
		t.Fatalf("Held = %d, want 100", h)
	}
	// A debit above what a region holds is clamped to it.
	r = exchange(t, c, "c", t0, msg(func(m *QuotaMessage) { m.Debits = []Debit{{ID: "y", Window: 1000, Units: 5}} }))
	if d := r.Windows[0].Debited[2]; d != 0 {
		t.Fatalf("debit of 5 by a region holding 0: debited %d", d)
	}
	// The next window starts at the floors; raises reach it.
	r = exchange(t, c, "a", t0, msg(func(m *QuotaMessage) { m.Raises = []Raise{{Window: 1001, To: 95}} }))
	if g := r.Windows[1].Granted; g[0] != 90 || g[1] != 10 {
		t.Fatalf("raise of the next window to 95 with floors 10, 10: %v", g)
	}
	// Raises of other windows are ignored.
	r = exchange(t, c, "c", t0, msg(func(m *QuotaMessage) { m.Raises = []Raise{{Window: 1005, To: 5}, {Window: 999, To: 5}} }))
	if h := c.Held("q", 100, time.Minute, 1005); h != 20 {
		t.Fatalf("a raise of a far window was applied: held %d", h)
	}
	// Two windows later, window 1000 is forgotten: a late debit is acked.
	r = exchange(t, c, "a", t0.Add(2*time.Minute), msg(func(m *QuotaMessage) { m.Debits = []Debit{{ID: "z", Window: 1000, Units: 5}} }))
	if len(r.Acked) != 1 {
		t.Fatalf("late debit not acked: %v", r.Acked)
	}
	if h := c.Held("q", 100, time.Minute, 1000); h != 20 {
		t.Fatalf("window 1000 still held: %d", h)
	}
	// Reports are kept and returned.
	r = exchange(t, c, "b", t0, msg(func(m *QuotaMessage) { m.Report = &Report{Rate: 3, Window: 1000, Used: 7} }))
	if rep := r.Reports[1]; rep.Rate != 3 || rep.Used != 7 || !rep.At.Equal(t0) {
		t.Fatalf("report: %+v", rep)
	}
}

func TestLedgerInvalid(t *testing.T) {
	c, _ := NewMemCoordinator(three)
	for _, m := range []*Message{
		nil,
		{Region: "x", At: t0},
		{Region: "a", At: t0, Quotas: []QuotaMessage{{ID: "", Limit: 1, Window: time.Second}}},
		{Region: "a", At: t0, Quotas: []QuotaMessage{{ID: "q", Limit: 0, Window: time.Second}}},
		{Region: "a", At: t0, Quotas: []QuotaMessage{{ID: "q", Limit: 1, Window: time.Second, Debits: []Debit{{ID: "d"}}}}},
	} {
		if _, err := c.Exchange(context.Background(), m); !errors.Is(err, ErrInvalid) {
			t.Errorf("Exchange(%+v) = %v, want ErrInvalid", m, err)
		}
	}
	for _, rs := range [][]Region{nil, {{Name: ""}}, {{Name: "a"}, {Name: "a"}}, {{Name: "a", Floor: 0.6}, {Name: "b", Floor: 0.6}}, {{Name: "a", Weight: -1}}} {
		if _, err := NewMemCoordinator(rs); !errors.Is(err, ErrInvalid) {
			t.Errorf("NewMemCoordinator(%+v) = %v, want ErrInvalid", rs, err)
		}
	}
}

func TestShareBetween(t *testing.T) {
	// Whole-window fairness: a used 40 early, b steadily wants 36 in all:
	// b gets its 36, not a share of what is left.
	got := shareBetween(100, []float64{40, 20, 8}, []float64{80, 36, 12}, []float64{1, 1, 1})
	if !near(got[0], 52) || !near(got[1], 36) || !near(got[2], 12) {
		t.Fatalf("shareBetween = %v, want 52, 36, 12", got)
	}
	// Wants that fit are met.
	got = shareBetween(100, []float64{0, 0}, []float64{10, 20}, []float64{1, 1})
	if !near(got[0], 10) || !near(got[1], 20) {
		t.Fatalf("shareBetween = %v", got)
	}
	// What was used is kept even above the level.
	got = shareBetween(100, []float64{70, 0}, []float64{90, 90}, []float64{1, 1})
	if !near(got[0], 70) || !near(got[1], 30) {
		t.Fatalf("shareBetween = %v, want 70, 30", got)
	}
}
