// Package region will split one global quota across regions by demand
// (the issue "Regions"). Today it holds the allocator that the split is
// built on: pure functions that share a capacity among claimants by their
// demand, with weights and floors.
//
// FairShare is max-min fairness (water-filling): every claimant whose want
// is below the water level gets its want, and the rest share what is left
// in proportion to their weights. ProportionalShare is YouTube Doorman's
// PROPORTIONAL_SHARE: every claimant gets up to its weighted equal share,
// and what the claimants who want less leave over goes to the others in
// proportion to how much more than their equal share they want. Doorman's
// documentation (youtube/doorman, doc/algorithms.md) gives the worked
// case both functions reproduce: capacity 120, wants 1000, 50 and 10 give
// 60, 50, 10 fairly and 69.6907…, 40.3092…, 10 proportionally.
//
// Floors come first: each claimant is guaranteed min(Floor, Want) before
// the rest is shared, and floors that add up to more than the capacity
// are an error rather than a silent scaling. Results never exceed a
// claimant's want, and they add up to at most the capacity (to within one
// rounding of float64 arithmetic, which ToUnits removes when it turns
// shares into whole units).
//
// Not built yet: the per-region store, the reconciler and its
// debit-before-credit transfer protocol, the simulator and the example the
// issue asks for.
package region
