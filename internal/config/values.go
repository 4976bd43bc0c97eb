package config

import (
	"errors"
	"math"
	"net"
	"strconv"
	"strings"
	"time"
)

// parseDuration reads a Go duration ("30s", "1h30m") with an optional
// leading whole number of days ("2d", "1d12h").
func parseDuration(s string) (time.Duration, error) {
	neg := strings.HasPrefix(s, "-")
	rest := strings.TrimLeft(s, "+-")
	i := strings.IndexFunc(rest, func(r rune) bool { return r < '0' || r > '9' })
	if i <= 0 || rest[i] != 'd' || len(s)-len(rest) > 1 {
		return time.ParseDuration(s)
	}
	days, err := strconv.ParseInt(rest[:i], 10, 64)
	if err != nil || days > int64(math.MaxInt64/(24*time.Hour)) {
		return 0, errors.New("too many days")
	}
	d := time.Duration(days) * 24 * time.Hour
	if tail := rest[i+1:]; tail != "" {
		t, err := time.ParseDuration(tail)
		if err != nil || t < 0 || t > math.MaxInt64-d {
			return 0, errors.New("bad duration after the days")
		}
		d += t
	}
	if neg {
		d = -d
	}
	return d, nil
}

// sizeUnit returns the bytes in a unit of a size: decimal and binary
// multiples, lower case.
func sizeUnit(u string) (int64, bool) {
	switch u {
	case "", "b":
		return 1, true
	case "kb":
		return 1000, true
	case "mb":
		return 1000 * 1000, true
	case "gb":
		return 1000 * 1000 * 1000, true
	case "kib":
		return 1 << 10, true
	case "mib":
		return 1 << 20, true
	case "gib":
		return 1 << 30, true
	}
	return 0, false
}

// parseSize reads a byte count with an optional unit: "1MiB", "512KiB",
// "10MB", "1048576". Units are case-insensitive.
func parseSize(s string) (int64, bool) {
	s = strings.TrimSpace(s)
	i := strings.IndexFunc(s, func(r rune) bool { return r < '0' || r > '9' })
	if i < 0 {
		i = len(s)
	}
	if i == 0 {
		return 0, false
	}
	n, err := strconv.ParseInt(s[:i], 10, 64)
	if err != nil {
		return 0, false
	}
	mult, ok := sizeUnit(strings.ToLower(strings.TrimSpace(s[i:])))
	if !ok || n > math.MaxInt64/mult {
		return 0, false
	}
	return n * mult, true
}

// formatSize writes n bytes in the largest binary unit that divides it.
func formatSize(n int64) string {
	switch {
	case n != 0 && n%(1<<30) == 0:
		return strconv.FormatInt(n>>30, 10) + "GiB"
	case n != 0 && n%(1<<20) == 0:
		return strconv.FormatInt(n>>20, 10) + "MiB"
	case n != 0 && n%(1<<10) == 0:
		return strconv.FormatInt(n>>10, 10) + "KiB"
	}
	return strconv.FormatInt(n, 10) + " bytes"
}

// seg returns a key as a path segment: bare when it is plain, quoted when
// it holds dots, spaces or anything a reader could misread.
func seg(key string) string {
	if key == "" {
		return `""`
	}
	for i := 0; i < len(key); i++ {
		c := key[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return strconv.Quote(key)
		}
	}
	return key
}

// join appends a key to a path.
func join(path, key string) string {
	if path == "" {
		return seg(key)
	}
	return path + "." + seg(key)
}

// index appends a list index to a path.
func index(path string, i int) string {
	return path + "[" + strconv.Itoa(i) + "]"
}

// checkHostPort says what is wrong with a listen or dial address; host may
// be empty (all interfaces) when emptyHost is set, and port 0 is accepted
// when zeroPort is set.
func checkHostPort(addr string, emptyHost, zeroPort bool) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		var ae *net.AddrError
		if errors.As(err, &ae) {
			return ae.Err
		}
		return err.Error()
	}
	if host == "" && !emptyHost {
		return "the host is missing"
	}
	if strings.ContainsAny(host, " \t\r\n/@") {
		return "the host " + strconv.Quote(host) + " is not a host name or IP address"
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 0 || p > 65535 || p == 0 && !zeroPort || strings.HasPrefix(port, "+") {
		if zeroPort {
			return "the port " + strconv.Quote(port) + " is not a number from 0 to 65535"
		}
		return "the port " + strconv.Quote(port) + " is not a number from 1 to 65535"
	}
	return ""
}
