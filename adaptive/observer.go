package adaptive

// Observer receives a Limiter's events, for metrics and logs. Nil fields are
// skipped. The Limiter calls them without holding its lock, on the goroutine
// whose request caused the event, so they may call the Limiter (Stats, for
// example) but must be fast and safe for concurrent use. Events from
// concurrent requests may arrive in a different order than they happened.
//
// For gauges (the limit, requests in flight per partition), poll
// Limiter.Stats from the metrics system's collection callback instead.
type Observer struct {
	// OnLimitChange is called after the limit changes.
	OnLimitChange func(LimitChange)
	// OnReject is called for every rejected request.
	OnReject func(Rejection)
}

// LimitChange describes a change of a Limiter's limit.
type LimitChange struct {
	// Old and New are the limits before and after the change.
	Old, New int
	// InFlight is the number of requests in flight right after the change.
	InFlight int
}

// Rejection describes a rejected request.
type Rejection struct {
	// Partition is the partition the request asked for: a Partition name, a
	// criticality class, or "" for a request with no known partition.
	Partition string
	// Limit and InFlight are the limit and the number of requests in flight
	// when the request was rejected.
	Limit, InFlight int
}

// Stats is a snapshot of a Limiter's state and counters.
type Stats struct {
	// Limit is the current limit; InFlight the requests in flight; Waiting
	// the requests waiting in Acquire (WaitFIFO and WaitLIFO only).
	Limit, InFlight, Waiting int
	// Succeeded, Dropped and Ignored count ended tokens by outcome;
	// Rejected counts requests that got ErrLimitExceeded or ended their
	// wait on a done context.
	Succeeded, Dropped, Ignored, Rejected uint64
	// Partitions holds one entry per partition, in the order of
	// LimiterOptions.Partitions after an entry named "" for requests with no
	// known partition, or the four criticality classes from ClassCritical
	// to ClassBackground. It is empty for a limiter without partitions.
	Partitions []PartitionStats
}

// PartitionStats is the part of Stats that belongs to one partition.
type PartitionStats struct {
	// Name is the partition's name ("" for requests with no known partition).
	Name string
	// Limit is ceil(L·Share): the partition's guarantee, or in the ordered
	// criticality mode the cap its class may fill.
	Limit int
	// InFlight is the number of the partition's requests in flight.
	InFlight int
	// Rejected counts the partition's rejected requests.
	Rejected uint64
}
