//go:build !race

package obfuscate

const raceEnabled = false
