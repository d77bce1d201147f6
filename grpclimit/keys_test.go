package grpclimit_test

import (
	"context"
	"net"
	"testing"

	"github.com/stretchr/testify/assert"
	"google.golang.org/grpc/peer"

	"github.com/floodgate-go/floodgate/grpclimit"
)

// strAddr is a net.Addr of another kind than the net package's, as
// bufconn's and other in-memory listeners' are.
type strAddr string

func (a strAddr) Network() string { return "mem" }
func (a strAddr) String() string  { return string(a) }

func TestKeyByPeer(t *testing.T) {
	for _, tc := range []struct {
		addr net.Addr
		want string
	}{
		{&net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 443}, "ip:192.0.2.1"},
		{&net.TCPAddr{IP: net.ParseIP("2001:db8:1:2:3:4:5:6"), Port: 443}, "ip:2001:db8:1:2::/64"},
		{strAddr("192.0.2.7:80"), "ip:192.0.2.7"},
		{strAddr("bufconn"), "addr:bufconn"},
		{&net.UnixAddr{Name: "/run/app.sock", Net: "unix"}, "addr:/run/app.sock"},
	} {
		ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: tc.addr})
		got, ok := grpclimit.KeyByPeer(ctx, "/pkg.Svc/Get")
		assert.True(t, ok, "KeyByPeer(%v)", tc.addr)
		assert.Equal(t, tc.want, got, "KeyByPeer(%v)", tc.addr)
	}
	_, ok := grpclimit.KeyByPeer(context.Background(), "/pkg.Svc/Get")
	assert.False(t, ok, "KeyByPeer without a peer")
}
