//go:build !race

package rediscoord

const raceEnabled = false
