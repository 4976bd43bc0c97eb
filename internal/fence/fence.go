// Package fence holds the two owner-fenced operations on a Redis key that a
// holder refreshes while it works and gives up when done: the worker's
// run-once claims and the exclusive keys' leases. Each changes the key only
// if it still holds the caller's value.
package fence

import (
	"context"
	_ "embed"
	"time"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed refresh.lua
	refreshLua    string
	refreshScript = redis.NewScript(refreshLua)
	//go:embed release.lua
	releaseLua    string
	releaseScript = redis.NewScript(releaseLua)
)

// Refresh extends key to ttl from now if it holds owner; false if not.
func Refresh(ctx context.Context, rdb redis.Scripter, key, owner string, ttl time.Duration) (bool, error) {
	n, err := refreshScript.Run(ctx, rdb, []string{key}, owner, ttl.Milliseconds()).Int64()
	return n == 1, err
}

// Release deletes key if it holds owner; false if not.
func Release(ctx context.Context, rdb redis.Scripter, key, owner string) (bool, error) {
	n, err := releaseScript.Run(ctx, rdb, []string{key}, owner).Int64()
	return n == 1, err
}
