//go:build !race

package regionsim

const raceEnabled = false
