package httplimit

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/floodgate-go/floodgate"
)

// ErrUnknownPlan reports a request for which the plan function of NewPlans
// returned a name that is none of its plans'. The default ErrorHandler
// answers it with 500: the server's plan function and its plans disagree,
// which is a configuration bug, and neither a quota it was not given nor
// no limit at all is a safe guess.
var ErrUnknownPlan = errors.New("httplimit: unknown plan")

// unknownPlanError is ErrUnknownPlan with the name; it is allocated only
// on that error path.
type unknownPlanError struct{ name string }

func (e *unknownPlanError) Error() string {
	return ErrUnknownPlan.Error() + " " + strconv.Quote(e.name)
}

func (e *unknownPlanError) Is(target error) bool { return target == ErrUnknownPlan }

// Plan is one of the policies NewPlans chooses between per request: a
// service tier ("free", "pro"), the limiter its requests draw from and the
// names its limits have in the RateLimit fields. The limiters of every
// plan are built once, at start-up; a request only picks one.
//
// Whether a key that changes plans keeps what it has spent depends on the
// names of the plans' limiters (floodgate.Options.Name): see NewPlans.
//
// A Plan is a plain value; NewPlans copies it.
type Plan struct {
	// Name identifies the plan: NewPlans' plan function returns it. It
	// must not be empty, and the plans' names must differ. It is not the
	// limiter's name, which identifies the limiter's state in its store.
	Name string

	// Limiter decides the plan's requests, usually a limiter of a
	// floodgate.Limits ("5 per second and 20 per minute"). The plans'
	// limiters share one store and, to keep a key's counts across a
	// plan change, one floodgate.Options.Name (see NewPlans).
	Limiter *floodgate.Limiter

	// PolicyNames names the plan's policies in the RateLimit fields, as
	// Options.PolicyNames does for New: one name for a single algorithm,
	// one per limit of a floodgate.Limits in the same order. The default,
	// nil, names a Limits' limits after their quota and window
	// ("5-per-1s", "20-per-1m") and a single algorithm DefaultPolicyName.
	// The names must be distinct and printable ASCII. Names that differ
	// between plans ("free-burst", "pro-burst") tell a client which plan
	// it is on.
	PolicyNames []string
}

// NewPlans returns net/http middleware that limits each request under the
// plan choose names for it, configured by opts as New is. It returns an
// error matching floodgate.ErrInvalidConfig when a plan is unusable (no
// name, a name used twice, a nil limiter, policy names that do not fit
// its limits), choose is nil, there is no plan, or the options are
// unusable; opts.PolicyNames is refused (each Plan names its own).
//
// For each request not skipped the middleware finds the key (a request
// without one is ErrNoKey, before choose is called), then calls choose,
// which must be safe for concurrent use, and decides the request with
// that plan's limiter, as New does: the RateLimit fields list the plan's
// policies, under the plan's names. A name that is none of the plans' is
// ErrUnknownPlan, for ErrorHandler (500 by default) and OnError; to serve
// such requests under a default plan, have choose return that plan's
// name.
//
//	opts := &floodgate.Options{Name: "api"} // one state across plan changes
//	free, _ := floodgate.New(store, freeLimits, opts)
//	pro, _ := floodgate.New(store, proLimits, opts)
//	mw, err := httplimit.NewPlans([]httplimit.Plan{
//		{Name: "free", Limiter: free},
//		{Name: "pro", Limiter: pro},
//	}, func(r *http.Request) string {
//		if tier(r) == "pro" {
//			return "pro"
//		}
//		return "free"
//	}, &httplimit.Options{Key: httplimit.KeyByAPIKey("X-API-Key")})
//
// # Plan changes
//
// The key of a request is the same whatever its plan; what a key that
// changes plans (an upgrade, a downgrade, or a plan function that reads
// something the client controls) keeps is decided by its state identity
// in the store: (limiter name, key, kind), and for the limits of a
// Limits, also the limit's ordinal among the limits of its kind (see
// floodgate.Store).
//
//   - Plans whose limiters share one floodgate.Options.Name on one store
//     share state: a key keeps what it spent in the limits of a kind both
//     plans have, the i-th limit of a kind (token bucket, leaky bucket,
//     fixed window, sliding window, sliding log) of one plan's Limits
//     continuing the i-th of that kind of the other's, read under the new
//     plan's configuration; a limit of a kind the new plan lacks starts
//     from a new key's state, and one the new plan no longer uses
//     expires. A key that moves from "a token bucket of 5 per second and
//     a sliding log of 20 per minute" to "a token bucket of 50 per second
//     and a sliding window of 1,000 per minute" keeps its bucket (a bucket
//     emptied on the first plan is refilling on the second, at the
//     second's rate), while its sliding window starts afresh. (A single
//     algorithm's state is apart from a Limits' under the same name: only
//     plans that are both Limits, or both one algorithm, share state.)
//     Name the limiters alike whenever the plan function reads something
//     the client sends: otherwise a client resets its quota by changing
//     plans.
//   - Plans whose limiters have different names, the names derived from
//     different configurations among them, share nothing: a key that
//     changes plans starts the new plan with a whole quota, and finds its
//     old plan's state where it left it when it comes back.
func NewPlans(plans []Plan, choose func(r *http.Request) string, opts *Options) (func(http.Handler) http.Handler, error) {
	m, err := newMiddleware(opts)
	if err != nil {
		return nil, err
	}
	switch {
	case len(plans) == 0:
		return nil, fmt.Errorf("%w: no plan", floodgate.ErrInvalidConfig)
	case choose == nil:
		return nil, fmt.Errorf("%w: nil plan function", floodgate.ErrInvalidConfig)
	case m.o.PolicyNames != nil:
		return nil, fmt.Errorf("%w: Options.PolicyNames names New's limiter; give each Plan its PolicyNames", floodgate.ErrInvalidConfig)
	}
	m.choose = choose
	m.plans = make(map[string]*plan, len(plans))
	for _, pl := range plans {
		if pl.Name == "" {
			return nil, fmt.Errorf("%w: a plan without a name", floodgate.ErrInvalidConfig)
		}
		if _, dup := m.plans[pl.Name]; dup {
			return nil, fmt.Errorf("%w: two plans named %q", floodgate.ErrInvalidConfig, pl.Name)
		}
		p, err := m.newPlan(pl.Name, pl.Limiter, pl.PolicyNames)
		if err != nil {
			return nil, err
		}
		m.plans[pl.Name] = p
	}
	return m.handler, nil
}
