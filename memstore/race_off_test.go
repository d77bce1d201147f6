//go:build !race

package memstore_test

// raceEnabled reports whether the race detector is on.
const raceEnabled = false
