//go:build linux && !race

package proxy

// Outside race builds the kernel's ordering needs no marking
// (rawconn_race.go).

func raceReleaseIO([]byte) {}

func raceAcquireIO() {}
