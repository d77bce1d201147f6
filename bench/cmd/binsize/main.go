// Command binsize measures what floodgate adds to a program's binary: it
// builds fgmemstore (one floodgate.TokenBucket on memstore, a few keys, the
// decisions printed) and xtimerate (the same program on
// golang.org/x/time/rate) in one run, with the same go command and flags,
// into a temporary directory, and prints both sizes and their ratio. It
// exits with status 1 when the ratio is above -max (issue 23's bar, 1.25,
// by default).
//
//	cd bench && go run ./cmd/binsize
//
// The default build is what the bar measures; the stripped build
// (-ldflags='-s -w', no symbol table or DWARF) is printed beside it. The
// measurement is package bench/internal/binsize's, which TestBinarySize
// also runs:
//
//	cd bench && go test -count=1 -run '^TestBinarySize$' -v .
package main

import (
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/floodgate-go/floodgate/bench/internal/binsize"
)

func main() {
	maxRatio := flag.Float64("max", binsize.MaxRatio, "fail when the default build's ratio floodgate/x-time-rate is above this")
	flag.Parse()
	if err := run(*maxRatio); err != nil {
		fmt.Fprintln(os.Stderr, "binsize:", err)
		os.Exit(1)
	}
}

func run(maxRatio float64) error {
	version, err := binsize.GoVersion()
	if err != nil {
		return err
	}
	fmt.Printf("%s, %s\n", time.Now().UTC().Format("2006-01-02"), version)
	sizes, err := binsize.Measure()
	if err != nil {
		return err
	}
	for _, s := range sizes {
		fmt.Println(s)
	}
	if r := sizes[0].Ratio(); r > maxRatio {
		return fmt.Errorf("ratio %.2f is above %.2f", r, maxRatio)
	}
	return nil
}
