package lease

// Stats are cumulative counts of a Store's decisions and round trips, over
// every limiter bound to it.
type Stats struct {
	// Local is the number of decisions served from a pool without waiting
	// for a round trip.
	Local int64
	// Waited is the number of decisions that waited for a lease round
	// trip: admitted, denied, or failed with the remote's error.
	Waited int64
	// Forwarded is the number of takes passed to the remote store (more
	// units than MaxBatch, reservations of Reserve or Wait that a pool
	// could not serve, and pools too contended to serve after a refill).
	// The steps the remote serves whatever the pools hold (checks, takes
	// up to n, settlements) are not counted.
	Forwarded int64
	// Leases is the number of lease round trips (Apply with OpTakeUpTo),
	// successful or not, in the background or waited for.
	Leases int64
	// Leased is the number of units the remote leased.
	Leased int64
	// Returned is the number of unused units the remote took back.
	Returned int64
	// Shares is the number of demands recorded with Options.Fleet, and
	// ShareErrors the number of those that failed.
	Shares      int64
	ShareErrors int64
}

// LocalRatio returns the fraction of decisions served without a round trip:
// Local / (Local + Waited + Forwarded), or 0 before any decision.
func (s Stats) LocalRatio() float64 {
	total := s.Local + s.Waited + s.Forwarded
	if total == 0 {
		return 0
	}
	return float64(s.Local) / float64(total)
}
