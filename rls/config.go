package rls

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.yaml.in/yaml/v3"

	"github.com/floodgate-go/floodgate"
)

// ErrConfig reports a configuration the service cannot load. The errors
// returned wrap it with the file and the reason.
var ErrConfig = errors.New("rls: invalid configuration")

// Algorithm names accepted by the algorithm field of a rate_limit, an
// extension of envoyproxy/ratelimit's format (which has fixed windows only).
const (
	AlgorithmFixedWindow   = "fixed_window"
	AlgorithmTokenBucket   = "token_bucket"
	AlgorithmSlidingWindow = "sliding_window"
	AlgorithmSlidingLog    = "sliding_log"
	// AlgorithmCalendar counts per civil day, week, month or year
	// (floodgate.CalendarWindow), in the time zone of time_zone (default
	// UTC), from the reset time of reset ("08:00", default midnight), weeks
	// from week_start (default monday): the unit must be day, week, month
	// or year.
	AlgorithmCalendar = "calendar"
)

// Config is a loaded set of domains: the rate limits the service applies.
// It is immutable once loaded and safe for concurrent use; the zero value
// holds no domain.
type Config struct {
	domains map[string]*node
}

// Domains returns the names of the configured domains, sorted.
func (c *Config) Domains() []string {
	names := make([]string, 0, len(c.domains))
	for d := range c.domains {
		names = append(names, d)
	}
	sort.Strings(names)
	return names
}

// File is one configuration document: its name (for error messages) and its
// YAML text.
type File struct {
	Name string
	Data []byte
}

// node is one level of a domain's descriptor tree.
type node struct {
	children map[string]*node // by "key" or "key_value", as envoyproxy/ratelimit keys them
	wildcard []string         // children keys ending in '*', in file order
	limit    *Limit           // nil when the level has no rate_limit

	shareThreshold bool   // the wildcard's matches share one counter
	pattern        string // the wildcard's value, "*" included, for shareThreshold
	valueToMetric  bool
}

// Limit is one configured rate limit: a rate_limit entry of the YAML, or an
// override a request carries.
type Limit struct {
	// FullKey is envoyproxy/ratelimit's stat key: the domain and the
	// descriptor path, "domain.key_value.key2".
	FullKey string
	// Domain is the limit's domain.
	Domain string

	// RequestsPerUnit and Unit are the YAML's rate_limit fields.
	RequestsPerUnit uint32
	Unit            pb.RateLimitResponse_RateLimit_Unit
	// Window is the period of the limit: Unit in seconds, as
	// envoyproxy/ratelimit counts it (MONTH is 30 days), or the window
	// field of the extension.
	Window time.Duration
	// Algorithm is one of the Algorithm constants; "" means fixed_window.
	Algorithm string
	// Burst is the token bucket's burst (the default is RequestsPerUnit).
	Burst uint32
	// SubWindows is a sliding window's number of sub-windows (the
	// sub_windows extension): 0 for the two-counter estimate, 2 to 64 for
	// the counter that never passes its limit (floodgate.SlidingWindow).
	SubWindows uint32

	Unlimited      bool
	ShadowMode     bool
	QuotaMode      bool
	DetailedMetric bool
	Name           string
	Replaces       []string

	alg floodgate.Algorithm // nil when RequestsPerUnit is 0 or Unlimited
}

type yamlRoot struct {
	Domain      string           `yaml:"domain"`
	Descriptors []yamlDescriptor `yaml:"descriptors"`
}

type yamlDescriptor struct {
	Key            string           `yaml:"key"`
	Value          string           `yaml:"value"`
	RateLimit      *yamlRateLimit   `yaml:"rate_limit"`
	Descriptors    []yamlDescriptor `yaml:"descriptors"`
	ShadowMode     bool             `yaml:"shadow_mode"`
	QuotaMode      bool             `yaml:"quota_mode"`
	DetailedMetric bool             `yaml:"detailed_metric"`
	ValueToMetric  bool             `yaml:"value_to_metric"`
	ShareThreshold bool             `yaml:"share_threshold"`
}

