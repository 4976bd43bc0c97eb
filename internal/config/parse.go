package config

import "time"

// ParseDuration reads a duration as the configuration file does: a Go
// duration (30s, 1h30m) or whole days before one (2d, 1d12h).
func ParseDuration(s string) (time.Duration, error) { return parseDuration(s) }

// ParseSize reads a size as the configuration file does ("1MiB", "512KiB",
// "10MB" or a byte count); false when it is not one.
func ParseSize(s string) (int64, bool) { return parseSize(s) }
