package devservers

// ScriptSHA is a script's SHA-1, as EVALSHA names it.
func ScriptSHA(src string) string { return sha1Hex(src) }
