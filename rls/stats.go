package rls

import (
	"strings"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// Stats holds the service's counters under envoyproxy/ratelimit's names:
// ratelimit.service.rate_limit.<domain>.<descriptor path>.{total_hits,
// over_limit, near_limit, within_limit, shadow_mode}, counted as the peer
// counts them, and ratelimit.service.config_load_success. It is a
// prometheus.Collector that reports them under the names and labels of
// the peer's Prometheus mapping (its default_mapper.yaml for
// statsd_exporter): ratelimit_service_rate_limit_total_hits{domain, key1,
// key2} and so on, so existing dashboards keep working. It is safe for
// concurrent use.
type Stats struct {
	max   int
	keys  sync.Map // stat key -> *counters
	nkeys atomic.Int64

	configLoadSuccess atomic.Uint64
	configLoadError   atomic.Uint64
	serviceError      atomic.Uint64
	storeError        atomic.Uint64
}

type counters struct {
	key                                                      string
	totalHits, overLimit, nearLimit, withinLimit, shadowMode atomic.Uint64
}

func newStats(maxKeys int) *Stats { return &Stats{max: maxKeys} }

// counters returns the counters of a limit, under key when it is not ""
// (detailed_metric, value_to_metric) and the store of keys has room.
func (s *Stats) counters(l *Limit, key string) *counters {
	if key == "" {
		key = l.FullKey
	}
	if c, ok := s.keys.Load(key); ok {
		return c.(*counters)
	}
	if s.nkeys.Load() >= int64(s.max) && key != l.FullKey {
		return s.counters(l, "")
	}
	c, loaded := s.keys.LoadOrStore(key, &counters{key: key})
	if !loaded {
		s.nkeys.Add(1)
	}
	return c.(*counters)
}

// Counts is a snapshot of one stat key's counters.
type Counts struct {
	TotalHits, OverLimit, NearLimit, WithinLimit, ShadowMode uint64
}

// Counts returns the counters of a stat key, "domain.key_value.key2" (the
// part of the peer's stat name between ratelimit.service.rate_limit. and
// the counter's name).
func (s *Stats) Counts(key string) Counts {
	v, ok := s.keys.Load(key)
	if !ok {
		return Counts{}
	}
	c := v.(*counters)
	return Counts{c.totalHits.Load(), c.overLimit.Load(), c.nearLimit.Load(), c.withinLimit.Load(), c.shadowMode.Load()}
}

// Snapshot returns every counter under its statsd name
// ("ratelimit.service.rate_limit.domain.key.total_hits"), the service's own
// included ("ratelimit.service.config_load_success",
// "ratelimit.service.call.should_rate_limit.service_error",
// "ratelimit.service.call.should_rate_limit.redis_error" for store
// failures).
func (s *Stats) Snapshot() map[string]uint64 {
	m := map[string]uint64{
		"ratelimit.service.config_load_success":                  s.configLoadSuccess.Load(),
		"ratelimit.service.config_load_error":                    s.configLoadError.Load(),
		"ratelimit.service.call.should_rate_limit.service_error": s.serviceError.Load(),
		"ratelimit.service.call.should_rate_limit.redis_error":   s.storeError.Load(),
	}
	s.keys.Range(func(_, v any) bool {
		c := v.(*counters)
		p := "ratelimit.service.rate_limit." + c.key + "."
		m[p+"total_hits"] = c.totalHits.Load()
		m[p+"over_limit"] = c.overLimit.Load()
		m[p+"near_limit"] = c.nearLimit.Load()
		m[p+"within_limit"] = c.withinLimit.Load()
		m[p+"shadow_mode"] = c.shadowMode.Load()
		return true
	})
	return m
}

var (
	labels   = []string{"domain", "key1", "key2"}
	descHits = prometheus.NewDesc("ratelimit_service_rate_limit_total_hits", "Hits of a rate limit (envoyproxy/ratelimit's total_hits).", labels, nil)
	descOver = prometheus.NewDesc("ratelimit_service_rate_limit_over_limit", "Hits over a rate limit.", labels, nil)
	descNear = prometheus.NewDesc("ratelimit_service_rate_limit_near_limit", "Hits above NEAR_LIMIT_RATIO of a rate limit.", labels, nil)
	descIn   = prometheus.NewDesc("ratelimit_service_rate_limit_within_limit", "Hits within a rate limit.", labels, nil)
	descShad = prometheus.NewDesc("ratelimit_service_rate_limit_shadow_mode", "Hits over a rate limit in shadow mode.", labels, nil)
	descLoad = prometheus.NewDesc("ratelimit_service_config_load_success", "Configurations loaded.", nil, nil)
	descLErr = prometheus.NewDesc("ratelimit_service_config_load_error", "Configurations that failed to load.", nil, nil)
	descErr  = prometheus.NewDesc("ratelimit_service_should_rate_limit_error", "Failed calls and store failures.", []string{"err_type"}, nil)
)

// Describe implements prometheus.Collector.
func (s *Stats) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descHits, descOver, descNear, descIn, descShad, descLoad, descLErr, descErr} {
		ch <- d
	}
}

// Collect implements prometheus.Collector. Keys whose first levels agree
// add up, as under the peer's mapping (which keeps two levels).
func (s *Stats) Collect(ch chan<- prometheus.Metric) {
	type lv struct{ domain, key1, key2 string }
	sums := map[lv]*Counts{}
	s.keys.Range(func(_, v any) bool {
		c := v.(*counters)
		parts := strings.SplitN(c.key, ".", 4)
		var l lv
		l.domain = parts[0]
		if len(parts) > 1 {
			l.key1 = parts[1]
		}
		if len(parts) > 2 {
			l.key2 = parts[2]
		}
		sum := sums[l]
		if sum == nil {
			sum = &Counts{}
			sums[l] = sum
		}
		sum.TotalHits += c.totalHits.Load()
		sum.OverLimit += c.overLimit.Load()
		sum.NearLimit += c.nearLimit.Load()
		sum.WithinLimit += c.withinLimit.Load()
		sum.ShadowMode += c.shadowMode.Load()
		return true
	})
	for l, c := range sums {
		for _, m := range []struct {
			d *prometheus.Desc
			v uint64
		}{{descHits, c.TotalHits}, {descOver, c.OverLimit}, {descNear, c.NearLimit}, {descIn, c.WithinLimit}, {descShad, c.ShadowMode}} {
			ch <- prometheus.MustNewConstMetric(m.d, prometheus.CounterValue, float64(m.v), l.domain, l.key1, l.key2)
		}
	}
	ch <- prometheus.MustNewConstMetric(descLoad, prometheus.CounterValue, float64(s.configLoadSuccess.Load()))
	ch <- prometheus.MustNewConstMetric(descLErr, prometheus.CounterValue, float64(s.configLoadError.Load()))
	ch <- prometheus.MustNewConstMetric(descErr, prometheus.CounterValue, float64(s.serviceError.Load()), "service_error")
	ch <- prometheus.MustNewConstMetric(descErr, prometheus.CounterValue, float64(s.storeError.Load()), "redis_error")
}

var _ prometheus.Collector = (*Stats)(nil)
