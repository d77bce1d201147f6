package bench

import (
	"testing"

	"github.com/floodgate-go/floodgate/bench/internal/binsize"
)

// TestBinarySize holds the binary-size figure the README quotes to issue
// 23's bar: a program of one floodgate.TokenBucket on memstore is at most
// binsize.MaxRatio (1.25) times the size of the same program on
// golang.org/x/time/rate, in the default build. It builds the two
// programs of cmd/binsize as that command does (package
// bench/internal/binsize), with the go command that runs the test (go test
// puts its GOROOT/bin first on PATH), and takes a few seconds with a warm
// build cache. CI runs it:
//
//	cd bench && go test -count=1 -run '^TestBinarySize$' -v .
func TestBinarySize(t *testing.T) {
	sizes, err := binsize.Measure()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range sizes {
		t.Log(s)
	}
	if d := sizes[0]; d.Ratio() > binsize.MaxRatio {
		t.Errorf("%s build: floodgate+memstore is %d B, x/time/rate %d B: ratio %.3f, want at most %.2f", d.Build, d.Floodgate, d.XTimeRate, d.Ratio(), binsize.MaxRatio)
	}
}
