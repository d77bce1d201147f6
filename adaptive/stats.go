package adaptive

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
