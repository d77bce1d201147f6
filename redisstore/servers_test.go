//go:build linux

// The tests that start Redis processes of their own run on Linux only: the
// processes get SIGKILL when the test binary dies (Pdeathsig), so that a
// test killed by -timeout, whose cleanups never run, leaves no server
// behind; and the faults they inject are Unix signals.

package redisstore

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// needRedisServers skips the test unless real Redis servers are wanted
// (REDIS_ADDR is set, as CI sets it through .ci/redis.sh) and the programs
// bins are on PATH. Without them the tests that start servers of their
// own skip at once, so that go test ./... stays quick.
func needRedisServers(t testing.TB, bins ...string) {
	t.Helper()
	if os.Getenv("REDIS_ADDR") == "" {
		t.Skip("set REDIS_ADDR (CI does, through .ci/redis.sh) to run the tests that start Redis servers of their own")
	}
	for _, b := range bins {
		if _, err := exec.LookPath(b); err != nil {
			t.Skipf("%s is not on PATH (.ci/redis.sh installs it): %v", b, err)
		}
	}
}

// pickPort returns a loopback port in [10000, 22000) that is free, as is
// its cluster bus port (port+10000). Both stay below the kernel's
// ephemeral range (from 32768 by default): a port an outgoing connection
// happens to use cannot be bound though nothing listens on it, which would
// break a restart on the same port. Another process may still bind the
// port before the server does; launchRedis then tries another.
func pickPort(t testing.TB) int {
	t.Helper()
	for range 500 {
		p := 10000 + rand.IntN(12000)
		if portFree(p) && portFree(p+10000) {
			return p
		}
	}
	t.Fatal("no free loopback port in 10000..22000 with a free bus port")
	return 0
}

func portFree(port int) bool {
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return false
	}
	_ = ln.Close()
	return true
}

// redisProc is a redis-server the test started as its child (not
// daemonized: the test owns the pid), on a loopback port and in a
// directory of its own, without persistence unless the test turns it on.
// The test's cleanup kills it.
// Its methods are safe for concurrent use; restart is for the test's
// goroutine.
type redisProc struct {
	t     testing.TB
	port  int
	dir   string
	args  []string      // every argument of redis-server, for restart
	admin *redis.Client // the harness's client; it honours context deadlines

	mu       sync.Mutex
	cmd      *exec.Cmd
	exited   chan struct{} // closed once the process has been waited for
	stopped  bool          // SIGSTOPped
	launched time.Time     // when the latest launch (or restart) began
}

// startRedisProc starts a standalone redis-server with extraArgs after the
// harness's own (port, bind, no persistence, directory, log file, DEBUG
// allowed from loopback) and waits until it answers PING. An argument in
// extraArgs overrides the harness's (Redis keeps the last of each), as
// "--appendonly", "yes" does.
func startRedisProc(t testing.TB, extraArgs ...string) *redisProc {
	t.Helper()
	needRedisServers(t, "redis-server")
	return launchRedis(t, func(int, string) []string { return extraArgs })
}

// launchRedis starts a redis-server with the arguments extra returns for
// its port and directory, on a fresh port; it tries other ports when the
// server cannot bind its own.
func launchRedis(t testing.TB, extra func(port int, dir string) []string) *redisProc {
	t.Helper()
	var last error
	for range 5 {
		port, dir := pickPort(t), t.TempDir()
		args := []string{
			"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
			"--save", "", "--appendonly", "no",
			"--dir", dir, "--logfile", filepath.Join(dir, "redis.log"),
			"--enable-debug-command", "local",
		}
		p := &redisProc{t: t, port: port, dir: dir, args: append(args, extra(port, dir)...)}
		p.admin = redis.NewClient(&redis.Options{
			Addr: p.addr(), ContextTimeoutEnabled: true, MaxRetries: -1,
			DialTimeout: time.Second, ReadTimeout: 2 * time.Second, WriteTimeout: time.Second,
		})
		if last = p.launch(); last == nil {
			t.Cleanup(p.cleanup)
			return p
		}
		_ = p.admin.Close()
	}
	t.Fatalf("redis-server did not start: %v", last)
	return nil
}

