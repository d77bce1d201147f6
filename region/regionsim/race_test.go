//go:build race

package regionsim

const raceEnabled = true
