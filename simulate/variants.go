package simulate

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/coalesce-io/coalesce/debounce"
)

// Variant is one setting of the policies and the simulated workers, to run
// the same log through (--compare).
type Variant struct {
	Name string // what it changes: "window=5s", "window=5s workers=8"
	Config
}

// ErrCompare is matched by ParseCompare's errors.
var ErrCompare = errors.New("simulate: --compare")

// MaxVariants bounds the variants one comparison runs.
const MaxVariants = 32

// compareFields are the fields --compare can vary: a policy's (as in the
// configuration file) and the simulation's.
const compareFields = "mode, window, ttl, extend, max_wait, payload, max_items, item_field, key_fields, until, trailing, exclusive, lease; " +
	"workers, job_duration, start_delay, lateness"

// ParseCompare makes the variants of base that specs ask for. Each spec is
// field=value,value,... (a policy field, or prefixed with a job type and a
// dot to change that type's policy only: recompute.window=5s,10s), or a
// simulation setting (workers, job_duration, start_delay, lateness);
// several specs give every combination of their values. key_fields lists
// its members joined with '+' (tenant_id+region); durations are Go
// durations. Each variant's policies are validated.
func ParseCompare(base Config, specs []string) ([]Variant, error) {
	variants := []Variant{{Config: base}}
	unprefixed := "" // a policy field given to every policy
	for _, spec := range specs {
		lhs, rhs, ok := strings.Cut(spec, "=")
		lhs = strings.TrimSpace(lhs)
		if !ok || lhs == "" {
			return nil, fmt.Errorf("%w %q: give field=value,value (fields: %s)", ErrCompare, truncate(spec, 60), compareFields)
		}
		typ, field := "", lhs
		if dot := strings.LastIndexByte(lhs, '.'); dot >= 0 {
			typ, field = lhs[:dot], lhs[dot+1:]
		}
		if typ != "" && !slices.ContainsFunc(base.Policies, func(p debounce.Policy) bool { return p.Type == typ }) {
			return nil, fmt.Errorf("%w %s: no policy for job type %q (types: %s)", ErrCompare, lhs, typ, typeNames(base.Policies))
		}
		var values []string
		for v := range strings.SplitSeq(rhs, ",") {
			if v = strings.TrimSpace(v); v != "" {
				values = append(values, v)
			}
		}
		if len(values) == 0 {
			return nil, fmt.Errorf("%w %s: no values; give %s=value,value", ErrCompare, lhs, lhs)
		}
		if len(variants)*len(values) > MaxVariants {
			return nil, fmt.Errorf("%w: more than %d variants; compare fewer values at once", ErrCompare, MaxVariants)
		}
		next := make([]Variant, 0, len(variants)*len(values))
		for _, v := range variants {
			for _, val := range values {
				nv, err := v.with(typ, field, val)
				if err != nil {
					return nil, fmt.Errorf("%w %s=%s: %w", ErrCompare, lhs, val, err)
				}
				nv.Name = strings.TrimSpace(v.Name + " " + lhs + "=" + val)
				next = append(next, nv)
			}
		}
		variants = next
		if typ == "" && !isSetting(field) && len(base.Policies) > 1 {
			unprefixed = field
		}
	}
	// Checked once every field is set: extend=true needs the max_wait a
	// later --compare gives.
	for _, v := range variants {
		for _, p := range v.Policies {
			if err := p.Validate(); err != nil {
				hint := ""
				if unprefixed != "" {
					hint = fmt.Sprintf(" (to change one policy only, prefix the field with its type: %s.%s)", p.Type, unprefixed)
				}
				return nil, fmt.Errorf("%w %s: %w%s", ErrCompare, v.Name, err, hint)
			}
		}
	}
	return variants, nil
}

func typeNames(ps []debounce.Policy) string {
	names := make([]string, len(ps))
	for i, p := range ps {
		names[i] = p.Type
	}
	return strings.Join(names, ", ")
}