type yamlRateLimit struct {
	RequestsPerUnit uint32         `yaml:"requests_per_unit"`
	Unit            string         `yaml:"unit"`
	Unlimited       bool           `yaml:"unlimited"`
	Name            string         `yaml:"name"`
	Replaces        []yamlReplaces `yaml:"replaces"`

	// Extensions.
	Algorithm  string `yaml:"algorithm"`
	Burst      uint32 `yaml:"burst"`
	SubWindows uint32 `yaml:"sub_windows"`
	Window     string `yaml:"window"`
	TimeZone   string `yaml:"time_zone"`
	Reset      string `yaml:"reset"`
	WeekStart  string `yaml:"week_start"`
}

type yamlReplaces struct {
	Name string `yaml:"name"`
}

// unitWindow maps a unit to its period as envoyproxy/ratelimit's
// utils.UnitToDivider does: MONTH is 30 days and YEAR 365 days, whatever the
// calendar says, so that windows start where the peer's do.
func unitWindow(u pb.RateLimitResponse_RateLimit_Unit) time.Duration {
	const day = 24 * time.Hour
	switch u {
	case pb.RateLimitResponse_RateLimit_SECOND:
		return time.Second
	case pb.RateLimitResponse_RateLimit_MINUTE:
		return time.Minute
	case pb.RateLimitResponse_RateLimit_HOUR:
		return time.Hour
	case pb.RateLimitResponse_RateLimit_DAY:
		return day
	case pb.RateLimitResponse_RateLimit_WEEK:
		return 7 * day
	case pb.RateLimitResponse_RateLimit_MONTH:
		return 30 * day
	case pb.RateLimitResponse_RateLimit_YEAR:
		return 365 * day
	}
	return 0
}

// ParseConfig loads configuration documents in envoyproxy/ratelimit's YAML
// format. Each document holds one domain; two documents of one domain are an
// error. Keys the format does not know are rejected, as the peer rejects
// them, and so is everything the peer refuses (an empty domain or key, a
// duplicate descriptor, an unknown unit, a unit beside unlimited, an empty or
// self-naming replaces). Errors match ErrConfig.
func ParseConfig(files ...File) (*Config, error) {
	c := &Config{domains: map[string]*node{}}
	for _, f := range files {
		dec := yaml.NewDecoder(bytes.NewReader(f.Data))
		dec.KnownFields(true)
		var root yamlRoot
		if err := dec.Decode(&root); err != nil {
			if errors.Is(err, io.EOF) {
				return nil, fmt.Errorf("%w: %s: empty document", ErrConfig, f.Name)
			}
			return nil, fmt.Errorf("%w: %s: %v", ErrConfig, f.Name, err)
		}
		var extra yamlRoot
		if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%w: %s: one YAML document per file", ErrConfig, f.Name)
		}
		if root.Domain == "" {
			return nil, fmt.Errorf("%w: %s: config file cannot have empty domain", ErrConfig, f.Name)
		}
		if _, dup := c.domains[root.Domain]; dup {
			return nil, fmt.Errorf("%w: %s: duplicate domain '%s' in config file", ErrConfig, f.Name, root.Domain)
		}
		n := &node{children: map[string]*node{}}
		if err := n.load(f.Name, root.Domain, root.Domain+".", root.Descriptors); err != nil {
			return nil, err
		}
		c.domains[root.Domain] = n
	}
	return c, nil
}

// LoadConfig reads path, a YAML file or a directory of them (the files
// ending in .yaml or .yml directly in it, as envoyproxy/ratelimit reads
// RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/config), and parses them with
// ParseConfig.
func LoadConfig(path string) (*Config, error) {
	files, err := readFiles(path)
	if err != nil {
		return nil, err
	}
	return ParseConfig(files...)
}

func readFiles(path string) ([]File, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	names := []string{path}
	if st.IsDir() {
		ents, err := os.ReadDir(path)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrConfig, err)
		}
		names = names[:0]
		for _, e := range ents {
			ext := filepath.Ext(e.Name())
			if e.IsDir() || strings.HasPrefix(e.Name(), ".") || (ext != ".yaml" && ext != ".yml") {
				continue
			}
			names = append(names, filepath.Join(path, e.Name()))
		}
	}
	files := make([]File, 0, len(names))
	for _, name := range names {
		data, err := os.ReadFile(name)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrConfig, err)
		}
		files = append(files, File{Name: name, Data: data})
	}
	return files, nil
}

