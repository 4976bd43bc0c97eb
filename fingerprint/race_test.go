//go:build race

package fingerprint_test

// raceEnabled: under the race detector sync.Pool drops items at random, so
// allocation counts say nothing about the hot path.
const raceEnabled = true