// launch runs the process and waits until it answers PING.
func (p *redisProc) launch() error {
	launched := time.Now()
	cmd := exec.Command("redis-server", p.args...)
	cmd.Dir = p.dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	p.mu.Lock()
	p.cmd, p.exited, p.stopped, p.launched = cmd, exited, false, launched
	p.mu.Unlock()

	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case <-exited:
			return fmt.Errorf("redis-server on port %d exited; log:\n%s", p.port, p.logTail(20))
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := p.admin.Ping(ctx).Err()
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			<-exited
			return fmt.Errorf("redis-server on port %d did not answer PING within 10s (%v); log:\n%s", p.port, err, p.logTail(20))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// logTail returns the last n lines of the server's log.
func (p *redisProc) logTail(n int) string {
	f, err := os.Open(filepath.Join(p.dir, "redis.log"))
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n")
}

func (p *redisProc) addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(p.port)) }

// signal sends sig to the process unless it has exited.
func (p *redisProc) signal(sig syscall.Signal) {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.exited:
		return
	default:
	}
	if err := p.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		p.t.Errorf("signal %v to redis-server on port %d: %v", sig, p.port, err)
	}
	switch sig {
	case syscall.SIGSTOP:
		p.stopped = true
	case syscall.SIGCONT:
		p.stopped = false
	}
}

// stop freezes the server (SIGSTOP): its sockets stay open and nothing
// answers, as when a host hangs.
func (p *redisProc) stop() { p.signal(syscall.SIGSTOP) }

// cont resumes a stopped server (SIGCONT).
func (p *redisProc) cont() { p.signal(syscall.SIGCONT) }

// kill ends the server at once (SIGKILL), as a crash would, and waits for
// it to exit.
func (p *redisProc) kill() {
	p.signal(syscall.SIGKILL)
	p.mu.Lock()
	exited := p.exited
	p.stopped = false
	p.mu.Unlock()
	<-exited
}

// launchedAt returns when the latest launch of the server began: its
// start, or its latest restart. The server may have accepted connections
// from then on, before it answered the harness's PING.
func (p *redisProc) launchedAt() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.launched
}

// running reports whether the server runs and is not stopped.
func (p *redisProc) running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.exited:
		return false
	default:
		return !p.stopped
	}
}

// restart starts a killed server again on its port, in its directory and
// with its arguments: without data unless its extra arguments turned
// persistence on (the harness's own turn it off), and for a cluster node
// with its node id and cluster configuration.
func (p *redisProc) restart() {
	p.t.Helper()
	p.mu.Lock()
	exited := p.exited
	p.mu.Unlock()
	select {
	case <-exited:
	default:
		p.t.Fatalf("restart of redis-server on port %d, which still runs", p.port)
	}
	if err := p.launch(); err != nil {
		p.t.Fatalf("restart: %v", err)
	}
}

// cleanup kills the server, resuming it first in case it is stopped, and
// closes the harness's client.
func (p *redisProc) cleanup() {
	p.signal(syscall.SIGCONT)
	p.kill()
	_ = p.admin.Close()
}

// adminCtx returns a context for one call of the harness.
func adminCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 5*time.Second)
}

// redisCluster is a Redis Cluster of redis-server processes the test
// started: masters with replicas, cluster-node-timeout 1000ms.
type redisCluster struct {
	t         testing.TB
	procs     []*redisProc
	nMasters  int // masters at creation
	nReplicas int // replicas per master at creation
}

// startCluster starts masters*(1+replicasPerMaster) nodes, with
// extraArgs after the harness's own, creates the cluster with redis-cli
// and waits until it is healthy (waitHealthy).
func startCluster(t testing.TB, masters, replicasPerMaster int, extraArgs ...string) *redisCluster {
	t.Helper()
	needRedisServers(t, "redis-server", "redis-cli")
	c := &redisCluster{t: t, nMasters: masters, nReplicas: replicasPerMaster}
	for range masters * (1 + replicasPerMaster) {
		c.procs = append(c.procs, launchRedis(t, func(port int, dir string) []string {
			return append([]string{
				"--cluster-enabled", "yes",
				"--cluster-config-file", filepath.Join(dir, fmt.Sprintf("nodes-%d.conf", port)),
				"--cluster-node-timeout", "1000",
				// Replicas sync at once rather than 5s later (the
				// diskless sync's default delay).
				"--repl-diskless-sync-delay", "0",
			}, extraArgs...)
		}))
	}
	args := append([]string{"--cluster", "create"}, c.addrs()...)
	args = append(args, "--cluster-replicas", strconv.Itoa(replicasPerMaster), "--cluster-yes")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "redis-cli", args...).CombinedOutput()
	require.NoError(t, err, "redis-cli --cluster create: %s", out)
	c.waitHealthy(30 * time.Second)
	return c
}

