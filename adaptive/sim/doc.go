// Package sim is a deterministic discrete-event simulator of a server behind
// an adaptive.Limiter, used to prove the limits' behaviour and to draw the
// README's chart.
//
// A run is single-threaded on virtual time: an event heap of arrivals,
// service completions, phase changes and series ticks, with no goroutines,
// sleeps or timers, and seeded random streams (math/rand/v2 PCG), so that a
// Config and a seed give the same Result bit for bit.
//
// # Model
//
// The server has Workers workers and a FIFO queue; a request's service time
// is ServiceTime (Deterministic) or lognormal with that mean, optionally
// stretched by a collapse term when the server holds more requests than
// workers. Its latency therefore grows past the knee at Workers in flight,
// as Little's law says: about ServiceTime·n/Workers for n in flight.
//
// Load is open-loop Poisson arrivals, phase by phase, as multiples of the
// nominal capacity Workers/ServiceTime, split into classes (partitions) by
// weight. The limiter sits in front of the server, as the net/http
// middleware would: a rejected request costs nothing; an admitted one ends
// its token when the server finishes it, with Success if that was within the
// client's Deadline and Dropped otherwise (the client had given up, but the
// server did the work anyway). Goodput counts completions within the
// deadline.
//
// A class may have its own service time and deadline, and a cap on its
// requests in the server at once (Class.MaxInFlight: a class is then a user
// under a per-user concurrent-request limit, which the simulator models
// itself). Before the limiter, a shed.Shedder may shed requests by class
// (Config.Shedder). Several front processes (Config.Processes), each with
// its own limiter and shedder, may share the one server, as a fleet of API
// processes shares a backend; Env.Every runs periodic work on virtual
// time, such as the exchanges of a shed.Fleet.
//
// # Use
//
// Build a Config, give it a Limiter function that builds an
// adaptive.Limiter on the run's clock (Env.Now) and random source
// (Env.Rand), and call Run. Result.Series is the time series (also as CSV,
// see WriteCSV); Result.Stats and Result.Phase summarize stretches of the
// run. The package's tests hold the acceptance criteria of the adaptive
// limits; examples/adaptive prints a summary and writes the CSV.
package sim
