//go:build !race

package testscale

const raceEnabled = false
