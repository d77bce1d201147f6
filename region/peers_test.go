package region_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/memstore"
	"github.com/floodgate-go/floodgate/region"
)

// TestMemPeers follows the Peers contract step by step: the lease (taken,
// renewed, refused to another, ended, given up), demand added by every
// member and drained by the leader only, grants published by the leader
// only and read by everyone.
func TestMemPeers(t *testing.T) {
	c := &clock{time.Unix(6000, 0)}
	p := region.NewMemPeers(c.now)
	ctx := context.Background()
	q := func(key string, asked int64) region.PeerQuota {
		return region.PeerQuota{Name: "api", Key: key, Limit: 100, Window: time.Minute, Asked: asked}
	}
	sync := func(m *region.PeerMessage) *region.PeerReply {
		t.Helper()
		r, err := p.Sync(ctx, m)
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Grants) != len(m.Quotas) {
			t.Fatalf("%d grants for %d quotas", len(r.Grants), len(m.Quotas))
		}
		return r
	}
	if r := sync(&region.PeerMessage{Member: "x", Lead: 3 * time.Second, Quotas: []region.PeerQuota{q("k", 5)}}); !r.Leader || len(r.Demand) != 1 || r.Demand[0].Asked != 5 {
		t.Fatalf("first member: %+v, want the lead and its own 5 units", r)
	}
	// y adds demand, does not lead while x's lease runs, and publishes
	// nothing.
	grant := []region.PeerGrant{{Name: "api", Key: "k", Limit: 100, Window: time.Minute, Windows: []region.WindowGrant{{Window: 100, Granted: 40}}}}
	if r := sync(&region.PeerMessage{Member: "y", Lead: 3 * time.Second, Quotas: []region.PeerQuota{q("k", 7), q("j", 2)}, Publish: true, Grants: grant}); r.Leader || r.Demand != nil || r.Grants[0] != nil {
		t.Fatalf("second member: %+v, want no lead, no demand, no grants", r)
	}
	c.t = c.t.Add(2 * time.Second)
	r := sync(&region.PeerMessage{Member: "x", Lead: 3 * time.Second, Publish: true, Grants: grant})
	if !r.Leader || len(r.Demand) != 2 || r.Demand[0].Key != "j" || r.Demand[0].Asked != 2 || r.Demand[1].Asked != 7 {
		t.Fatalf("leader renewing: %+v, want y's 2 and 7 units", r)
	}
	if r := sync(&region.PeerMessage{Member: "y", Quotas: []region.PeerQuota{q("k", 0), q("z", 0)}}); len(r.Grants[0]) != 1 || r.Grants[0][0].Granted != 40 || r.Grants[1] != nil {
		t.Fatalf("follower reading: %+v, want k's published grant", r)
	}
	// The renewed lease ends 3s after the renewal, not the first Sync.
	c.t = c.t.Add(2 * time.Second)
	if r := sync(&region.PeerMessage{Member: "y", Lead: time.Second}); r.Leader {
		t.Fatal("y took the lead within x's renewed lease")
	}
	c.t = c.t.Add(time.Second)
	if r := sync(&region.PeerMessage{Member: "y", Lead: time.Second}); !r.Leader {
		t.Fatal("y did not take the lead once x's lease ended")
	}
	// Giving the lead up lets another take it at once.
	sync(&region.PeerMessage{Member: "y"})
	if r := sync(&region.PeerMessage{Member: "x", Lead: time.Second}); !r.Leader {
		t.Fatal("x did not take the lead y gave up")
	}
}

func TestCheckPeerMessage(t *testing.T) {
	ok := region.PeerQuota{Name: "api", Key: "k", Limit: 10, Window: time.Second}
	for _, m := range []*region.PeerMessage{
		nil,
		{},
		{Member: "x", Lead: -1},
		{Member: "x", Quotas: []region.PeerQuota{{Name: "api", Key: "", Limit: 10, Window: time.Second}}},
		{Member: "x", Quotas: []region.PeerQuota{{Name: "api", Key: "k", Limit: 0, Window: time.Second}}},
		{Member: "x", Quotas: []region.PeerQuota{{Name: "api", Key: "k", Limit: 10, Window: -time.Second}}},
		{Member: "x", Quotas: []region.PeerQuota{{Name: "api", Key: "k", Limit: 10, Window: time.Second, Asked: -1}}},
		{Member: "x", Grants: []region.PeerGrant{{Name: "api", Key: "k", Limit: 10, Window: time.Second, Windows: make([]region.WindowGrant, 4)}}},
		{Member: "x", Grants: []region.PeerGrant{{Name: "api", Key: "k", Limit: 10, Window: time.Second, Windows: []region.WindowGrant{{Window: 1, Granted: -1}}}}},
	} {
		if err := region.CheckPeerMessage(m); !errors.Is(err, region.ErrInvalid) {
			t.Errorf("CheckPeerMessage(%+v) = %v, want ErrInvalid", m, err)
		}
		if _, err := region.NewMemPeers(nil).Sync(context.Background(), m); !errors.Is(err, region.ErrInvalid) {
			t.Errorf("Sync(%+v) = %v, want ErrInvalid", m, err)
		}
	}
	if err := region.CheckPeerMessage(&region.PeerMessage{Member: "x", Quotas: []region.PeerQuota{ok}}); err != nil {
		t.Fatal(err)
	}
}

