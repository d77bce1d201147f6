package main

import (
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestSettings: envoyproxy/ratelimit's variables fill the flags' defaults,
// and a flag given wins over its variable.
func TestSettings(t *testing.T) {
	env := map[string]string{
		"RUNTIME_ROOT": "/srv/runtime_data/current", "RUNTIME_SUBDIRECTORY": "ratelimit",
		"GRPC_PORT": "9000", "BACKEND_TYPE": "redis", "REDIS_URL": "redis:6379", "REDIS_TYPE": "CLUSTER",
		"REDIS_SOCKET_TYPE": "tcp", "REDIS_TIMEOUT": "5ms", "REDIS_POOL_SIZE": "7", "NEAR_LIMIT_RATIO": "0.9",
		"USE_PROMETHEUS": "true", "LIMIT_RESPONSE_HEADERS_ENABLED": "true",
	}
	s, err := parse(nil, func(k string) string { return env[k] }, io.Discard)
	require.NoError(t, err)
	require.Equal(t, settings{
		config: "/srv/runtime_data/current/ratelimit/config", grpcAddr: "0.0.0.0:9000", backend: "redis",
		redisURL: "redis:6379", redisType: "cluster", redisSocket: "tcp", redisPool: 7,
		redisTimeout: 5 * time.Millisecond, timeout: 8 * time.Millisecond, reloadEvery: 250 * time.Millisecond,
		nearLimit: 0.9, metricsAddr: ":9090", metricsPath: "/metrics", headerStyle: "ietf,draft", onErr: "open",
		descriptors: "auto", workers: 256,
	}, s)
	s, err = parse([]string{"-backend", "memory", "-grpc-addr", "127.0.0.1:1", "-redis-timeout", "3ms"}, func(k string) string { return env[k] }, io.Discard)
	require.NoError(t, err)
	require.Equal(t, "memory", s.backend)
	require.Equal(t, "127.0.0.1:1", s.grpcAddr)
	require.Equal(t, 3*time.Millisecond, s.redisTimeout)

	for _, bad := range [][]string{{"-grpc-workers", "-1"}, {"-grpc-workers", "65537"}, {"-descriptors", "all"}} {
		_, err = parse(bad, func(k string) string { return env[k] }, io.Discard)
		require.ErrorContains(t, err, bad[0], bad)
	}
	for _, c := range []struct {
		backend, descriptors string
		parallel             bool
	}{{"redis", "auto", true}, {"memory", "auto", false}, {"redis", "in-order", false}, {"memory", "parallel", true}, {"redis", "joint", true}} {
		require.Equal(t, c.parallel, parallel(settings{backend: c.backend, descriptors: c.descriptors}), c)
	}
	require.Len(t, serverOptions(settings{workers: 4}), 1)
	require.Empty(t, serverOptions(settings{}))
	_, err = parse(nil, func(string) string { return "" }, io.Discard)
	require.ErrorContains(t, err, "no configuration")
	_, err = parse(nil, func(k string) string { return map[string]string{"RUNTIME_ROOT": "/x", "REDIS_TIMEOUT": "10"}[k] }, io.Discard)
	require.ErrorContains(t, err, "REDIS_TIMEOUT")
}
