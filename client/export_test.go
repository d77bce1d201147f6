package client

import (
	"context"
	"time"
)

// SetSleep replaces the wait between the attempts of t, for tests that count
// attempts against a real server without spending the time the waits take.
func SetSleep(t *Transport, sleep func(ctx context.Context, d time.Duration) error) {
	t.sleep = sleep
}