// addrs returns the address of every node, in the order they started.
func (c *redisCluster) addrs() []string {
	a := make([]string, len(c.procs))
	for i, p := range c.procs {
		a[i] = p.addr()
	}
	return a
}

// proc returns the node at addr.
func (c *redisCluster) proc(addr string) *redisProc {
	c.t.Helper()
	for _, p := range c.procs {
		if p.addr() == addr {
			return p
		}
	}
	c.t.Fatalf("no node of the cluster at %s", addr)
	return nil
}

// clusterNode is one line of CLUSTER NODES.
type clusterNode struct {
	id, addr, master string
	flags            []string
	slots            [][2]int // ranges, inclusive
}

func (n clusterNode) is(flag string) bool { return slices.Contains(n.flags, flag) }

func (n clusterNode) owns(slot int) bool {
	for _, r := range n.slots {
		if r[0] <= slot && slot <= r[1] {
			return true
		}
	}
	return false
}

// parseClusterNodes parses CLUSTER NODES: id, ip:port@cport[,hostname],
// flags, master id, ping sent, pong received, config epoch, link state,
// then the slots (ranges, single slots, and [slot->-id] migrations, which
// it skips).
func parseClusterNodes(s string) ([]clusterNode, error) {
	var nodes []clusterNode
	for _, line := range strings.Split(strings.TrimSpace(s), "\n") {
		f := strings.Fields(line)
		if len(f) < 8 {
			return nil, fmt.Errorf("CLUSTER NODES line %q", line)
		}
		addr, _, _ := strings.Cut(f[1], "@")
		n := clusterNode{id: f[0], addr: addr, master: f[3], flags: strings.Split(f[2], ",")}
		for _, r := range f[8:] {
			if strings.HasPrefix(r, "[") {
				continue
			}
			lo, hi, isRange := strings.Cut(r, "-")
			if !isRange {
				hi = lo
			}
			a, err1 := strconv.Atoi(lo)
			b, err2 := strconv.Atoi(hi)
			if err1 != nil || err2 != nil {
				return nil, fmt.Errorf("CLUSTER NODES slots %q", r)
			}
			n.slots = append(n.slots, [2]int{a, b})
		}
		nodes = append(nodes, n)
	}
	return nodes, nil
}

// nodesOf returns p's view of the cluster.
func nodesOf(p *redisProc) ([]clusterNode, error) {
	ctx, cancel := adminCtx()
	defer cancel()
	s, err := p.admin.ClusterNodes(ctx).Result()
	if err != nil {
		return nil, err
	}
	return parseClusterNodes(s)
}

// slotMasters returns the masters that serve slots in a view, by their
// first slot.
func slotMasters(view []clusterNode) []clusterNode {
	var ms []clusterNode
	for _, n := range view {
		if n.is("master") && len(n.slots) > 0 {
			ms = append(ms, n)
		}
	}
	slices.SortFunc(ms, func(a, b clusterNode) int { return a.slots[0][0] - b.slots[0][0] })
	return ms
}

// clusterOK reports whether p says cluster_state:ok.
func clusterOK(p *redisProc) error {
	ctx, cancel := adminCtx()
	defer cancel()
	info, err := p.admin.ClusterInfo(ctx).Result()
	if err != nil {
		return err
	}
	if !strings.Contains(info, "cluster_state:ok") {
		return fmt.Errorf("%s: cluster_state is not ok", p.addr())
	}
	return nil
}

