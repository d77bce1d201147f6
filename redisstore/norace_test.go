//go:build !race

package redisstore

// raceEnabled reports whether the tests run under the race detector.
const raceEnabled = false
