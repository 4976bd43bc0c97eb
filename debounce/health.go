package debounce

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// ServerInfo is what CheckServer found about the Redis server.
type ServerInfo struct {
	Version        string // "7.0.15"; "" when the server does not say (miniredis)
	EvictionPolicy string // maxmemory-policy; "" when the server does not say
	// Persistence, when the server says (CONFIG GET): AOF on (appendonly)
	// with its appendfsync, and the RDB save schedule ("" when off).
	Persistence *Persistence
}

// Persistence is how a Redis server keeps its data across a restart.
type Persistence struct {
	AOF         bool   // appendonly yes
	AppendFsync string // always, everysec or no (with AOF)
	Save        string // RDB snapshot schedule ("3600 1 300 100"); "" when off
}

// None reports that a restart loses everything: no AOF and no RDB.
func (p Persistence) None() bool { return !p.AOF && strings.TrimSpace(p.Save) == "" }

// String says what a restart of the server loses, in one line.
func (p Persistence) String() string {
	switch {
	case p.AOF && p.AppendFsync == "always":
		return "AOF with appendfsync always (every write on disk before its reply)"
	case p.AOF:
		return "AOF with appendfsync " + p.AppendFsync + " (a crash of the machine loses about the last second; a restart of the process loses nothing)"
	case !p.None():
		return "RDB snapshots only (save " + p.Save + "): a restart loses what changed since the last snapshot"
	default:
		return "no persistence: a restart loses every reservation"
	}
}

// CheckServer is the start-up check of the Redis that holds reservations. It
// returns an error for a server older than 7.0 (rounds need PEXPIRETIME), and
// otherwise, joined, one wrapping ErrEvictionPolicy when maxmemory-policy is
// allkeys-* (such a Redis may evict reservations under memory pressure, which
// silently lets duplicate rounds through) and one wrapping ErrNoPersistence
// when the server has neither AOF nor RDB persistence (a restart loses every
// round's data). Callers usually log those two as warnings and refuse only
// when asked to; a dedicated Redis with noeviction and AOF is the safe
// choice. Servers that answer neither INFO nor CONFIG (miniredis) pass.
func CheckServer(ctx context.Context, rdb redis.UniversalClient) (ServerInfo, error) {
	var info ServerInfo
	if raw, err := rdb.Info(ctx, "server").Result(); err == nil {
		for line := range strings.SplitSeq(raw, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
				info.Version = v
			}
		}
	}
	if info.Version != "" {
		major, _ := strconv.Atoi(strings.SplitN(info.Version, ".", 2)[0])
		if major < 7 {
			return info, fmt.Errorf("debounce: redis %s is too old: coalesce needs Redis 7.0 or later (PEXPIRETIME, PXAT)", info.Version)
		}
	}
	if res, err := rdb.ConfigGet(ctx, "maxmemory-policy").Result(); err == nil {
		info.EvictionPolicy = res["maxmemory-policy"]
	}
	if res, err := rdb.ConfigGet(ctx, "*").Result(); err == nil {
		if aof, ok := res["appendonly"]; ok {
			info.Persistence = &Persistence{AOF: aof == "yes", AppendFsync: res["appendfsync"], Save: res["save"]}
		}
	}
	var errs []error
	if strings.HasPrefix(info.EvictionPolicy, "allkeys-") {
		errs = append(errs, fmt.Errorf("%w: maxmemory-policy is %s, so Redis may evict reservations under memory pressure and let duplicate rounds through; use a dedicated Redis with noeviction (or volatile-* with a memory budget that never evicts)",
			ErrEvictionPolicy, info.EvictionPolicy))
	}
	if p := info.Persistence; p != nil && p.None() {
		errs = append(errs, fmt.Errorf("%w: redis has neither AOF nor RDB persistence (appendonly no, save \"\"), so a restart of it loses every pending round's count, payload and items, and lets a second round open for each key; turn on appendonly yes (appendfsync everysec, or always to survive a crash of the machine too)",
			ErrNoPersistence))
	}
	return info, errors.Join(errs...)
}
