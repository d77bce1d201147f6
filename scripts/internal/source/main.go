// Command source prints a floodgate script as package scripts builds it,
// for tools outside Go (redisstore/testdata/ceiling.sh loads it into
// Redis):
//
//	go run ./scripts/internal/source [-batch] tb|lb|fw|sw|sl
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/floodgate-go/floodgate/scripts"
	"github.com/floodgate-go/floodgate/step"
)

var kinds = map[string]step.Kind{
	"tb": step.KindTokenBucket,
	"lb": step.KindLeakyBucket,
	"fw": step.KindFixedWindow,
	"sw": step.KindSlidingWindow,
	"sl": step.KindSlidingLog,
}

func main() {
	batch := flag.Bool("batch", false, "print the script of a batch of decisions")
	flag.Parse()
	kind, ok := kinds[flag.Arg(0)]
	if flag.NArg() != 1 || !ok {
		fmt.Fprintln(os.Stderr, "usage: source [-batch] tb|lb|fw|sw|sl")
		os.Exit(2)
	}
	if *batch {
		fmt.Print(scripts.BatchSource(kind))
	} else {
		fmt.Print(scripts.Source(kind))
	}
}
