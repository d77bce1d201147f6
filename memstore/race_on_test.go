//go:build race

package memstore_test

// raceEnabled reports whether the race detector is on; its overhead makes
// the million-key memory test take minutes.
const raceEnabled = true
