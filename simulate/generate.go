package simulate

import (
	"errors"
	"fmt"
	"iter"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/coalesce-io/coalesce/fingerprint"
	"github.com/coalesce-io/coalesce/internal/config"
)

// GenSpec describes a synthetic event log (Generate): events of some job
// types for a number of tenants, arriving at random (a Poisson process) at
// a mean rate, with bursts on one tenant now and then.
type GenSpec struct {
	Types    []string      // job types, each event one of them at random (required)
	Tenants  int           // keys (default 100)
	Field    string        // the args member that names the tenant (default "tenant_id")
	Rate     float64       // mean events per second, bursts aside (default 10)
	Duration time.Duration // how long the log spans (default 10m, unless Events is set)
	Events   int           // stop after this many events (0: Duration decides)
	// Skew: 0 picks tenants uniformly; above 1, by a Zipf law of that
	// exponent (a few tenants get most events).
	Skew float64
	// BurstEvents events on one random tenant, spread over BurstLength,
	// every BurstEvery (0: no bursts).
	BurstEvents int
	BurstLength time.Duration
	BurstEvery  time.Duration
	Items       int       // > 0: args carry "item", 1 to Items at random (for accumulate)
	Start       time.Time // the first instant (default 2026-01-01T00:00:00Z)
	Seed        uint64    // the same seed gives the same log (default 1)
}

// ErrGenSpec is matched by ParseGenSpec's errors.
var ErrGenSpec = errors.New("simulate: generator spec")

// genKeys lists the spec's keys in the order messages name them.
const genKeys = "type, tenants, field, rate, duration, events, skew, burst, every, items, start, seed"

