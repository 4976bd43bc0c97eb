package debounce

// ValidTraceParent reports whether s looks like a W3C traceparent: 55 to 256
// bytes of lowercase hex digits and dashes. It travels in a NATS header, so
// anything else (CR, LF, non-ASCII) is refused up front.
func ValidTraceParent(s string) bool {
	if len(s) < 55 || len(s) > 256 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c == '-') {
			return false
		}
	}
	return true
}
