package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

// TestRun runs the example briefly on embedded servers: it ends by itself,
// prints a line per second, and no window admits more than the quota (run
// returns an error if one does).
func TestRun(t *testing.T) {
	var out bytes.Buffer
	cfg := config{quota: 1000, window: time.Second, interval: 50 * time.Millisecond, duration: 3 * time.Second,
		shiftAfter: 1500 * time.Millisecond, cutAfter: 2 * time.Second, pods: 3}
	if err := run(context.Background(), cfg, &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	for _, want := range []string{"   3s ", "eu-west is cut off", "admitted per window:", "at most 2 in one"} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("output lacks %q:\n%s", want, out.String())
		}
	}
}
