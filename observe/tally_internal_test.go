package observe

import "testing"

func TestTallyAddReusesCounters(t *testing.T) {
	var tally Tally
	a, b := tally.add("r", 0), tally.add("r", 0)
	c := tally.add("r", 2)
	if a != b || a == c || len(tally.sets) != 2 {
		t.Errorf("add(r, 0) twice and add(r, 2): %p %p %p, %d sets; want the first two shared and 2 sets", a, b, c, len(tally.sets))
	}
}
