//go:build race

package main

// raceEnabled reports a binary built with the race detector, whose
// instrumentation makes every call several times slower.
const raceEnabled = true
