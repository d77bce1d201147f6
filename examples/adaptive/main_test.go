package main

import (
	"bytes"
	"encoding/csv"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/floodgate-go/floodgate/adaptive/sim"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRunWritesSummaryAndCSV(t *testing.T) {
	t.Chdir(t.TempDir())
	const path = "adaptive-sim.csv" // the default -out
	var stdout bytes.Buffer
	require.NoError(t, run([]string{"-seed", "3"}, &stdout))

	out := stdout.String()
	for _, lim := range limiters {
		for _, phase := range []string{"0.5x", "1x", "3x", "0.5x again"} {
			assert.Regexpf(t, `(?m)^\s*`+lim.name+`\s+`+phase+`\s+\d`, out, "summary row %s %s", lim.name, phase)
		}
	}
	assert.Contains(t, out, "wrote "+path)

	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	require.NoError(t, err)
	assert.Equal(t, sim.CSVHeader, rows[0])
	labels := map[string]int{}
	for _, r := range rows[1:] {
		labels[r[0]]++
	}
	assert.Equal(t, map[string]int{"vegas": 360, "gradient2": 360, "aimd": 360, "none": 360}, labels,
		"rows per limiter: 36s of series at 100ms")
}

func TestRunWithoutCSV(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	var stdout bytes.Buffer
	require.NoError(t, run([]string{"-out", "-"}, &stdout))
	assert.NotContains(t, stdout.String(), "wrote")
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Empty(t, entries)
}

func TestRunBadArguments(t *testing.T) {
	var stdout bytes.Buffer
	assert.Error(t, run([]string{"-nope"}, &stdout))
	assert.Error(t, run([]string{"extra"}, &stdout))
	assert.Error(t, run([]string{"-out", filepath.Join(t.TempDir(), "missing", "x.csv")}, &stdout))
	assert.True(t, strings.Contains(stdout.String(), "-out"), "usage lists the flags")
}
