// Command binsize measures what floodgate adds to a program's binary: it
// builds fgmemstore (one floodgate.TokenBucket on memstore, a few keys, the
// decisions printed) and xtimerate (the same program on
// golang.org/x/time/rate) in one run, with the same go command and flags,
// into a temporary directory, and prints both sizes and their ratio. It
// exits with status 1 when the ratio is above -max (issue 13's bar: 1.3).
//
//	cd bench && go run ./cmd/binsize
//
// The default build is what the bar measures; the stripped build
// (-ldflags='-s -w', no symbol table or DWARF) is printed beside it.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// programs are the two halves of the comparison, floodgate first.
var programs = []string{
	"github.com/floodgate-go/floodgate/bench/cmd/binsize/fgmemstore",
	"github.com/floodgate-go/floodgate/bench/cmd/binsize/xtimerate",
}

// builds are the flag sets each program is built with; the first is the
// one -max judges.
var builds = []struct {
	name  string
	flags []string
}{
	{"default", nil},
	{"stripped", []string{"-ldflags=-s -w"}},
}

func main() {
	maxRatio := flag.Float64("max", 1.3, "fail when the default build's ratio floodgate/x-time-rate is above this")
	flag.Parse()
	if err := run(*maxRatio); err != nil {
		fmt.Fprintln(os.Stderr, "binsize:", err)
		os.Exit(1)
	}
}

func run(maxRatio float64) error {
	dir, err := os.MkdirTemp("", "binsize")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	version, err := goEnv("GOVERSION", "GOOS", "GOARCH")
	if err != nil {
		return err
	}
	fmt.Printf("%s, %s\n", time.Now().UTC().Format("2006-01-02"), strings.Join(version, " "))
	var judged float64
	for i, b := range builds {
		var sizes [2]int64
		for j, pkg := range programs {
			out := filepath.Join(dir, fmt.Sprintf("%s-%d", b.name, j))
			args := append(append([]string{"build", "-o", out}, b.flags...), pkg)
			cmd := exec.Command("go", args...)
			cmd.Stderr = os.Stderr
			if err := cmd.Run(); err != nil {
				return fmt.Errorf("go %s: %w", strings.Join(args, " "), err)
			}
			fi, err := os.Stat(out)
			if err != nil {
				return err
			}
			sizes[j] = fi.Size()
		}
		ratio := float64(sizes[0]) / float64(sizes[1])
		if i == 0 {
			judged = ratio
		}
		fmt.Printf("%-8s  floodgate+memstore %9d B  x/time/rate %9d B  ratio %.2f\n", b.name, sizes[0], sizes[1], ratio)
	}
	if judged > maxRatio {
		return fmt.Errorf("ratio %.2f is above %.2f", judged, maxRatio)
	}
	return nil
}

// goEnv returns the values of the go command's environment variables names.
func goEnv(names ...string) ([]string, error) {
	out, err := exec.Command("go", append([]string{"env"}, names...)...).Output()
	if err != nil {
		return nil, fmt.Errorf("go env: %w", err)
	}
	return strings.Fields(string(out)), nil
}
