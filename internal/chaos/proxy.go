package chaos

import "github.com/coalesce-io/coalesce/internal/testenv"

// Proxy is testenv's fault-injecting TCP proxy (it moved there so that the
// replication tests of other packages can hold a replica's link back).
type Proxy = testenv.Proxy

// NewProxy is testenv.NewProxy.
func NewProxy(target string) (*Proxy, error) { return testenv.NewProxy(target) }