// health returns nil when the cluster is whole: every node runs and says
// cluster_state:ok, no node is flagged failing, every replica's link to
// its master is up, and every node's view has the same masters with the
// same slots, as many as at creation, and as many replicas.
func (c *redisCluster) health() error {
	var want string
	for _, p := range c.procs {
		if !p.running() {
			return fmt.Errorf("%s does not run", p.addr())
		}
		if err := clusterOK(p); err != nil {
			return err
		}
		view, err := nodesOf(p)
		if err != nil {
			return err
		}
		if len(view) != len(c.procs) {
			return fmt.Errorf("%s knows %d nodes, want %d", p.addr(), len(view), len(c.procs))
		}
		replicas := 0
		var me clusterNode
		for _, n := range view {
			for _, bad := range []string{"fail", "fail?", "handshake", "noaddr"} {
				if n.is(bad) {
					return fmt.Errorf("%s sees %s as %s", p.addr(), n.addr, bad)
				}
			}
			if n.is("slave") {
				replicas++
			}
			if n.is("myself") {
				me = n
			}
		}
		ms := slotMasters(view)
		if len(ms) != c.nMasters || replicas != c.nMasters*c.nReplicas {
			return fmt.Errorf("%s sees %d masters with slots and %d replicas, want %d and %d", p.addr(), len(ms), replicas, c.nMasters, c.nMasters*c.nReplicas)
		}
		var sb strings.Builder
		for _, m := range ms {
			fmt.Fprintf(&sb, "%s %s %v;", m.id, m.addr, m.slots)
		}
		if want == "" {
			want = sb.String()
		} else if sb.String() != want {
			return fmt.Errorf("%s disagrees on the masters: %s, others %s", p.addr(), sb.String(), want)
		}
		if me.is("slave") {
			ctx, cancel := adminCtx()
			info, err := p.admin.Info(ctx, "replication").Result()
			cancel()
			if err != nil {
				return err
			}
			if !strings.Contains(info, "master_link_status:up") {
				return fmt.Errorf("replica %s is not in sync with its master", p.addr())
			}
		}
	}
	return nil
}

// replication returns, a line per node, the role and replication offsets
// each running node reports (INFO replication), for logs.
func (c *redisCluster) replication() string {
	var b strings.Builder
	for _, p := range c.procs {
		if !p.running() {
			fmt.Fprintf(&b, "%s: not running\n", p.addr())
			continue
		}
		ctx, cancel := adminCtx()
		info, err := p.admin.Info(ctx, "replication").Result()
		cancel()
		if err != nil {
			fmt.Fprintf(&b, "%s: %v\n", p.addr(), err)
			continue
		}
		var fields []string
		for _, l := range strings.Split(info, "\r\n") {
			for _, f := range []string{"role", "master_port", "master_link_status", "master_sync_in_progress", "slave0", "master_repl_offset", "slave_repl_offset"} {
				if strings.HasPrefix(l, f+":") {
					fields = append(fields, l)
				}
			}
		}
		fmt.Fprintf(&b, "%s: %s\n", p.addr(), strings.Join(fields, " "))
	}
	return b.String()
}