// ParseGenSpec reads a generator spec: comma-separated key=value pairs,
//
//	type=recompute_financials,tenants=100,rate=50/s,duration=1h,burst=500/2s,every=10m,skew=1.2
//
// type is one job type or several joined with '+'; rate is events per s,
// m or h ("50/s"; a bare number is per second); burst is events/length
// (every defaults to 1m when a burst is given); durations are Go
// durations; start is RFC 3339.
func ParseGenSpec(spec string) (GenSpec, error) {
	g := GenSpec{Tenants: 100, Field: "tenant_id", Rate: 10, Seed: 1, Start: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	bad := func(key, format string, args ...any) error {
		if key == "" {
			return fmt.Errorf("%w: %s", ErrGenSpec, fmt.Sprintf(format, args...))
		}
		return fmt.Errorf("%w: %s: %s", ErrGenSpec, key, fmt.Sprintf(format, args...))
	}
	seen := map[string]bool{}
	for part := range strings.SplitSeq(spec, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		key, val, ok := strings.Cut(part, "=")
		key, val = strings.TrimSpace(key), strings.TrimSpace(val)
		if !ok || key == "" {
			return g, bad("", "%q is not key=value (keys: %s)", truncate(part, 40), genKeys)
		}
		if seen[key] {
			return g, bad(key, "given twice")
		}
		seen[key] = true
		if val == "" {
			return g, bad(key, "empty value")
		}
		var err error
		switch key {
		case "type":
			for t := range strings.SplitSeq(val, "+") {
				if terr := fingerprint.ValidateType(t); terr != nil {
					return g, bad(key, "%q: %v", truncate(t, 40), terr)
				}
				g.Types = append(g.Types, t)
			}
		case "tenants":
			g.Tenants, err = positiveInt(val, 10_000_000)
		case "field":
			g.Field = val
		case "rate":
			g.Rate, err = parseRate(val)
		case "duration":
			g.Duration, err = positiveDuration(val)
		case "events":
			g.Events, err = positiveInt(val, 1_000_000_000)
		case "skew":
			g.Skew, err = strconv.ParseFloat(val, 64)
			if err == nil && (math.IsNaN(g.Skew) || g.Skew != 0 && (g.Skew <= 1 || g.Skew > 10)) {
				err = errors.New("0 (uniform) or a Zipf exponent above 1 and at most 10, e.g. 1.2")
			}
		case "burst":
			n, length, ok := strings.Cut(val, "/")
			if !ok {
				return g, bad(key, "%q: give events/length, e.g. 500/2s", truncate(val, 40))
			}
			if g.BurstEvents, err = positiveInt(n, 10_000_000); err == nil {
				g.BurstLength, err = positiveDuration(length)
			}
		case "every":
			g.BurstEvery, err = positiveDuration(val)
		case "items":
			g.Items, err = positiveInt(val, 1_000_000_000)
		case "start":
			g.Start, err = time.Parse(time.RFC3339Nano, val)
		case "seed":
			g.Seed, err = strconv.ParseUint(val, 10, 64)
		default:
			return g, bad(key, "unknown key (keys: %s)", genKeys)
		}
		if err != nil {
			return g, bad(key, "%q: %v", truncate(val, 40), cleanErr(err))
		}
	}
	if g.BurstEvents > 0 && g.BurstEvery == 0 {
		g.BurstEvery = time.Minute
	}
	if g.BurstEvery > 0 && g.BurstEvents == 0 {
		return g, bad("every", "only applies with burst=events/length")
	}
	if g.Duration == 0 && g.Events == 0 {
		g.Duration = 10 * time.Minute
	}
	return g, g.validate()
}

func (g GenSpec) validate() error {
	switch {
	case len(g.Types) == 0:
		return fmt.Errorf("%w: type: required (a job type of the configuration, or several joined with +)", ErrGenSpec)
	case g.Tenants < 1:
		return fmt.Errorf("%w: tenants: must be at least 1", ErrGenSpec)
	case g.Field == "":
		return fmt.Errorf("%w: field: empty", ErrGenSpec)
	case !(g.Rate > 0) || g.Rate > 1e7:
		return fmt.Errorf("%w: rate: must be above 0 and at most 10000000/s", ErrGenSpec)
	case g.Duration < 0 || g.Events < 0 || g.Items < 0 || g.BurstEvents < 0:
		return fmt.Errorf("%w: duration, events, items and burst must not be negative", ErrGenSpec)
	case g.BurstEvents > 0 && g.BurstLength > g.BurstEvery:
		return fmt.Errorf("%w: burst: its length %v is longer than every=%v", ErrGenSpec, g.BurstLength, g.BurstEvery)
	}
	return nil
}

func cleanErr(err error) string {
	var ne *strconv.NumError
	if errors.As(err, &ne) {
		return ne.Err.Error()
	}
	return err.Error()
}

func positiveInt(s string, limit int) (int, error) {
	n, err := strconv.Atoi(s)
	switch {
	case err != nil:
		return 0, errors.New("not a whole number")
	case n < 1 || n > limit:
		return 0, fmt.Errorf("must be 1 to %d", limit)
	}
	return n, nil
}

func positiveDuration(s string) (time.Duration, error) {
	d, err := parseDuration(s)
	if err != nil {
		return 0, err
	}
	if d <= 0 {
		return 0, errors.New("must be positive")
	}
	return d, nil
}

// parseRate reads "50/s", "3000/m", "10/h" or "50" (per second).
func parseRate(s string) (float64, error) {
	n, unit, ok := strings.Cut(s, "/")
	per := time.Second
	if ok {
		switch unit {
		case "s":
		case "m", "min":
			per = time.Minute
		case "h":
			per = time.Hour
		default:
			return 0, fmt.Errorf("unit %q: use /s, /m or /h", unit)
		}
	}
	f, err := strconv.ParseFloat(n, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, errors.New("not a number")
	}
	return f / per.Seconds(), nil
}

// Generate yields the events of a spec, in time order, deterministically
// for its seed.
func Generate(g GenSpec) iter.Seq2[Event, error] {
	return func(yield func(Event, error) bool) {
		if err := g.validate(); err != nil {
			yield(Event{}, err)
			return
		}
		rng := rand.New(rand.NewPCG(g.Seed, g.Seed^0x9e3779b97f4a7c15))
		var zipf *rand.Zipf
		if g.Skew > 1 {
			zipf = rand.NewZipf(rng, g.Skew, 1, uint64(g.Tenants-1))
		}
		tenant := func() int {
			if zipf != nil {
				return int(zipf.Uint64()) + 1
			}
			return rng.IntN(g.Tenants) + 1
		}
		end := g.Start.Add(g.Duration)
		field := appendString(nil, g.Field)
		var args []byte
		emit := func(at time.Time, t int) bool {
			args = append(args[:0], '{')
			args = append(args, field...)
			args = append(args, ':')
			args = strconv.AppendInt(args, int64(t), 10)
			if g.Items > 0 {
				args = append(args, `,"item":`...)
				args = strconv.AppendInt(args, int64(rng.IntN(g.Items)+1), 10)
			}
			args = append(args, '}')
			typ := g.Types[0]
			if len(g.Types) > 1 {
				typ = g.Types[rng.IntN(len(g.Types))]
			}
			return yield(Event{At: at, Type: typ, Args: slices.Clone(args)}, nil)
		}
		next := g.Start.Add(expGap(rng, g.Rate))
		var burst []time.Time // the current burst's times, in order
		burstTenant := 0
		nextBurst := time.Time{}
		if g.BurstEvents > 0 {
			nextBurst = g.Start.Add(g.BurstEvery / 2)
		}
		for n := 0; g.Events == 0 || n < g.Events; n++ {
			if len(burst) == 0 && !nextBurst.IsZero() && !nextBurst.After(next) {
				burstTenant = tenant()
				step := g.BurstLength / time.Duration(g.BurstEvents)
				burst = make([]time.Time, g.BurstEvents)
				for i := range burst {
					burst[i] = nextBurst.Add(time.Duration(i) * step)
				}
				nextBurst = nextBurst.Add(g.BurstEvery)
			}
			var at time.Time
			t := 0
			if len(burst) > 0 && !burst[0].After(next) {
				at, t = burst[0], burstTenant
				burst = burst[1:]
			} else {
				at, t = next, tenant()
				next = next.Add(expGap(rng, g.Rate))
			}
			if g.Duration > 0 && !at.Before(end) {
				return
			}
			if !emit(at, t) {
				return
			}
		}
	}
}

// expGap is a Poisson process's gap at rate per second, to the
// microsecond (at least one).
func expGap(rng *rand.Rand, rate float64) time.Duration {
	return max(time.Duration(rng.ExpFloat64()/rate*float64(time.Second)).Truncate(time.Microsecond), time.Microsecond)
}

// parseDuration reads a Go duration or whole days before one (2d, 1d12h),
// as the configuration file does.
func parseDuration(s string) (time.Duration, error) {
	d, err := config.ParseDuration(s)
	if err != nil {
		return 0, errors.New("not a duration (like 500ms, 30s, 5m, 1h, 2d)")
	}
	return d, nil
}