func (n *node) load(file, domain, parent string, descs []yamlDescriptor) error {
	for _, d := range descs {
		if d.Key == "" {
			return fmt.Errorf("%w: %s: descriptor has empty key", ErrConfig, file)
		}
		final := d.Key
		if d.Value != "" {
			final += "_" + d.Value
		}
		full := parent + final
		if _, dup := n.children[final]; dup {
			return fmt.Errorf("%w: %s: duplicate descriptor composite key '%s'", ErrConfig, file, full)
		}
		wild := strings.HasSuffix(final, "*")
		if d.ShareThreshold && !wild {
			return fmt.Errorf("%w: %s: share_threshold can only be used with wildcard values (ending with '*'), but found key '%s'", ErrConfig, file, final)
		}
		child := &node{children: map[string]*node{}, shareThreshold: d.ShareThreshold, valueToMetric: d.ValueToMetric}
		if d.ShareThreshold {
			child.pattern = d.Value
		}
		if d.RateLimit != nil {
			lim, err := newLimit(file, domain, full, d)
			if err != nil {
				return err
			}
			child.limit = lim
		}
		if wild {
			n.wildcard = append(n.wildcard, final)
		}
		if err := child.load(file, domain, full+".", d.Descriptors); err != nil {
			return err
		}
		n.children[final] = child
	}
	return nil
}

func newLimit(file, domain, full string, d yamlDescriptor) (*Limit, error) {
	y := d.RateLimit
	v, ok := pb.RateLimitResponse_RateLimit_Unit_value[strings.ToUpper(y.Unit)]
	validUnit := ok && v != int32(pb.RateLimitResponse_RateLimit_UNKNOWN)
	lim := &Limit{
		FullKey:         full,
		Domain:          domain,
		RequestsPerUnit: y.RequestsPerUnit,
		Unit:            pb.RateLimitResponse_RateLimit_Unit(v),
		Algorithm:       y.Algorithm,
		Burst:           y.Burst,
		Unlimited:       y.Unlimited,
		ShadowMode:      d.ShadowMode,
		QuotaMode:       d.QuotaMode,
		DetailedMetric:  d.DetailedMetric,
		Name:            y.Name,
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s: %s", ErrConfig, file, full, fmt.Sprintf(format, args...))
	}
	for _, r := range y.Replaces {
		if r.Name == "" {
			return nil, bad("should not have an empty replaces entry")
		}
		if r.Name == y.Name {
			return nil, bad("replaces should not contain name of same descriptor")
		}
		lim.Replaces = append(lim.Replaces, r.Name)
	}
	if y.Unlimited {
		if validUnit || y.Window != "" {
			return nil, bad("should not specify rate limit unit when unlimited")
		}
		if y.Algorithm != "" || y.Burst != 0 || y.SubWindows != 0 {
			return nil, bad("should not specify an algorithm, a burst or sub_windows when unlimited")
		}
		return lim, nil
	}
	if y.Algorithm == AlgorithmCalendar {
		return calendarLimit(lim, y, validUnit, bad)
	}
	if y.TimeZone != "" || y.Reset != "" || y.WeekStart != "" {
		return nil, bad("time_zone, reset and week_start apply to algorithm calendar only")
	}
	switch {
	case y.Window != "":
		w, err := time.ParseDuration(y.Window)
		if err != nil || w <= 0 {
			return nil, bad("invalid window '%s': want a positive Go duration such as 90s", y.Window)
		}
		if y.Unit != "" && !validUnit {
			return nil, bad("invalid rate limit unit '%s'", y.Unit)
		}
		lim.Window = w
		if !validUnit {
			lim.Unit = unitOf(w)
		}
	case !validUnit:
		return nil, bad("invalid rate limit unit '%s'", y.Unit)
	default:
		lim.Window = unitWindow(lim.Unit)
	}
	if y.SubWindows != 0 && y.Algorithm != AlgorithmSlidingWindow {
		return nil, bad("sub_windows applies to algorithm sliding_window only")
	}
	if lim.Window > floodgate.MaxWindow && y.SubWindows < 2 {
		return nil, bad("a window of %v is longer than floodgate's longest fixed window, %v: for YEAR (365 days, as envoyproxy/ratelimit counts it) use algorithm calendar (civil years) or sliding_window with sub_windows (such as 60)", lim.Window, floodgate.MaxWindow)
	}
	if y.Burst != 0 && y.Algorithm != AlgorithmTokenBucket {
		return nil, bad("burst applies to algorithm token_bucket only")
	}
	lim.SubWindows = y.SubWindows
	if lim.RequestsPerUnit == 0 {
		// envoyproxy/ratelimit accepts 0: every request is over the limit.
		if y.Algorithm != "" && y.Algorithm != AlgorithmFixedWindow {
			return nil, bad("requests_per_unit 0 is a fixed window that admits nothing; algorithm %s needs at least 1", y.Algorithm)
		}
		return lim, nil
	}
	rpu := int64(lim.RequestsPerUnit)
	switch y.Algorithm {
	case "", AlgorithmFixedWindow:
		lim.alg = floodgate.FixedWindow{Limit: rpu, Window: lim.Window}
	case AlgorithmSlidingWindow:
		lim.alg = floodgate.SlidingWindow{Limit: rpu, Window: lim.Window, SubWindows: int(min(y.SubWindows, floodgate.MaxSubWindows+1))}
	case AlgorithmSlidingLog:
		lim.alg = floodgate.SlidingLog{Limit: rpu, Window: lim.Window}
	case AlgorithmTokenBucket:
		burst := int64(y.Burst)
		if burst == 0 {
			burst = rpu
		}
		lim.alg = floodgate.TokenBucket{Rate: rpu, Per: lim.Window, Burst: burst}
	default:
		return nil, bad("unknown algorithm '%s' (want fixed_window, token_bucket, sliding_window, sliding_log or calendar)", y.Algorithm)
	}
	if err := lim.alg.Validate(); err != nil {
		return nil, bad("%v", err)
	}
	return lim, nil
}