// waitHealthy waits until health reports no problem.
func (c *redisCluster) waitHealthy(timeout time.Duration) {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := c.health()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("the cluster is not healthy after %v: %v", timeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// view returns the view of the cluster of the first running node.
func (c *redisCluster) view() []clusterNode {
	c.t.Helper()
	var last error
	for _, p := range c.procs {
		if !p.running() {
			continue
		}
		view, err := nodesOf(p)
		if err == nil {
			return view
		}
		last = err
	}
	c.t.Fatalf("no node of the cluster answers CLUSTER NODES: %v", last)
	return nil
}

// masters returns the address of each master that serves slots, by their
// first slot.
func (c *redisCluster) masters() []string {
	c.t.Helper()
	var a []string
	for _, m := range slotMasters(c.view()) {
		a = append(a, m.addr)
	}
	return a
}

// keySlot returns the hash slot of key (CLUSTER KEYSLOT).
func (c *redisCluster) keySlot(key string) int {
	c.t.Helper()
	for _, p := range c.procs {
		if !p.running() {
			continue
		}
		ctx, cancel := adminCtx()
		slot, err := p.admin.ClusterKeySlot(ctx, key).Result()
		cancel()
		if err == nil {
			return int(slot)
		}
	}
	c.t.Fatalf("no node of the cluster answers CLUSTER KEYSLOT")
	return 0
}

// slotOwner returns the address of the master serving slot.
func (c *redisCluster) slotOwner(slot int) string {
	c.t.Helper()
	for _, m := range slotMasters(c.view()) {
		if m.owns(slot) {
			return m.addr
		}
	}
	c.t.Fatalf("no master serves slot %d", slot)
	return ""
}

// masterOf returns the address of the master serving the slot of the
// Redis key key.
func (c *redisCluster) masterOf(key string) string {
	c.t.Helper()
	return c.slotOwner(c.keySlot(key))
}

// slotsOf returns the slot ranges the master at addr serves.
func (c *redisCluster) slotsOf(addr string) [][2]int {
	c.t.Helper()
	for _, m := range slotMasters(c.view()) {
		if m.addr == addr {
			return m.slots
		}
	}
	c.t.Fatalf("%s serves no slots", addr)
	return nil
}

// waitFailover waits until the master at dead, killed, has been replaced:
// every running node says cluster_state:ok and sees as many masters
// serving slots as at creation, none of them dead. It returns how long it
// waited.
func (c *redisCluster) waitFailover(dead string, timeout time.Duration) time.Duration {
	c.t.Helper()
	start := time.Now()
	check := func() error {
		for _, p := range c.procs {
			if !p.running() {
				continue
			}
			if err := clusterOK(p); err != nil {
				return err
			}
			view, err := nodesOf(p)
			if err != nil {
				return err
			}
			ms := slotMasters(view)
			if len(ms) != c.nMasters {
				return fmt.Errorf("%s sees %d masters with slots, want %d", p.addr(), len(ms), c.nMasters)
			}
			for _, m := range ms {
				if m.addr == dead {
					return fmt.Errorf("%s still sees %s serve slots", p.addr(), dead)
				}
			}
		}
		return nil
	}
	for {
		err := check()
		if err == nil {
			return time.Since(start)
		}
		if time.Since(start) > timeout {
			c.t.Fatalf("no failover of %s within %v: %v", dead, timeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// migrateSlot moves slot from the master at from to the master at to, as
// redis-cli --cluster reshard does, while clients may keep using it:
// IMPORTING on the target, MIGRATING on the source, MIGRATE of the
// source's keys of the slot until it has none, then SETSLOT NODE on the
// target, the source and the other masters.
func (c *redisCluster) migrateSlot(ctx context.Context, slot int, from, to string) error {
	return c.migrateSlotPaced(ctx, slot, from, to, 100, 0)
}

// migrateSlotPaced is migrateSlot moving perStep keys at a time with a
// pause after each step, so that clients see the slot half moved.
func (c *redisCluster) migrateSlotPaced(ctx context.Context, slot int, from, to string, perStep int, pause time.Duration) error {
	src, dst := c.proc(from), c.proc(to)
	srcID, err := src.admin.ClusterMyID(ctx).Result()
	if err != nil {
		return err
	}
	dstID, err := dst.admin.ClusterMyID(ctx).Result()
	if err != nil {
		return err
	}
	if err := dst.admin.Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", srcID).Err(); err != nil {
		return fmt.Errorf("SETSLOT IMPORTING on %s: %w", to, err)
	}
	if err := src.admin.Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", dstID).Err(); err != nil {
		return fmt.Errorf("SETSLOT MIGRATING on %s: %w", from, err)
	}
	host, port, _ := net.SplitHostPort(to)
	moveKeys := func() error {
		for {
			keys, err := src.admin.ClusterGetKeysInSlot(ctx, slot, perStep).Result()
			if err != nil {
				return fmt.Errorf("GETKEYSINSLOT on %s: %w", from, err)
			}
			if len(keys) == 0 {
				return nil
			}
			args := []any{"MIGRATE", host, port, "", 0, 5000, "KEYS"}
			for _, k := range keys {
				args = append(args, k)
			}
			// A key deleted or expired meanwhile makes the reply NOKEY,
			// which is not an error.
			if err := src.admin.Do(ctx, args...).Err(); err != nil {
				return fmt.Errorf("MIGRATE from %s: %w", from, err)
			}
			if pause > 0 {
				select {
				case <-time.After(pause):
				case <-ctx.Done():
					return ctx.Err()
				}
			}
		}
	}
	if err := moveKeys(); err != nil {
		return err
	}
	if err := dst.admin.Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", dstID).Err(); err != nil {
		return fmt.Errorf("SETSLOT NODE on %s: %w", to, err)
	}
	// The source refuses while it holds keys of the slot: move any that
	// appeared since and try again.
	for attempt := 0; ; attempt++ {
		err := src.admin.Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", dstID).Err()
		if err == nil {
			break
		}
		if attempt == 10 {
			return fmt.Errorf("SETSLOT NODE on %s: %w", from, err)
		}
		if err := moveKeys(); err != nil {
			return err
		}
	}
	for _, m := range slotMasters(c.view()) {
		if m.addr == from || m.addr == to {
			continue
		}
		if err := c.proc(m.addr).admin.Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", dstID).Err(); err != nil {
			return fmt.Errorf("SETSLOT NODE on %s: %w", m.addr, err)
		}
	}
	return nil
}