// with returns v with field set to val (a setting, or the field of the
// policy of typ; every policy when typ is "").
func (v Variant) with(typ, field, val string) (Variant, error) {
	switch field {
	case "workers":
		if typ != "" {
			return v, fmt.Errorf("workers is a setting of the simulation, not of a policy: drop %q", typ+".")
		}
		n, err := strconv.Atoi(val)
		if err != nil || n < 1 {
			return v, errors.New("workers: a whole number, at least 1")
		}
		v.Workers = n
		return v, nil
	case "job_duration", "start_delay", "lateness":
		if typ != "" {
			return v, fmt.Errorf("%s is a setting of the simulation, not of a policy: drop %q", field, typ+".")
		}
		d, err := parseDuration(val)
		if err != nil || d < 0 {
			return v, fmt.Errorf("%s: not a duration (like 500ms, 2s)", field)
		}
		switch field {
		case "job_duration":
			v.JobDuration = d
		case "start_delay":
			v.StartDelay = d
		default:
			v.Lateness = d
			if d == 0 {
				v.Lateness = -1 // none: 0 would take the default
			}
		}
		return v, nil
	}
	ps := slices.Clone(v.Policies)
	for i, p := range ps {
		if typ != "" && p.Type != typ {
			continue
		}
		np, err := setPolicyField(undefault(p), field, val)
		if err != nil {
			return v, err
		}
		ps[i] = np.WithDefaults()
	}
	v.Policies = ps
	return v, nil
}

func isSetting(field string) bool {
	switch field {
	case "workers", "job_duration", "start_delay", "lateness":
		return true
	}
	return false
}

// undefault clears the fields WithDefaults filled in (and those a mode's
// defaults derive from another field), so that changing the mode or the
// window derives them afresh.
func undefault(p debounce.Policy) debounce.Policy {
	if p.Payload == debounce.PayloadFirst {
		p.Payload = ""
	}
	if p.Fail == debounce.FailOpen {
		p.Fail = ""
	}
	if p.Lease == debounce.DefaultLease {
		p.Lease = 0
	}
	if p.MaxItems == debounce.DefaultMaxItems {
		p.MaxItems = 0
	}
	if p.Mode == debounce.ModeDedup && p.Until == debounce.UntilStart {
		p.Until = ""
	}
	if p.Mode == debounce.ModeThrottle && p.TTL == p.Window {
		p.TTL = 0
	}
	return p
}

// setPolicyField sets one field of a policy from its text.
func setPolicyField(p debounce.Policy, field, val string) (debounce.Policy, error) {
	dur := func() (time.Duration, error) {
		d, err := parseDuration(val)
		if err != nil {
			return 0, fmt.Errorf("%s: %v", field, err)
		}
		return d, nil
	}
	boolean := func() (bool, error) {
		b, err := strconv.ParseBool(val)
		if err != nil {
			return false, fmt.Errorf("%s: %q is not true or false", field, val)
		}
		return b, nil
	}
	var err error
	switch field {
	case "mode":
		if p.Mode != debounce.Mode(val) {
			// Another mode: what only the old one had goes.
			p.Until, p.TTL, p.Trailing, p.Extend, p.MaxWait = "", 0, false, false, 0
			if val == string(debounce.ModeDedup) {
				p.Window = 0
			}
		}
		p.Mode = debounce.Mode(val)
	case "window":
		p.Window, err = dur()
	case "ttl":
		p.TTL, err = dur()
	case "max_wait":
		p.MaxWait, err = dur()
	case "lease":
		p.Lease, err = dur()
	case "extend":
		p.Extend, err = boolean()
	case "trailing":
		p.Trailing, err = boolean()
	case "exclusive":
		p.Exclusive, err = boolean()
		if !p.Exclusive {
			p.Lease = 0
		}
	case "payload":
		p.Payload = debounce.Payload(val)
		if p.Payload != debounce.PayloadAccumulate {
			p.MaxItems, p.ItemField = 0, ""
		}
	case "until":
		p.Until = debounce.Until(val)
	case "max_items":
		p.MaxItems, err = strconv.Atoi(val)
		if err != nil {
			err = fmt.Errorf("max_items: %q is not a whole number", val)
		}
	case "item_field":
		p.ItemField = val
	case "key_fields":
		p.KeyFields = nil
		if val != "-" && val != "none" {
			p.KeyFields = strings.Split(val, "+")
		}
	default:
		return p, fmt.Errorf("%q cannot be compared (fields: %s)", field, compareFields)
	}
	return p, err
}
