// Package region splits one global quota across regions by demand: each
// region decides on its own store (its own Redis, close to its gateways)
// under the part of the quota it holds, and a reconciler per region moves
// parts between regions through a coordination store, debit before
// credit, so that a crash or a cut link can strand units but never grant
// them twice. A decision makes no cross-region call; a reconciler makes at
// most two per interval, whatever the request rate.
//
// Most users want New, with a redisstore.Store on the region's Redis as
// the local store and a rediscoord.Coordinator on the coordination Redis:
//
//	coord, _ := rediscoord.New(coordClient, regions, nil)
//	local, _ := redisstore.New(localClient, nil)
//	store, _ := region.New(local, coord, regions, "eu-west", nil)
//	defer store.Close()
//	limiter, _ := floodgate.New(store, floodgate.FixedWindow{Limit: 10000, Window: time.Minute},
//		&floodgate.Options{Name: "api"})
//
// The quota is the FixedWindow's Limit per window, worldwide, per key; a
// CalendarWindow splits the same way ("1,000,000 a month per tenant,
// worldwide", see Calendar windows below), and a TokenBucket as windows
// of half its burst (see Token buckets).
//
// # Token buckets
//
// A TokenBucket{Rate, Per, Burst} splits as the FixedWindow of Q =
// Burst/2 units per window of W = Q/Rate·Per (rounded up to the
// microsecond), under its name and "#tb" (kept apart from a FixedWindow
// of the same name). Over any span of time t, aligned or not, the regions
// together then admit at most Burst + Rate·t/Per, what the bucket itself
// admits starting full: the span meets at most t/W + 2 windows, each
// admitting at most Q ≤ Rate·W/Per across the regions, and 2Q ≤ Burst.
// The rate is kept (Q per W is Rate per Per, less the rounding of W); the
// burst is not: at most Burst/2 in one window, and Burst only across a
// boundary. A take of more than Burst/2 units (and at most Burst) is
// denied, never admitted. Decisions report the Burst as their Limit, what
// the region can still admit in the window as Remaining, and the window's
// end as RetryAfter of a denial. Bind refuses a Burst below 2, and a
// bucket whose W is shorter than 4·Interval + 2·Margin: raise Burst or
// shorten Interval. (A region's bucket cannot take a new rate at each
// interval while keeping its level without a script that records the rate
// in the state, which no local store has; see docs/regions.md.)
//
// # The allocator
//
// FairShare is max-min fairness (water-filling): every claimant whose want
// is below the water level gets its want, and the rest share what is left
// in proportion to their weights. ProportionalShare is YouTube Doorman's
// PROPORTIONAL_SHARE: every claimant gets up to its weighted equal share,
// and what the claimants who want less leave over goes to the others in
// proportion to how much more than their equal share they want. Doorman's
// documentation (youtube/doorman, doc/algorithms.md) gives the worked
// case both functions reproduce: capacity 120, wants 1000, 50 and 10 give
// 60, 50, 10 fairly and 69.6907…, 40.3092…, 10 proportionally. Floors
// come first: each claimant is guaranteed min(Floor, Want) before the rest
// is shared, and floors that add up to more than the capacity are an
// error rather than a silent scaling. ToUnits turns shares into whole
// units that never exceed the capacity.
//
// # The ledger
//
// Per quota (limiter name and key) and window w, the Coordinator holds for
// each region r: g_r(w), the units granted to r, which only grow within a
// window and are never below r's floor; d_r(w), the units r gave back
// (debits), which only grow; the transfer ids already applied; and r's
// last demand report. Each Exchange applies atomically (one Lua script on
// Redis, a mutex in MemCoordinator) and keeps
//
//	Σ_r (g_r(w) − d_r(w)) ≤ Q
//
// for every window: a raise takes only from Q − Σ(g − d), and a debit is
// recorded once per transfer id, never above what the region holds.
//
// # Decisions
//
// Region r decides on its local store under FixedWindow{Limit: A}, A being
// the grant g_r(w) it knows of (its floor when it knows of none). Local
// stores key state by (name, key, kind), not by the limit (see
// floodgate.Store), so every limit a region uses counts on one counter:
// the local count is r's admissions plus the units it debited. Near a
// boundary (within Options.Margin of it) A is the smaller of the two
// windows' grants, since the local store's clock (Redis TIME) may place
// the step in either; a step the local store still decided in another
// window than the one A was chosen for is undone and reported as a
// denial (Stats.LateSteps). OpTake never reserves into a later window and
// an OpSettle charge takes only what the region still holds (see Apply).
// Decision.Limit is A, the region's part, not the global quota (a
// TokenBucket's Decisions report its Burst: see Token buckets).
//
// # Moving units: debit before credit
//
// Every Interval (1s by default) each region's reconciler:
//
//  1. reads its local count (a check-only step) and its demand (units asked,
//     admitted or denied, in-process);
//  2. calls the coordinator once with its report and any debit not yet
//     acknowledged, and learns every region's grants, debits and reports;
//  3. computes its target for the current window (CurrentTargets: max-min
//     fair shares of the whole window, each region between what it has
//     used and what it has used plus its rate times the time left) and,
//     in the last 2·Interval + Margin of the window, for the next one
//     (NextTargets: FairShare of the rates times the window, with floors);
//  4. holding more than its target, it takes the excess out of its local
//     store with an OpTakeUpTo under its grant, atomically with its own
//     admissions: only units it has not admitted can go, and once taken it
//     can no longer admit them. Only after the local store took them, in
//     the window the debit is for (Result.At), does the debit exist, under
//     a fresh transfer id; a timeout or an error leaves them stranded
//     (the take asks floodgate.Request.UndoLate, so a local redisstore
//     that learns it made a timed-out take gives the units back to the
//     region instead);
//  5. calls the coordinator a second time, when there is something to
//     send: the debits (which the coordinator records once per id, so a
//     retry after a lost reply is harmless), and raises for the units it
//     lacks in the current window and its target of the next. The reply
//     names absolute grants, applied as they are: a lost reply is learned
//     at the next call.
//
// No debit is made within Margin of a window boundary. Hence, per window,
// Σ admitted_r ≤ Σ (g_r − local debits_r) ≤ Σ (g_r − d_r) ≤ Q.
//
// # Failures
//
// A reconciler killed at any step leaves at worst units taken out locally
// and never reported: stranded until their window ends, never granted to
// another region. A lost or failed call changes nothing or is applied
// once; the region keeps the grants it holds. A region cut off from the
// coordinator keeps deciding locally on the grants it holds — of the
// current window, and of the next if it was granted before the cut: its
// lease — and on its floor in every later window. The other regions count
// a region whose last report is older than Options.Stale (3 intervals) as
// wanting its floor only when they share out the next window, so they
// absorb the rest of its share in windows it holds no grant of: never
// within its lease. Its unused grant of the current window is stranded.
// A coordinator that is down is the same cut for every region: each keeps
// its lease, then its floor. The simulator (package regionsim) and
// rediscoord's tests inject each of these at every step of the protocol.
//
// # Clocks
//
// Windows are aligned to the Unix epoch. The local store decides on its
// own clock (Redis TIME); the Store chooses limits and debits on
// Options.Now. Margin must exceed their skew plus the local store's
// latency. The coordinator reads no clock: windows and report times are
// the senders'; regions' clocks must agree within a small part of an
// interval for staleness to mean anything (a skewed region is only
// counted as gone sooner or later).
//
// # Demand
//
// A region's demand is the units asked per second, averaged over up to
// 16 intervals, or over those since the demand changed: an interval that
// lies further from the average than Poisson noise explains starts the
// average afresh, and is itself dropped at the next interval (see the
// comment on entry.observe for why one interval is too noisy). A step of
// demand is followed at the second interval after it.
//
// # What was decided against the first design
//
// CurrentTargets does not use FairShare with the units used as floors:
// FairShare gives floors first and shares the rest, which is max-min
// fairness of the rest of the window only, and the simulator showed a
// region asking steadily for 36% of the quota ending with 30% because
// another spent its part early. The targets are instead max-min fair over
// the whole window with what each region used as a lower bound.
// NextTargets uses FairShare as designed.
//
// The guard against late steps (undo and deny) was added because the
// local store's clock and its latency, not only clock skew, decide which
// window a step lands in.
//
// # Several processes per region
//
// A region usually runs many processes (a gateway's pods) on one local
// Redis. Give their Stores one Peers (Options.Peers; rediscoord.NewPeers
// on the region's Redis):
//
//	peers, _ := rediscoord.NewPeers(localClient, "eu-west", nil)
//	store, _ := region.New(local, coord, regions, "eu-west", &region.Options{Peers: peers})
//
// Every interval each Store syncs once with the Peers (a local call): it
// adds the units its process was asked for to the region's demand and
// reads the grants the region holds, which it decides under. The Store
// holding the Peers' lease (3 intervals, renewed at each sync) is the
// leader: it drains the region's demand, runs the protocol above with
// it, and publishes the grants it learned (a second local call). The
// others make no cross-region call. The processes keep to one schedule,
// so that the leader counts each one's demand once per interval: the
// others sync at every multiple of Interval since the Unix epoch, the
// leader half an interval later (Store.NextReconcile).
//
// Safety does not rest on the lease. Two Stores that both lead for a
// while (a stalled leader past its lease) are two reconcilers of one
// region, which was always safe: they share the local count and every
// debit has its own transfer id. A process admits under the larger of the
// grants it learned and those it reads, and grants only grow within a
// window, so a stale or lost publication only admits less. A new leader
// measures for an interval before it reconciles, and uses its first two
// intervals' measures for one interval each (the processes' counts of
// them may straddle their starts). A leader that closes gives the lease
// up; one that dies is replaced when its lease ends, within 3 intervals,
// during which the region reconciles with no one and keeps its grants.
//
// Without Peers, each process's Store reconciles alone: still safe, but
// each reports only its own demand (the coordinator keeps the last
// report) and makes its own calls.
//
// Pods that lease from the region's Store (package lease over it) size
// their pools by the same allocator: with lease.Options.Fleet each holds
// its FairShare of the region's pods' demand rather than whatever its
// refills reached first (see package lease, "A fleet").
//
// # Calendar windows
//
// A CalendarWindow's windows vary in length (23 to 25 hours for a day in
// a zone with clock shifts, 28 to 31 days for a month), so they are not
// numbered by their start over their length: a calendar window's index is
// its first date's (days since 1970-01-01 for Day, weeks for Week, months
// for Month, the year for Year), the Store sends it to the coordinator
// (QuotaMessage.Indexed), and every step above uses the window's own start,
// end and length. The quota's ID carries the calendar (CalendarTag), so
// two calendars of one name keep apart. WindowOf gives a window's index
// and bounds. Processes and regions must name their zones
// (time.LoadLocation), not use time.Local. The simulator's TestCalendar
// splits a day in New York's zone over the night its clocks go forward.
//
// # What is not built
//
//   - FixedWindow, CalendarWindow and TokenBucket only: no sliding
//     windows or Limits, and a token bucket splits as windows of half its
//     burst (see Token buckets), not as a bucket.
//   - Keys: every key of a limiter is its own quota; at most
//     Options.MaxKeys (1,000) with the most demand are reconciled per
//     interval, the others keep the grants they hold, and their floors in
//     later windows. A key seen for the first time admits its floor until
//     the next interval.
//   - Units stranded by a crash or a cut are not recovered within their
//     window.
//   - The coordinator's Redis is one master: a failover that loses
//     acknowledged writes can grant units twice in the windows it touches,
//     unless rediscoord.Options.Replicas makes every Exchange wait for the
//     master's replicas (see package rediscoord).
package region
