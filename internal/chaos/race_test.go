//go:build race

package chaos

// raceEnabled says the tests run with the race detector.
const raceEnabled = true
