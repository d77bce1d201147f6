//go:build race

package rediscoord

// raceEnabled: the race detector slows the scenario's decisions tenfold
// on a shared machine, and the demand it asks with turns bursty.
const raceEnabled = true
