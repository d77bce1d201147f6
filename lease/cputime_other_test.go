//go:build !unix

package lease_test

import "time"

// cpuTime reports that the process' CPU time is unknown here.
func cpuTime() (time.Duration, bool) { return 0, false }
