// Package chaos is the reliability suite of coalesce: real redis-server,
// nats-server, `coalesce serve` producers and worker processes on loopback,
// a load generator, fault injection (SIGKILL, server restarts, a TCP proxy
// that delays, stalls and drops), and checks of the design's invariants I1
// (no lost event), I2 (one pending round per key) and I3 (fencing) computed
// from the logs alone. See RELIABILITY.md at the repository root; run it with
// `go test ./internal/chaos -run TestChaos -v`.
package chaos
