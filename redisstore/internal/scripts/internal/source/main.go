// Command source prints a floodgate script as package scripts builds it,
// or the ARGV of one decision as package scripts lays it out, for tools
// outside Go (redisstore/testdata/ceiling.sh loads the scripts into Redis
// and sends them these arguments):
//
//	go run ./scripts/internal/source [-batch] tb|lb|fw|sw|sl
//	go run ./scripts/internal/source limits
//	go run ./scripts/internal/source -argv [-op 0] [-check] [-n 1] [-maxdelay 0] [-margin 1000] -quota Q -period P [-tau T]
//
// With -argv it prints the arguments separated by spaces, on Redis TIME.
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/redisstore/internal/scripts"
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
	argv := flag.Bool("argv", false, "print the ARGV of one decision instead of a script")
	var a scripts.Args
	op := flag.Int("op", int(floodgate.OpTake), "with -argv: the floodgate.Op")
	flag.BoolVar(&a.Check, "check", false, "with -argv: a check-only step")
	flag.Int64Var(&a.N, "n", 1, "with -argv: the units")
	flag.Int64Var(&a.MaxDelay, "maxdelay", 0, "with -argv: the maximum delay, in ns")
	flag.Int64Var(&a.MarginMs, "margin", 1000, "with -argv: the TTL margin, in ms")
	flag.Int64Var(&a.Quota, "quota", 0, "with -argv: the burst, capacity or limit")
	flag.Int64Var(&a.Period, "period", 0, "with -argv: the emission interval or the window, in ns")
	flag.Int64Var(&a.Tau, "tau", 0, "with -argv: the time to restore the full quota (buckets), in ns")
	flag.Parse()
	if *argv {
		if flag.NArg() != 0 || a.Quota < 1 || a.Period < 1 {
			usage()
		}
		a.Op = floodgate.Op(*op)
		words := make([]string, 0, 9)
		for _, v := range a.ARGV() {
			words = append(words, fmt.Sprint(v))
		}
		fmt.Println(strings.Join(words, " "))
		return
	}
	if flag.NArg() == 1 && flag.Arg(0) == "limits" && !*batch {
		fmt.Print(scripts.LimitsSource())
		return
	}
	kind, ok := kinds[flag.Arg(0)]
	if flag.NArg() != 1 || !ok {
		usage()
	}
	if *batch {
		fmt.Print(scripts.BatchSource(kind))
	} else {
		fmt.Print(scripts.Source(kind))
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: source [-batch] tb|lb|fw|sw|sl\n       source limits\n       source -argv [-op 0] [-check] [-n 1] [-maxdelay 0] [-margin 1000] -quota Q -period P [-tau T]")
	os.Exit(2)
}
