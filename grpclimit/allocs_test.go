//go:build !race

// The race detector drops sync.Pool items at random, which the interceptor
// pools: allocations are counted without it.

package grpclimit_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/peer"

	"github.com/floodgate-go/floodgate/grpclimit"
)

// TestUnaryAllocs holds the interceptor's allocations per admitted call to
// the figures doc.go gives: the key (KeyByPeer's string), and with the
// fields two for their values (package headers' PolicySet) and two for the
// metadata.MD map that carries them (a map's header and its group).
func TestUnaryAllocs(t *testing.T) {
	lim := benchLimiter(t)
	ctx := serverContext()
	info := &grpc.UnaryServerInfo{FullMethod: "/grpc.testing.TestService/UnaryCall"}
	handler := func(context.Context, any) (any, error) { return nil, nil }
	for _, tc := range []struct {
		name string
		opts *grpclimit.Options
		want float64
	}{
		{"fields", nil, 5},
		{"omitfields", &grpclimit.Options{OmitFields: true}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			icpt, err := grpclimit.New(lim, tc.opts)
			require.NoError(t, err)
			got := testing.AllocsPerRun(1000, func() {
				if _, err := icpt.Unary(ctx, nil, info, handler); err != nil {
					t.Fatal(err)
				}
			})
			assert.LessOrEqual(t, got, tc.want, "allocations per call")
		})
	}
}

// TestKeyByPeerAllocs holds KeyByPeer to one allocation, the key, for a
// peer address that is not an IP address too (an in-memory listener).
func TestKeyByPeerAllocs(t *testing.T) {
	ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: strAddr("bufconn")})
	got := testing.AllocsPerRun(1000, func() { _, _ = grpclimit.KeyByPeer(ctx, "/pkg.Svc/Get") })
	assert.LessOrEqual(t, got, 1.0)
}
