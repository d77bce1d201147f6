//go:build !unix

package observe_test

import "time"

// cpuTime reports that the process' CPU time is unknown here.
func cpuTime() (time.Duration, bool) { return 0, false }
