// Package shed sheds load by utilization and priority: a request is refused
// (503 with Retry-After) when the server, or the fleet it belongs to, is
// busier than its class allows, so that the last capacity stays with the
// most important traffic.
//
// A [Shedder] reads a [Gauge] (the utilization: work in progress over
// capacity) and compares it, per request, with its class's threshold
// ([Thresholds]). The classes are adaptive's four: adaptive.ClassCritical,
// ClassDefault, ClassSheddable and ClassBackground. By default the rule is
// graduated, as SRE practice and Stripe's load shedders have it: at 80%
// utilization the low-priority classes are shed, at 95% everything but
// critical traffic, and critical traffic never. Less important classes are
// always shed first (the thresholds cannot rise as importance falls).
//
// # Which gauge
//
// An *adaptive.Limiter is a Gauge: its requests in flight over its limit.
// In front of adaptive.Middleware, a Shedder on it keeps the last 20% of the
// adaptive limit from sheddable and background traffic and the last 5% for
// critical traffic alone; while those slots are idle the server has room,
// so latency stays low and a latency-based limit grows until the traffic
// admitted fills the server again. The limiter itself admits critical
// requests (adaptive.MiddlewareOptions.Partition returning
// adaptive.ClassCritical) up to ceil(2·sqrt(L)) beyond its limit L, so that
// at a small limit, where 20% is a few slots, a burst of critical traffic
// is not refused (in the simulator, at 20 workers and 3x overload, critical
// goodput 1.0000 on the worst of 40 seeds, where a limit that refused every
// class alike kept 0.9741):
//
//	l, _ := adaptive.NewLimiter(w, nil)
//	s, _ := shed.New(l, nil)
//	shedMW, _ := shed.Middleware(s, &shed.MiddlewareOptions{Class: classOf})
//	limitMW, _ := adaptive.Middleware(l, &adaptive.MiddlewareOptions{Partition: classOf})
//	http.ListenAndServe(addr, shedMW(limitMW(handler)))
//
// Any other measure works through [GaugeFunc]: CPU utilization, a queue's
// depth over its capacity, busy workers over workers. It is read on every
// request, so it should read a value kept up to date elsewhere rather than
// measure.
//
// # A fleet
//
// A reserve kept by each process alone holds for the fleet only if every
// process sees the same load; a shared resource (a database) or uneven
// balancing breaks that. A [Fleet] is a Gauge of the fleet's utilization:
// each process exchanges its [Load] with a [FleetSource], a store all of
// them reach, every FleetOptions.Interval (10ms by default; a fortieth of
// the requests' mean duration or less, see FleetOptions), and reads
//
//	(fleet in flight - mine at the exchange + mine now) / (fleet capacity - ... + ...)
//
// per request: its own load live, the others' at most one Interval old,
// less the fall they have likely had since (as much, in proportion, as this
// process's own load has fallen, or twice their fall over the last
// Interval while its own load is not rising; [Fleet.Utilization]). That
// discount is for requests that end together: admitted together on a view
// an Interval old, they leave together a service time later, faster than
// the exchanges follow, and a reading as of the exchange sheds on load that
// has left (in the simulator, with deterministic service, at 64.5% of the
// backend's true utilization; with the discount at 72.5% or more). A
// request pays no I/O for it: one call of the local load function, one
// atomic load, no allocation; a process pays one exchange per Interval. If
// exchanges fail for longer than FleetOptions.MaxAge the Fleet falls back to
// the process's own utilization.
//
// # A FleetSource on Redis
//
// redisstore's Store.FleetSource is one: one hash per fleet holds each
// process's load and the time Redis recorded it, and one script call per
// exchange records this process's load, drops processes not heard from
// within an expiry, and sums the rest (ExampleFleet runs it on an embedded
// Redis). Another store needs the same three steps, atomically.
//
// The clock is Redis's TIME, so processes' clocks do not matter. The expiry
// should be a few Intervals or more: a killed process stops counting after
// it. The script reads the whole hash, O(processes) per exchange: N
// processes exchanging every 10ms make 100·N script calls and 100·N² field
// reads a second, which suits tens of processes; a larger
// fleet, or a shorter Interval, keeps running totals (HINCRBY of the change)
// and a sorted set of last-seen times instead. On a Redis Cluster the hash
// is one key, on one node. Stripe's fleet shedder counts every request in
// Redis instead (two round trips per request); this costs
// 1/Interval round trips a second per process, whatever its traffic, for a
// view up to one Interval old.
//
// # Shedding and the adaptive limit's priorities
//
// adaptive's own priority mechanisms ([adaptive.Partition],
// [adaptive.CriticalityOptions]) divide the limit's slots; a Shedder acts on
// a utilization, so it also works with a gauge that is not a limit (CPU,
// queue depth) or that spans processes (Fleet), and each Decision says what
// it read. It lives in its own package because it needs no limit at all,
// and so that adaptive's API does not grow by a second priority mechanism
// for those who use only the limit.
package shed
