//go:build race

package main

// raceEnabled builds the pulsed under test with the race detector too.
const raceEnabled = true
