package loadgen

import (
	"os"
	"strconv"
	"strings"
	"time"
)

// PIDCPU is the CPU time (user + system) process pid has used, read from
// /proc; ok false when it cannot be read (another system, no such process).
func PIDCPU(pid int) (time.Duration, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	// Fields after the command (which may hold spaces): state is field 3,
	// utime and stime fields 14 and 15, in clock ticks.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, false
	}
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	const tick = 10 * time.Millisecond // USER_HZ is 100 on Linux
	return time.Duration(u+st) * tick, true
}
