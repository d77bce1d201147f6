package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"time"
)

// runMeta is what a run records in data/run.json beside bench.txt, so that
// -from renders the same page again (after a change to the charts, say)
// without running anything.
type runMeta struct {
	Machine    machine
	Components []componentMeta
	Commands   []string
	Rounds     int
	Benchtime  string
	Short      bool
	Started    time.Time
	Elapsed    time.Duration
}

type componentMeta struct {
	Name           string
	Built          bool
	Reason, Detail string
}

func (r *report) saveMeta() error {
	m := runMeta{
		Machine:   r.machine,
		Commands:  r.commands,
		Rounds:    r.rounds,
		Benchtime: r.opts.benchtime,
		Short:     r.opts.short,
		Started:   r.started,
		Elapsed:   r.elapsed,
	}
	for _, c := range r.components {
		m.Components = append(m.Components, componentMeta{Name: c.name, Built: c.built, Reason: c.reason, Detail: c.detail})
	}
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(r.opts.out, "data", "run.json"), append(data, '\n'), 0o644)
}

// loadMeta restores what the run that wrote benchTxt recorded, if it did.
func (r *report) loadMeta(benchTxt string) bool {
	data, err := os.ReadFile(filepath.Join(filepath.Dir(benchTxt), "data", "run.json"))
	if err != nil {
		return false
	}
	var m runMeta
	if json.Unmarshal(data, &m) != nil {
		return false
	}
	r.machine = m.Machine
	r.commands = m.Commands
	r.rounds = m.Rounds
	r.opts.benchtime = m.Benchtime
	r.opts.short = m.Short
	r.started = m.Started
	r.recordedElapsed = m.Elapsed
	for _, c := range m.Components {
		r.components = append(r.components, componentStatus{component: component{name: c.Name}, built: c.Built, reason: c.Reason, detail: c.Detail})
	}
	return true
}