// calendarLimit completes lim, a rate_limit of algorithm calendar: a
// floodgate.CalendarWindow of the unit (day, week, month or year) in
// time_zone, from reset, weeks from week_start. Its Window is the
// CalendarWindow's Policy window (31 days for a month).
func calendarLimit(lim *Limit, y *yamlRateLimit, validUnit bool, bad func(string, ...any) error) (*Limit, error) {
	if y.Window != "" || y.Burst != 0 {
		return nil, bad("algorithm calendar takes a unit, not a window or a burst")
	}
	a := floodgate.CalendarWindow{Limit: int64(lim.RequestsPerUnit)}
	switch lim.Unit {
	case pb.RateLimitResponse_RateLimit_DAY:
		a.Unit = floodgate.Day
	case pb.RateLimitResponse_RateLimit_WEEK:
		a.Unit, a.WeekStart = floodgate.Week, time.Monday
	case pb.RateLimitResponse_RateLimit_MONTH:
		a.Unit = floodgate.Month
	case pb.RateLimitResponse_RateLimit_YEAR:
		a.Unit = floodgate.Year
	default:
		if !validUnit {
			return nil, bad("invalid rate limit unit '%s'", y.Unit)
		}
		return nil, bad("algorithm calendar needs unit day, week, month or year, got %s", strings.ToLower(lim.Unit.String()))
	}
	if y.TimeZone != "" {
		loc, err := time.LoadLocation(y.TimeZone)
		if err != nil {
			return nil, bad("time_zone '%s': %v", y.TimeZone, err)
		}
		a.Location = loc
	}
	if y.Reset != "" {
		t, err := time.Parse("15:04:05", y.Reset)
		if err != nil {
			t, err = time.Parse("15:04", y.Reset)
		}
		if err != nil {
			return nil, bad("reset '%s': want a time of day such as 08:00 or 08:00:30", y.Reset)
		}
		a.Offset = time.Duration(t.Hour())*time.Hour + time.Duration(t.Minute())*time.Minute + time.Duration(t.Second())*time.Second
	}
	if y.WeekStart != "" {
		if a.Unit != floodgate.Week {
			return nil, bad("week_start applies to unit week only")
		}
		found := false
		for d := time.Sunday; d <= time.Saturday; d++ {
			if strings.EqualFold(d.String(), y.WeekStart) {
				a.WeekStart, found = d, true
			}
		}
		if !found {
			return nil, bad("week_start '%s': want a day such as monday", y.WeekStart)
		}
	}
	lim.Window = a.Policy().Window
	if lim.RequestsPerUnit == 0 {
		return nil, bad("algorithm calendar needs requests_per_unit of at least 1")
	}
	if err := a.Validate(); err != nil {
		return nil, bad("%v", err)
	}
	lim.alg = a
	return lim, nil
}

