package debounce

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// ServerInfo is what CheckServer found about the Redis server.
type ServerInfo struct {
	Version        string // "7.0.15"; "" when the server does not say (miniredis)
	EvictionPolicy string // maxmemory-policy; "" when the server does not say
}

// CheckServer is the start-up check of the Redis that holds reservations. It
// returns an error for a server older than 7.0 (rounds need PEXPIRETIME), and
// one wrapping ErrEvictionPolicy when maxmemory-policy is allkeys-*: such a
// Redis may evict reservations under memory pressure, which silently lets
// duplicate rounds through. Callers usually log the latter as a warning and
// refuse only when asked to; a dedicated Redis with noeviction is the safe
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
	if strings.HasPrefix(info.EvictionPolicy, "allkeys-") {
		return info, fmt.Errorf("%w: maxmemory-policy is %s, so Redis may evict reservations under memory pressure and let duplicate rounds through; use a dedicated Redis with noeviction (or volatile-* with a memory budget that never evicts)",
			ErrEvictionPolicy, info.EvictionPolicy)
	}
	return info, nil
}
