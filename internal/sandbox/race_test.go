//go:build race

package sandbox

// raceEnabled says the test binary runs with the race detector.
const raceEnabled = true
