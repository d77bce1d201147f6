package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// machine describes where the numbers come from.
type machine struct {
	GoVersion string
	CPU       string
	CPUs      int
	Maxprocs  int
	Memory    string
	Kernel    string
	Redis     string
	Commit    string
	LoadStart string
	LoadEnd   string
}

func describeMachine(repoDir string) machine {
	m := machine{
		CPUs:      runtime.NumCPU(),
		Maxprocs:  runtime.GOMAXPROCS(0),
		LoadStart: loadAverage(),
	}
	if out, err := exec.Command("go", "version").Output(); err == nil {
		m.GoVersion = strings.TrimPrefix(strings.TrimSpace(string(out)), "go version ")
	} else {
		m.GoVersion = runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH
	}
	if data, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(data), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
	}
	if data, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, l := range strings.Split(string(data), "\n") {
			if f := strings.Fields(l); len(f) >= 2 && f[0] == "MemTotal:" {
				if kb, err := strconv.ParseFloat(f[1], 64); err == nil {
					m.Memory = fmt.Sprintf("%.0f GiB", kb/(1<<20))
				}
			}
		}
	}
	if data, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = runtime.GOOS + " " + strings.TrimSpace(string(data))
	} else {
		m.Kernel = runtime.GOOS
	}
	if out, err := exec.Command("git", "-C", repoDir, "rev-parse", "--short", "HEAD").Output(); err == nil {
		m.Commit = strings.TrimSpace(string(out))
		if st, err := exec.Command("git", "-C", repoDir, "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(strings.TrimSpace(string(st))) > 0 {
			m.Commit += " (with uncommitted changes)"
		}
	}
	m.Redis = redisVersion()
	return m
}

// redisVersion asks the server at REDIS_ADDR for its version.
func redisVersion() string {
	addr := os.Getenv("REDIS_ADDR")
	if addr == "" {
		return "none (REDIS_ADDR not set: the Redis scenarios were skipped)"
	}
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		return fmt.Sprintf("unreachable at %s: %v", addr, err)
	}
	version := "?"
	for _, l := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "redis_version:"); ok {
			version = v
		}
	}
	return fmt.Sprintf("Redis %s, standalone, on loopback (one server for every library)", version)
}

// loadAverage returns the 1-, 5- and 15-minute load averages.
func loadAverage() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(data))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}
