package region

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"
)

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9 }

// TestDoorman reproduces the worked case of Doorman's doc/algorithms.md:
// capacity 120, wants 1000, 50 and 10.
func TestDoorman(t *testing.T) {
	claims := []Claim{{Want: 1000}, {Want: 50}, {Want: 10}}
	fair, err := FairShare(120, claims)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []float64{60, 50, 10} {
		if !near(fair[i], want) {
			t.Fatalf("FairShare = %v, want 60, 50, 10", fair)
		}
	}
	prop, err := ProportionalShare(120, claims)
	if err != nil {
		t.Fatal(err)
	}
	// Each gets up to 40; the 30 that the third leaves go to the others in
	// proportion to 960 and 10: 40 + 30·960/970 and 40 + 30·10/970.
	for i, want := range []float64{69.69072164948453608, 40.30927835051546392, 10} {
		if !near(prop[i], want) {
			t.Fatalf("ProportionalShare = %v, want 69.6907216…, 40.3092783…, 10", prop)
		}
	}
}

func TestWeightsAndFloors(t *testing.T) {
	// Weights 2:1:1 over a capacity of 100 that all want: 50, 25, 25.
	got, _ := FairShare(100, []Claim{{Want: 100, Weight: 2}, {Want: 100}, {Want: 100}})
	if !near(got[0], 50) || !near(got[1], 25) || !near(got[2], 25) {
		t.Fatalf("weighted FairShare = %v", got)
	}
	// A floor of 30 for a claimant that wants 20 gives it 20; one of 40
	// for a big one is kept, and the rest is shared.
	got, _ = FairShare(100, []Claim{{Want: 20, Floor: 30}, {Want: 1000, Floor: 40}, {Want: 1000}})
	if !near(got[0], 20) || !near(got[1], 40+20) || !near(got[2], 20) {
		t.Fatalf("FairShare with floors = %v, want 20, 60, 20", got)
	}
	// Wants that fit are met, both ways.
	for _, f := range []func(float64, []Claim) ([]float64, error){FairShare, ProportionalShare} {
		got, _ := f(100, []Claim{{Want: 10}, {Want: 20}, {Want: 30, Floor: 5}})
		if !near(got[0], 10) || !near(got[1], 20) || !near(got[2], 30) {
			t.Fatalf("wants that fit = %v", got)
		}
	}
}

func TestInvalid(t *testing.T) {
	bad := []struct {
		capacity float64
		claims   []Claim
	}{
		{-1, nil},
		{math.NaN(), nil},
		{math.Inf(1), nil},
		{10, []Claim{{Want: -1}}},
		{10, []Claim{{Want: math.NaN()}}},
		{10, []Claim{{Want: 1, Weight: -1}}},
		{10, []Claim{{Want: 1, Weight: math.Inf(1)}}},
		{10, []Claim{{Want: 1, Floor: math.NaN()}}},
		{10, []Claim{{Floor: 6}, {Floor: 5}}},
	}
	for _, b := range bad {
		for _, f := range []func(float64, []Claim) ([]float64, error){FairShare, ProportionalShare} {
			if got, err := f(b.capacity, b.claims); !errors.Is(err, ErrInvalid) || got != nil {
				t.Errorf("(%v, %+v) = %v, %v; want ErrInvalid", b.capacity, b.claims, got, err)
			}
		}
	}
}

// checkShares asserts what both functions promise: no claimant above its
// want or below min(Floor, Want), the sum within the capacity, and every
// want met when they fit.
func checkShares(t *testing.T, name string, capacity float64, claims []Claim, got []float64) {
	t.Helper()
	sum, wants := 0.0, 0.0
	for i, c := range claims {
		eps := 1e-9 * max(1, c.Want)
		if got[i] > c.Want+eps || got[i] < min(c.Floor, c.Want)-eps {
			t.Fatalf("%s(%v, %+v) = %v: claimant %d outside [min(Floor, Want), Want]", name, capacity, claims, got, i)
		}
		sum += got[i]
		wants += c.Want
	}
	eps := 1e-9 * max(1, capacity)
	if sum > capacity+eps {
		t.Fatalf("%s(%v, %+v) = %v: sum %v above the capacity", name, capacity, claims, got, sum)
	}
	if want := min(capacity, wants); sum < want-eps {
		t.Fatalf("%s(%v, %+v) = %v: sum %v below min(capacity, Σ wants) = %v", name, capacity, claims, got, sum, want)
	}
}

func randomClaims(r *rand.Rand) (float64, []Claim) {
	n := 1 + r.IntN(8)
	claims := make([]Claim, n)
	capacity := float64(r.IntN(10_000))
	floors := 0.0
	for i := range claims {
		claims[i] = Claim{Want: float64(r.IntN(5_000)), Weight: float64(r.IntN(4))}
		if r.IntN(3) == 0 && floors < capacity {
			claims[i].Floor = math.Floor(r.Float64() * (capacity - floors) / 2)
			floors += claims[i].Floor
		}
	}
	return capacity, claims
}

// TestProperties checks the promises on random claims, and max-min
// fairness: without floors, a claimant whose want is not met gets at
// least as much per unit of weight as any other.
func TestProperties(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 11))
	for range 20_000 {
		capacity, claims := randomClaims(r)
		fair, err := FairShare(capacity, claims)
		if err != nil {
			t.Fatal(err)
		}
		checkShares(t, "FairShare", capacity, claims, fair)
		prop, err := ProportionalShare(capacity, claims)
		if err != nil {
			t.Fatal(err)
		}
		checkShares(t, "ProportionalShare", capacity, claims, prop)
		units := ToUnits(int64(capacity), fair)
		var sum int64
		for i, u := range units {
			if float64(u) > math.Ceil(fair[i]) || float64(u) < math.Floor(fair[i])-1 {
				t.Fatalf("ToUnits(%v) = %v", fair, units)
			}
			sum += u
		}
		if sum > int64(capacity) {
			t.Fatalf("ToUnits(%v, %v) = %v: sum %d above the capacity", capacity, fair, units, sum)
		}
		for i := range claims {
			claims[i].Floor = 0
		}
		fair, _ = FairShare(capacity, claims)
		for i, c := range claims {
			if fair[i] >= c.Want-1e-9 {
				continue
			}
			for j, d := range claims {
				if fair[j]/weight(d) > fair[i]/weight(c)+1e-9 {
					t.Fatalf("FairShare(%v, %+v) = %v: claimant %d, short of its want, gets less per weight than %d", capacity, claims, fair, i, j)
				}
			}
		}
	}
}

func FuzzShares(f *testing.F) {
	f.Add(120.0, 1000.0, 50.0, 10.0, 1.0, 0.0)
	f.Add(0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
	f.Fuzz(func(t *testing.T, capacity, a, b, c, w, floor float64) {
		claims := []Claim{{Want: a, Weight: w, Floor: floor}, {Want: b}, {Want: c, Weight: w}}
		for _, fn := range []func(float64, []Claim) ([]float64, error){FairShare, ProportionalShare} {
			got, err := fn(capacity, claims)
			if err != nil {
				if !errors.Is(err, ErrInvalid) {
					t.Fatalf("error %v does not match ErrInvalid", err)
				}
				continue
			}
			if capacity > 1e12 || a > 1e12 || b > 1e12 || c > 1e12 || w > 1e6 || w != 0 && w < 1e-6 {
				continue // far from any quota: float error is relative, not bounded by 1e-9
			}
			checkShares(t, "share", capacity, claims, got)
		}
	})
}
