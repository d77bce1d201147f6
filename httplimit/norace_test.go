//go:build !race

package httplimit_test

// raceEnabled reports whether the tests run under the race detector, whose
// sync.Pool drops a share of what it is given.
const raceEnabled = false