// unitOf returns the unit whose period is w, or UNKNOWN.
func unitOf(w time.Duration) pb.RateLimitResponse_RateLimit_Unit {
	for u := range pb.RateLimitResponse_RateLimit_Unit_name {
		unit := pb.RateLimitResponse_RateLimit_Unit(u)
		if unitWindow(unit) == w {
			return unit
		}
	}
	return pb.RateLimitResponse_RateLimit_UNKNOWN
}

// Entry is one key/value pair of a request's descriptor.
type Entry struct{ Key, Value string }

// match is the outcome of looking a descriptor up: the limit, and for
// share_threshold the wildcard values that stand for the request's values
// in the counter's key (by entry index).
type match struct {
	limit    *Limit
	patterns map[int]string
	statKey  string // the stat key when it differs from limit.FullKey
}

// lookup finds the limit of a descriptor as envoyproxy/ratelimit's GetLimit
// does: at each level an exact "key_value" child, else the first wildcard
// child (in file order) whose value is a prefix of the entry's, else the
// "key" child; the limit applies only when it sits at the level of the
// descriptor's last entry.
func (c *Config) lookup(domain string, entries []Entry) match {
	d := c.domains[domain]
	if d == nil {
		return match{}
	}
	var m match
	cur := d
	// The stat keys and each level's "key_value" are built in buffers on
	// the stack: a call allocates only the stat key it keeps, when it is
	// not the limit's FullKey.
	var detailedBuf, valuedBuf, finalBuf [128]byte
	detailed := append(detailedBuf[:0], domain...)
	valued := append(valuedBuf[:0], domain...)
	for i, e := range entries {
		final := append(append(append(finalBuf[:0], e.Key...), '_'), e.Value...)
		detailed = append(append(detailed, '.'), final...)
		next := cur.children[string(final)]
		var wildKey string
		if next == nil {
			for _, w := range cur.wildcard {
				if bytes.HasPrefix(final, []byte(strings.TrimSuffix(w, "*"))) {
					next, wildKey = cur.children[w], w
					break
				}
			}
		}
		byValue := next != nil
		if next == nil {
			next = cur.children[e.Key]
		}
		valued = append(append(valued, '.'), e.Key...)
		if next != nil {
			v := ""
			switch {
			case wildKey != "" && next.shareThreshold:
				v = next.pattern
				if m.patterns == nil {
					m.patterns = map[int]string{}
				}
				m.patterns[i] = next.pattern
			case wildKey != "" && next.valueToMetric:
				v = e.Value
			case wildKey != "":
				v = strings.TrimPrefix(wildKey, e.Key+"_")
			case byValue:
				v = e.Value
			case next.valueToMetric:
				v = e.Value
			}
			if v != "" {
				valued = append(append(valued, '_'), v...)
			}
		}
		if next != nil && next.limit != nil && i == len(entries)-1 {
			m.limit = next.limit
		}
		if next == nil || len(next.children) == 0 {
			break
		}
		cur = next
	}
	if m.limit == nil {
		return match{}
	}
	switch {
	case m.limit.DetailedMetric:
		m.statKey = string(detailed)
		if m.patterns != nil {
			var b strings.Builder
			b.WriteString(domain)
			for i, e := range entries {
				b.WriteString(".")
				b.WriteString(e.Key)
				if p, ok := m.patterns[i]; ok {
					b.WriteString("_" + p)
				} else if e.Value != "" {
					b.WriteString("_" + e.Value)
				}
			}
			m.statKey = b.String()
		}
	default:
		if string(valued) != m.limit.FullKey {
			m.statKey = string(valued)
		}
	}
	return m
}

// Lookup returns the limit a descriptor of domain with entries gets (nil
// when none applies) and the stat key its hits count under: the limit's
// FullKey, or with detailed_metric, value_to_metric or share_threshold, the
// key those make from the descriptor's values. Limit overrides that a
// request carries are not looked up here.
func (c *Config) Lookup(domain string, entries ...Entry) (*Limit, string) {
	m := c.lookup(domain, entries)
	if m.limit == nil {
		return nil, ""
	}
	if m.statKey != "" {
		return m.limit, m.statKey
	}
	return m.limit, m.limit.FullKey
}
