// Package binsize measures what floodgate adds to a program's binary: it
// builds the program of bench/cmd/binsize/fgmemstore (one
// floodgate.TokenBucket on memstore, a few keys, the decisions printed) and
// that of bench/cmd/binsize/xtimerate (the same program on
// golang.org/x/time/rate) with the same go command and flags, and compares
// their sizes. Command binsize prints the comparison; TestBinarySize in
// package bench holds it to MaxRatio. Both call Measure, so the figure the
// README quotes and the one the test asserts come from one build.
package binsize

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// MaxRatio is the bar of issue 23: a memstore + TokenBucket program's
// binary is at most 1.25 times the size of the same program on
// golang.org/x/time/rate, in the default build.
const MaxRatio = 1.25

// Programs are the two halves of the comparison, floodgate first. They
// are package paths of the bench module, so Measure runs in its tree.
var Programs = [2]string{
	"github.com/floodgate-go/floodgate/bench/cmd/binsize/fgmemstore",
	"github.com/floodgate-go/floodgate/bench/cmd/binsize/xtimerate",
}

// A Build is a set of go build flags each program is built with.
type Build struct {
	Name  string
	Flags []string
}

// Builds are the flag sets Measure builds with. The first, the default
// build, is the one MaxRatio judges; the stripped build (no symbol table
// or DWARF) is reported beside it.
var Builds = []Build{
	{"default", nil},
	{"stripped", []string{"-ldflags=-s -w"}},
}

// Size is the outcome of one Build: the sizes of both programs' binaries in
// bytes.
type Size struct {
	Build     string
	Floodgate int64 // fgmemstore
	XTimeRate int64 // xtimerate
}

// Ratio returns the floodgate program's size over x/time/rate's.
func (s Size) Ratio() float64 { return float64(s.Floodgate) / float64(s.XTimeRate) }

// String formats s as command binsize prints it.
func (s Size) String() string {
	return fmt.Sprintf("%-8s  floodgate+memstore %9d B  x/time/rate %9d B  ratio %.2f", s.Build, s.Floodgate, s.XTimeRate, s.Ratio())
}

// Measure builds both Programs with every Build into a temporary
// directory, with the go command on PATH run in the current directory (a
// directory of the bench module), and returns their sizes in the order of
// Builds. A failed build's error carries the go command's output.
func Measure() ([]Size, error) {
	dir, err := os.MkdirTemp("", "binsize")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)

	sizes := make([]Size, 0, len(Builds))
	for _, b := range Builds {
		var n [2]int64
		for j, pkg := range Programs {
			out := filepath.Join(dir, fmt.Sprintf("%s-%d", b.Name, j))
			args := append(append([]string{"build", "-o", out}, b.Flags...), pkg)
			if msg, err := exec.Command("go", args...).CombinedOutput(); err != nil {
				return nil, fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, msg)
			}
			fi, err := os.Stat(out)
			if err != nil {
				return nil, err
			}
			n[j] = fi.Size()
		}
		sizes = append(sizes, Size{Build: b.Name, Floodgate: n[0], XTimeRate: n[1]})
	}
	return sizes, nil
}

// GoVersion returns the go command's GOVERSION, GOOS and GOARCH, as
// "go1.26.8 linux amd64".
func GoVersion() (string, error) {
	out, err := exec.Command("go", "env", "GOVERSION", "GOOS", "GOARCH").Output()
	if err != nil {
		return "", fmt.Errorf("go env: %w", err)
	}
	return strings.Join(strings.Fields(string(out)), " "), nil
}
