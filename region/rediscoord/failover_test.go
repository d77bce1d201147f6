package rediscoord

import (
	"context"
	"errors"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/region"
	"github.com/redis/go-redis/v9"
)

// TestFailoverReplicas fails the coordinator's master over to its replica
// after a write the replica missed (the replica cut from the master
// first, as a partition would), on servers the test starts: eu is granted
// 800 of 1,000 on the master, the master is killed, and us asks the
// promoted replica for the whole quota. Without Options.Replicas eu acts
// on a grant the new master never had, and the grants the regions hold
// add up to more than the quota: the hazard the option closes. With
// Replicas 1, eu's Exchange fails (ErrNotReplicated), eu holds its floor
// only, and the grants stay within the quota.
func TestFailoverReplicas(t *testing.T) {
	if _, err := os.Stat(redisServer); err != nil {
		t.Skip("no " + redisServer + ": the failover test needs servers it can kill")
	}
	for _, replicas := range []int{0, 1} {
		t.Run(map[int]string{0: "without", 1: "replicas=1"}[replicas], func(t *testing.T) {
			held := failover(t, replicas)
			sum := held[0] + held[1] + held[2]
			t.Logf("held after the failover: eu %d, us %d, ap %d = %d of 1000", held[0], held[1], held[2], sum)
			switch {
			case replicas == 0 && sum <= 1000:
				t.Fatal("without Replicas the failover lost no grant: the test no longer shows the hazard")
			case replicas > 0 && sum > 1000:
				t.Fatalf("with Replicas %d the regions hold %d of a quota of 1000", replicas, sum)
			}
		})
	}
}

// failover runs the scenario and returns what each region holds of the
// window: what it last learned, or its floor.
func failover(t *testing.T, replicas int) [3]int64 {
	ctx := context.Background()
	// No delay before the replica's first sync (Redis waits 5s by default).
	maddr, master := startRedisProcess(t, "--repl-diskless-sync-delay", "0")
	_, port, _ := net.SplitHostPort(maddr)
	raddr, _ := startRedisProcess(t, "--replicaof", "127.0.0.1", port)
	rc := redis.NewClient(&redis.Options{Addr: raddr})
	t.Cleanup(func() { _ = rc.Close() })
	for i := 0; ; i++ {
		info, _ := rc.Info(ctx, "replication").Result()
		if strings.Contains(info, "master_link_status:up") {
			break
		}
		if i == 250 {
			t.Fatalf("the replica never linked:\n%s", info)
		}
		time.Sleep(20 * time.Millisecond)
	}
	mc := redis.NewClient(&redis.Options{Addr: maddr})
	t.Cleanup(func() { _ = mc.Close() })
	const prefix = "fo:{c}:"
	cm, err := New(mc, regions, &Options{Prefix: prefix, Replicas: replicas})
	if err != nil {
		t.Fatal(err)
	}
	at := time.Now()
	const q = int64(1000)
	w := region.WindowIndex(at, time.Minute)
	msg := func(r string, raise int64) *region.Message {
		m := &region.Message{Region: r, At: at, Quotas: []region.QuotaMessage{{ID: "api:t", Limit: q, Window: time.Minute,
			Report: &region.Report{Rate: 10, Window: w}}}}
		if raise > 0 {
			m.Quotas[0].Raises = []region.Raise{{Window: w, To: raise}}
		}
		return m
	}
	exchange := func(c *Coordinator, m *region.Message) (*region.Reply, error) {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		return c.Exchange(ctx, m)
	}
	// Replicated: acknowledged with or without Replicas.
	if _, err := exchange(cm, msg("eu", 0)); err != nil {
		t.Fatal(err)
	}
	var held [3]int64
	for i, r := range regions {
		held[i] = r.FloorUnits(q)
	}
	// The replica is cut from the master; eu is granted 800 there.
	if err := rc.Do(ctx, "REPLICAOF", "NO", "ONE").Err(); err != nil {
		t.Fatal(err)
	}
	rep, err := exchange(cm, msg("eu", 800))
	switch {
	case replicas == 0 && err != nil:
		t.Fatal(err)
	case replicas > 0 && !errors.Is(err, ErrNotReplicated):
		t.Fatalf("Exchange with no replica to acknowledge it = %v, want ErrNotReplicated", err)
	case err == nil:
		held[0] = rep.Quotas[0].Windows[0].Granted[0]
		if held[0] != 800 {
			t.Fatalf("eu granted %d, want 800", held[0])
		}
	}
	// The master dies; us asks the promoted replica for everything.
	if err := master.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cr, err := New(rc, regions, &Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	rep, err = exchange(cr, msg("us", q))
	if err != nil {
		t.Fatal(err)
	}
	held[1] = rep.Quotas[0].Windows[0].Granted[1]
	return held
}

// TestReplicasCluster: on the Cluster at REDIS_CLUSTER_ADDRS (whose
// masters have a replica each), an Exchange with Replicas 1 waits on the
// master of the coordinator's slot and succeeds; with more replicas than
// the master has, it fails with ErrNotReplicated.
func TestReplicasCluster(t *testing.T) {
	addrs := os.Getenv("REDIS_CLUSTER_ADDRS")
	if addrs == "" {
		t.Skip("REDIS_CLUSTER_ADDRS unset")
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: strings.Split(addrs, ",")})
	t.Cleanup(func() { _ = cc.Close() })
	prefix := "fo" + strconv.FormatInt(time.Now().UnixNano(), 10) + ":{c}:"
	m := &region.Message{Region: "eu", At: time.Now(), Quotas: []region.QuotaMessage{{ID: "api:t", Limit: 1000, Window: time.Minute}}}
	for _, tc := range []struct {
		replicas int
		want     error
	}{{1, nil}, {2, ErrNotReplicated}} {
		c, err := New(cc, regions, &Options{Prefix: prefix, Replicas: tc.replicas})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err = c.Exchange(ctx, m)
		cancel()
		if !errors.Is(err, tc.want) {
			t.Errorf("Replicas %d: Exchange = %v, want %v", tc.replicas, err, tc.want)
		}
	}
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}})
	defer ring.Close()
	if _, err := New(ring, regions, &Options{Replicas: 1}); !errors.Is(err, ErrInvalidOptions) {
		t.Errorf("New(a Ring, Replicas 1) = %v, want ErrInvalidOptions", err)
	}
}
