package debounce

// SeenRoundTrip is what a packed round's last-seen field keeps of an offset
// of ms after the round's base: tests compare the scripts' encoding with it.
func SeenRoundTrip(ms int64) int64 { return decodeSeen(encodeSeen(ms)) }
