package fingerprint

// KindCodes lists every error kind code, in order, for the vector test.
func KindCodes() []string {
	codes := make([]string, len(kindCodes))
	for i, k := range kindCodes {
		codes[i] = k.code
	}
	return codes
}