// countingCoord counts Exchanges per region.
type countingCoord struct {
	region.Coordinator
	calls map[string]int
	rates map[string]float64 // the last reported rate per region
}

func (c *countingCoord) Exchange(ctx context.Context, m *region.Message) (*region.Reply, error) {
	c.calls[m.Region]++
	for _, q := range m.Quotas {
		if q.Report != nil {
			c.rates[m.Region] = q.Report.Rate
		}
	}
	return c.Coordinator.Exchange(ctx, m)
}

// TestProcessesShareOneReconciler runs region a as three processes (three
// Stores over one local store and one MemPeers) against region b as one:
// one of a's Stores leads and makes all of a's calls, the coordinator
// sees a's whole demand (three processes' worth, not one's), the others
// admit under the grants the leader publishes, and when the leader
// closes another takes over at its next reconcile.
func TestProcessesShareOneReconciler(t *testing.T) {
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Skipf("no time zone database: %v", err)
	}
	for _, alg := range []floodgate.Algorithm{
		floodgate.FixedWindow{Limit: 1000, Window: time.Minute},
		floodgate.CalendarWindow{Limit: 1000, Unit: floodgate.Day, Location: ny, Offset: time.Hour},
	} {
		t.Run(fmt.Sprint(alg), func(t *testing.T) { testShareOneReconciler(t, alg) })
	}
}

func testShareOneReconciler(t *testing.T, alg floodgate.Algorithm) {
	inner, _ := region.NewMemCoordinator(regions)
	coord := &countingCoord{Coordinator: inner, calls: map[string]int{}, rates: map[string]float64{}}
	c := &clock{time.Unix(6000, 0)}
	local, err := memstore.New(&memstore.Options{Now: c.now})
	if err != nil {
		t.Fatal(err)
	}
	peers := region.NewMemPeers(c.now)
	var as []*region.Store
	var las []*floodgate.Limiter
	for range 3 {
		s, err := region.New(local, coord, regions, "a", &region.Options{Manual: true, Now: c.now, Peers: peers})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		l, err := floodgate.New(s, alg, &floodgate.Options{Name: "api"})
		if err != nil {
			t.Fatal(err)
		}
		as, las = append(as, s), append(las, l)
	}
	sb := newStore(t, c, coord, "b", nil)
	lb, _ := floodgate.New(sb, alg, &floodgate.Options{Name: "api"})
	ctx := context.Background()
	step := func() {
		t.Helper()
		for _, l := range las {
			for range 10 { // 10 per second per process: 30 for a
				if _, err := l.Allow(ctx, "k"); err != nil && !errors.Is(err, floodgate.ErrClosed) {
					t.Fatal(err)
				}
			}
		}
		for range 10 {
			_, _ = lb.Allow(ctx, "k")
		}
		// Followers sync on the second, the leader half a second later.
		c.t = c.t.Add(500 * time.Millisecond)
		for _, s := range as {
			if !s.Leader() {
				_ = s.Reconcile(ctx)
			}
		}
		c.t = c.t.Add(500 * time.Millisecond)
		for _, s := range as {
			if s.Leader() {
				_ = s.Reconcile(ctx)
			}
		}
		_ = sb.Reconcile(ctx)
	}
	for range 10 {
		step()
	}
	leaders := 0
	var leader *region.Store
	for _, s := range as {
		st := s.Stats()
		if st.Calls > 0 {
			leaders++
			leader = s
		}
		if st.Syncs == 0 {
			t.Fatalf("a Store of a never synced: %+v", st)
		}
	}
	if leaders != 1 || !leader.Leader() {
		t.Fatalf("%d of a's Stores called the coordinator, want 1", leaders)
	}
	if n, led := coord.calls["a"], leader.Stats().Led; n > 2*int(led) || led < 7 {
		t.Fatalf("a made %d calls in %d intervals it led of 10, want at most 2 each", n, led)
	}
	// a asks 30 per second in all, b 10.
	if r := coord.rates["a"]; r < 27 || r > 33 {
		t.Fatalf("a reported %v per second, want its three processes' 30", r)
	}
	// Every process of a decides under the grant the leader learned.
	want := leader.Allocation("api", alg, "k")
	if want.Granted <= 100 {
		t.Fatalf("a's grant %+v, want above its floor", want)
	}
	for _, s := range as {
		if got := s.Allocation("api", alg, "k"); got.Granted != want.Granted {
			t.Fatalf("a process of a knows a grant of %d, the leader %d", got.Granted, want.Granted)
		}
	}
	// The leader closes: another takes over (the lead was given up) and
	// the region keeps calling the coordinator.
	if err := leader.Close(); err != nil {
		t.Fatal(err)
	}
	before := coord.calls["a"]
	for range 4 {
		step()
	}
	if coord.calls["a"] == before {
		t.Fatal("no process of a called the coordinator after its leader closed")
	}
	for _, s := range as {
		if s != leader && s.Stats().Calls > 0 {
			return
		}
	}
	t.Fatal("no other process took the lead")
}
